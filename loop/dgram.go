package loop

import (
	"math"

	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// Datagrams: a datagram socket's receive takes provided buffers as a
// stream's does, one datagram per buffer, but from the loop's datagram
// buffers (WithDatagramBuffers: 68 KiB each by default, so that any UDP
// datagram fits), not from the stream buffers (WithBufferRing), whose
// 4 KiB suit streams and would cut a datagram longer than them. They are
// made with the loop's first datagram receive. Each buffer
// starts with the header and source address a multishot RECVMSG lays out
// (ring.ParseRecvmsgOut), then the room for control messages the receive
// reserved (none unless RecvmsgProvidedControl asked for it), so a
// datagram is whole when it fits in the buffer's size less dgramHead
// bytes and that room (MaxDatagram); a longer one arrives truncated, with
// MSG_TRUNC, never as if it were whole. The epoll backend reads with
// recvmmsg(2) into the same layout.

const (
	// dgramNameLen is the room reserved for a datagram's source address:
	// any family's (a Unix socket's name is the longest).
	dgramNameLen = unix.SizeofSockaddrAny
	// dgramHead is what a datagram's buffer holds before its payload.
	dgramHead = ring.SizeofRecvmsgOut + dgramNameLen
	// dgramBatch is the most datagrams one recvmmsg(2) reads.
	dgramBatch = 16
)

// RecvmsgProvided receives datagrams on fd (UDP, or a Unix datagram
// socket) into the loop's provided buffers, multishot: each completion is
// one datagram. Data holds its payload (a datagram may be empty: Res 0 is
// not an end here), Name its source address and MsgFlags its message
// flags. A datagram longer than MaxDatagram arrives truncated: Data holds
// its first MaxDatagram bytes, Res its whole length, and MsgFlags has
// unix.MSG_TRUNC. ring.CQEFMore is set while the op stays armed; an error
// (-ECONNREFUSED on a connected UDP socket after an ICMP port unreachable,
// …) ends it, and the caller re-arms. When the buffers run out the loop
// parks the receive and resubmits it once buffers are back, as for
// RecvProvided; the datagrams wait in the socket meanwhile (or are
// dropped by the kernel when its receive buffer fills, as UDP does).
// Must be called on the loop goroutine.
func (io *IO) RecvmsgProvided(fd int, flags int, c Completer) (OpID, error) {
	return io.RecvmsgProvidedControl(fd, flags, 0, c)
}

// RecvmsgProvidedControl is RecvmsgProvided reserving room in each buffer
// for the datagram's control messages: the ancillary data recvmsg(2)
// returns for the receive options set on the socket (IP_RECVTOS,
// IP_PKTINFO, IPV6_RECVTCLASS, …). Completion.Control holds them, and
// MsgFlags has unix.MSG_CTRUNC when they did not fit. The room is
// controlLen rounded up to a multiple of 8 (ControlRoom), taken from the
// payload's: a datagram is whole up to MaxDatagram less it. It must
// leave room for a payload. controlLen 0 is RecvmsgProvided. Must be
// called on the loop goroutine.
func (io *IO) RecvmsgProvidedControl(fd int, flags int, controlLen int, c Completer) (OpID, error) {
	room := ControlRoom(controlLen)
	if controlLen < 0 || io.MaxDatagram()-room <= 0 {
		return 0, invalidArgument("recvmsg: datagram buffers of %d bytes hold no datagram with %d bytes of control messages (WithDatagramBuffers: more than %d bytes each)",
			io.l.cfg.dgramBufSize, max(controlLen, 0), dgramHead+room)
	}
	o, err := io.newOp(tagRecvmsgBuf, fd, c)
	if err != nil {
		return 0, err
	}
	o.multishot = true
	o.arg = uint32(flags)
	if room > 0 {
		o.extras().recvControl = uint32(room)
	}
	return io.startOp(o)
}

// ControlRoom is the room RecvmsgProvidedControl reserves for controlLen
// bytes of control messages: controlLen rounded up to a multiple of 8,
// which keeps the payload after it aligned.
func ControlRoom(controlLen int) int {
	if controlLen <= 0 {
		return 0
	}
	return (controlLen + 7) &^ 7
}

// recvControlRoom is the room o, a datagram receive, reserves for control
// messages.
func recvControlRoom(o *op) uint32 {
	if o.tag != tagRecvmsgBuf || o.extra == nil {
		return 0
	}
	return o.extra.recvControl
}

// MaxDatagram is the longest datagram RecvmsgProvided delivers whole: the
// datagram buffers' size (WithDatagramBuffers; 69,504 bytes by default)
// less the 128 bytes each datagram's header and source address take; 0
// when they are too small. A RecvmsgProvidedControl receive delivers
// ControlRoom(controlLen) bytes less.
func (io *IO) MaxDatagram() int {
	return max(int(io.l.cfg.dgramBufSize)-dgramHead, 0)
}

// SendTo sends buf as one datagram on fd to the address to: a raw
// sockaddr as Completion.Name gives one (sock.PutAddrPort writes one from
// a netip.AddrPort), or empty for a connected socket's peer. It copies to;
// buf belongs to the loop until the final completion, and may be empty.
// Res is the bytes sent (a datagram is sent whole or not at all) or -errno:
// -EMSGSIZE for a datagram too long for the socket, -ECONNREFUSED on a
// connected UDP socket after an ICMP port unreachable, -ENOBUFS when a
// device queue is full.
//
// When the socket cannot take the datagram now (its send buffer is full,
// or a Unix datagram peer's receive queue), a send without
// unix.MSG_DONTWAIT in flags waits for room: epoll waits for EPOLLOUT,
// io_uring lets the kernel retry it. With unix.MSG_DONTWAIT it completes
// with -EAGAIN instead, nothing sent, on both backends; PollWritable says
// when to try again. A Unix datagram socket must send with
// unix.MSG_DONTWAIT on io_uring: a SENDMSG the kernel retries after the
// peer's queue was found full sends an empty datagram and completes with
// 0, since its first attempt had already consumed the payload. Must be
// called on the loop goroutine.
func (io *IO) SendTo(fd int, buf []byte, to []byte, flags int, c Completer) (OpID, error) {
	return io.SendToControl(fd, buf, to, nil, flags, c)
}

// SendToControl is SendTo with control messages: control is sendmsg(2)'s
// ancillary data (UDP_SEGMENT, IP_TOS, IPV6_TCLASS, IP_PKTINFO, …), laid
// out as the kernel reads it. Like buf, it belongs to the loop until the
// final completion. Res counts the payload's bytes; the kernel's verdict
// on malformed or refused messages is -EINVAL, -EIO, …. Must be called on
// the loop goroutine.
func (io *IO) SendToControl(fd int, buf []byte, to []byte, control []byte, flags int, c Completer) (OpID, error) {
	if len(to) > dgramNameLen {
		return 0, invalidArgument("sendto: a %d-byte address (at most %d)", len(to), dgramNameLen)
	}
	o, err := io.newOp(tagSendmsg, fd, c)
	if err != nil {
		return 0, err
	}
	x := o.extras()
	x.bufs = append(x.bufs[:0], buf)
	x.nameLen = uint32(copy(x.name[:], to))
	if len(control) > 0 {
		x.control = control
	}
	o.arg = uint32(flags)
	return io.startOp(o)
}

// deliverDgram passes one completion of a datagram receive to c: a
// buffer's bytes (data) are split into the payload, source, control
// messages (in the room bytes the receive reserved) and flags.
func (io *IO) deliverDgram(c Completer, res int32, flags uint32, data []byte, room uint32) {
	io.current = Completion{Res: res, Flags: flags}
	// A failed receive may still name the buffer it selected (some
	// kernels do): the buffer goes back to the ring, and nothing in it
	// is a datagram.
	if data != nil && res >= 0 {
		h, name, control, payload, ok := ring.ParseRecvmsgOut(data, dgramNameLen, room)
		if !ok {
			// Not a layout the loop asked for: nothing in it can be
			// trusted, and it must not vanish silently.
			io.current.Res = -int32(unix.EIO)
		} else {
			io.current.Res = int32(min(h.PayloadLen, math.MaxInt32))
			io.current.Data, io.current.Name, io.current.MsgFlags = payload, name, h.Flags
			if len(control) > 0 {
				io.current.Control = control
			}
		}
	}
	io.deliverCompletion(c)
}
