package conn

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Control messages and batched reads on a NetPacketConn: the methods
// net.UDPConn has for them (ReadMsgUDP, WriteMsgUDP), and the ReadBatch of
// golang.org/x/net's ipv4.PacketConn. QUIC stacks look for these to send
// with GSO and ECN and to read several datagrams per call
// (docs/udp.md, "Control messages and batched reads").

// ReadMsgUDP reads the next datagram into b and its control messages into
// oob, as net.UDPConn's does: n and oobn are the bytes copied into b and
// oob, flags the message flags (unix.MSG_TRUNC when the datagram was longer
// than b, unix.MSG_CTRUNC when its control messages did not all fit in oob,
// or did not fit in the room the receive reserved for them), addr its
// source (nil for a Unix datagram socket's). The control messages are
// those recvmsg(2) returns for the receive options set on the socket
// through SyscallConn's Control (IP_RECVTOS, IP_PKTINFO, IPV6_RECVTCLASS,
// IPV6_RECVPKTINFO, …): a datagram the loop received before an option was
// set does not carry its message. It blocks as ReadFrom does and fails as
// it does: a *net.OpError wrapping os.ErrDeadlineExceeded once the read
// deadline has passed, net.ErrClosed after Close.
func (np *NetPacketConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	var from Addr
	n, oobn, flags, from, err = np.readMsg(b, oob)
	if ap := from.AddrPort(); ap.IsValid() {
		addr = net.UDPAddrFromAddrPort(ap)
	}
	return n, oobn, flags, addr, err
}

// ReadMsgUDPAddrPort is ReadMsgUDP returning the source as a
// netip.AddrPort, without allocating (invalid for a Unix source).
func (np *NetPacketConn) ReadMsgUDPAddrPort(b, oob []byte) (n, oobn, flags int, addr netip.AddrPort, err error) {
	var from Addr
	n, oobn, flags, from, err = np.readMsg(b, oob)
	return n, oobn, flags, from.AddrPort(), err
}

// readMsg takes the next datagram: its payload into p, its control
// messages into oob.
func (np *NetPacketConn) readMsg(p, oob []byte) (n, oobn, flags int, from Addr, err error) {
	if err := np.waitDgram(false); err != nil {
		return 0, 0, 0, Addr{}, err
	}
	d := np.popLocked()
	n, oobn, flags = d.copyOut(p, oob)
	np.recycleLocked(d)
	np.readDoneLocked()
	return n, oobn, flags, d.from, nil
}

// ReadBatch reads datagrams into ms, as golang.org/x/net's
// ipv4.PacketConn.ReadBatch does with recvmmsg(2): it waits for one, as
// ReadFrom does, then fills ms with it and those already queued behind it,
// up to len(ms), and returns how many it filled. Each message gets its
// payload scattered over Buffers (N bytes), its control messages in OOB
// (NN bytes, as ReadMsgUDP copies them), its source in Addr (a
// *net.UDPAddr, or a *net.UnixAddr on a unixgram socket) and Flags
// (unix.MSG_TRUNC, unix.MSG_CTRUNC). flags is 0, or unix.MSG_DONTWAIT to
// fail with EAGAIN instead of waiting; other flags fail with EOPNOTSUPP.
// Errors are *net.OpError, as ReadFrom's.
func (np *NetPacketConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	if flags&^unix.MSG_DONTWAIT != 0 {
		return 0, np.opError("read", os.NewSyscallError("recvmmsg", syscall.EOPNOTSUPP))
	}
	if len(ms) == 0 {
		return 0, nil
	}
	if err := np.waitDgram(flags&unix.MSG_DONTWAIT != 0); err != nil {
		return 0, err
	}
	k := 0
	for k < len(ms) && np.received.n > 0 {
		d := np.popLocked()
		m := &ms[k]
		m.N, m.NN, m.Flags = d.scatter(m.Buffers, m.OOB)
		m.Addr = d.from.NetAddr()
		np.recycleLocked(d)
		k++
	}
	np.readDoneLocked()
	return k, nil
}

// WriteMsgUDP sends b as one datagram to addr with the control messages
// in oob, as net.UDPConn's does: addr is nil on a socket DialPacketNet
// made (its peer), and must not be nil on one ListenPacketNet made. The
// messages go to sendmsg(2) as they are: UDP_SEGMENT has the kernel cut b
// into datagrams of that size (GSO), IP_TOS or IPV6_TCLASS sets the
// traffic class (ECN), IP_PKTINFO or IPV6_PKTINFO the source address. It
// copies b and oob and returns len(b) and len(oob) once they are queued,
// as WriteTo does, waiting as WriteTo does while the queue is full; it
// fails as WriteTo does, and with EINVAL when oob is not a well-formed
// sequence of control messages, or passes file descriptors (SCM_RIGHTS)
// on a unixgram socket. The kernel's verdict on the queued
// datagram is only counted (PacketConn().Stats().WriteErrors), but for an
// EIO on a send with UDP_SEGMENT (the route cannot take segmented
// sends): the next write with UDP_SEGMENT to that destination fails with
// it, a *net.OpError wrapping an *os.SyscallError as package net's.
func (np *NetPacketConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	var to Addr
	if addr != nil {
		if to, err = np.pc.destination(addr); err != nil {
			return 0, 0, err
		}
	}
	return np.writeMsg(b, oob, to, addr)
}

// WriteMsgUDPAddrPort is WriteMsgUDP to a netip.AddrPort (the zero one:
// the peer of a socket DialPacketNet made).
func (np *NetPacketConn) WriteMsgUDPAddrPort(b, oob []byte, addr netip.AddrPort) (n, oobn int, err error) {
	var to Addr
	if addr.IsValid() {
		to = Addr{ap: addr}
	}
	return np.writeMsg(b, oob, to, nil)
}

// errMissingAddress fails a WriteMsgUDP without a destination on a socket
// that has no peer, with package net's words.
var errMissingAddress = errors.New("missing address")

// writeMsg sends b with the control messages oob to to (the zero Addr:
// the connected peer). Its errors name the address the caller gave, as
// package net's do: given, else to's (none for the connected peer).
func (np *NetPacketConn) writeMsg(b, oob []byte, to Addr, given *net.UDPAddr) (int, int, error) {
	fail := func(err error) (int, int, error) {
		var oe *net.OpError
		if !errors.As(err, &oe) {
			oe = &net.OpError{Op: "write", Net: np.pc.network, Source: np.pc.laddr, Err: err}
		}
		switch {
		case given != nil:
			oe.Addr = given
		case to.IsValid():
			oe.Addr = net.UDPAddrFromAddrPort(to.ap)
		default:
			oe.Addr = nil
		}
		return 0, 0, oe
	}
	switch {
	case np.pc.connected && to.IsValid():
		return fail(net.ErrWriteToConnected)
	case !np.pc.connected && !to.IsValid():
		return fail(errMissingAddress)
	}
	valid, segmented := scanControl(oob, np.pc.family == unix.AF_UNIX)
	switch {
	case !valid:
		return fail(os.NewSyscallError("sendmsg", syscall.EINVAL))
	case segmented && np.takeGSORefused(to):
		return fail(os.NewSyscallError("sendmsg", syscall.EIO))
	}
	n, err := np.sendMsg(b, oob, to, "sendmsg")
	if err != nil {
		return fail(err)
	}
	return n, len(oob), nil
}

// scanControl reports whether oob is a sequence of control messages the
// kernel can parse (empty included) and the socket may send, and whether
// one is UDP_SEGMENT. A Unix socket may not pass file descriptors
// (SCM_RIGHTS): the loop sends after the write has returned, when the
// caller may have closed them (UDP ignores them).
func scanControl(oob []byte, unixSocket bool) (valid, segmented bool) {
	for len(oob) >= unix.SizeofCmsghdr { // the kernel ignores a shorter tail
		h, _, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil || unixSocket && h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_RIGHTS {
			return false, false
		}
		segmented = segmented || isUDPSegment(h.Level, h.Type)
		oob = rest
	}
	return true, segmented
}

// maxGSORefused bounds the destinations whose refused segmented send
// waits to be reported.
const maxGSORefused = 64

// noteGSORefused records that the kernel refused a send to to with EIO:
// what it does with a segmented send (UDP_SEGMENT) over a route that
// cannot take one (a device without checksum offload). The next
// segmented WriteMsgUDP to to fails with it, as package net's would have
// at once, so that the caller stops segmenting; the refused datagrams are
// lost.
func (np *NetPacketConn) noteGSORefused(to Addr) {
	np.mu.Lock()
	if np.gsoRefused == nil {
		np.gsoRefused = make(map[Addr]struct{})
	}
	if len(np.gsoRefused) < maxGSORefused {
		np.gsoRefused[to] = struct{}{}
	}
	np.mu.Unlock()
}

// takeGSORefused reports (once) a refused segmented send to to.
func (np *NetPacketConn) takeGSORefused(to Addr) bool {
	np.mu.Lock()
	defer np.mu.Unlock()
	if _, ok := np.gsoRefused[to]; ok {
		delete(np.gsoRefused, to)
		return true
	}
	return false
}

// copyOut copies d's payload into p and its control messages into oob:
// the bytes copied and the message flags, as recvmsg(2) reports them.
func (d *netDgram) copyOut(p, oob []byte) (n, oobn, flags int) {
	n = copy(p, d.buf)
	oobn, flags = d.controlOut(oob)
	if n < len(d.buf) {
		flags |= unix.MSG_TRUNC
	}
	return n, oobn, flags
}

// scatter is copyOut over several buffers, as recvmsg(2) fills an iovec.
func (d *netDgram) scatter(bufs [][]byte, oob []byte) (n, oobn, flags int) {
	for _, b := range bufs {
		n += copy(b, d.buf[n:])
	}
	oobn, flags = d.controlOut(oob)
	if n < len(d.buf) {
		flags |= unix.MSG_TRUNC
	}
	return n, oobn, flags
}

// controlOut copies d's control messages into oob and returns the bytes
// used and MSG_CTRUNC when they did not all fit (or the receive had cut
// them already).
func (d *netDgram) controlOut(oob []byte) (int, int) {
	n, cut := putControl(oob, d.ctl)
	if cut || d.ctrunc {
		return n, unix.MSG_CTRUNC
	}
	return n, 0
}

// putControl copies the control messages src into dst as the kernel's
// put_cmsg(9) fills a short buffer: whole messages while they fit, each
// taking its aligned space (the last one: what is left); the first that
// does not fit, cut to the room left with its length saying so, when a
// header fits; nothing after. It returns the bytes used and whether
// anything was cut.
func putControl(dst, src []byte) (int, bool) {
	at := 0
	for len(src) >= unix.SizeofCmsghdr {
		_, data, rest, err := unix.ParseOneSocketControlMessage(src)
		if err != nil {
			break // the kernel's own messages: not reached
		}
		room := len(dst) - at
		need := unix.CmsgLen(len(data))
		if room < unix.SizeofCmsghdr {
			return at, true
		}
		if room < need {
			copy(dst[at:], src[:room])
			putCmsgLen(dst[at:], room)
			return len(dst), true
		}
		copy(dst[at:], src[:need])
		at += min(unix.CmsgSpace(len(data)), room)
		src = rest
	}
	return at, false
}

// putCmsgLen sets the length field of the cmsghdr at the start of b: the
// platform's size_t (8 bytes on 64-bit Linux, 4 on 32-bit and Darwin).
func putCmsgLen(b []byte, n int) {
	if unix.SizeofCmsghdr-8 == 8 {
		binary.NativeEndian.PutUint64(b, uint64(n))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(n))
	}
}
