package conn

import (
	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// Control messages on a datagram socket (docs/udp.md, "Control messages
// and batched reads"). Received ones need room in the loop's buffers,
// which the receive reserves only while a receive option asks for them
// (received datagrams without any keep the whole buffer); sent ones go
// with the datagram to sendmsg(2).

// packetControlHandler is implemented by a handler that takes received
// datagrams' control messages (NetPacketConn). onPacketControl is
// OnPacket with them: control as recvmsg(2) returns them (valid only
// during the call), ctrunc set when they did not fit in the room the
// receive reserved.
type packetControlHandler interface {
	onPacketControl(pc *PacketConn, data []byte, from Addr, control []byte, ctrunc bool)
}

// maxControlRoom bounds the room a receive reserves for control messages;
// the options recvControlRoom knows of ask for less.
const maxControlRoom = 1024

// noteReceiveOptions re-reads the receive options set on fd after a
// Control call and reports whether the room their control messages need
// changed. Only UDP sockets are looked at.
func (pc *PacketConn) noteReceiveOptions(fd int) bool {
	if pc.family == unix.AF_UNIX {
		return false
	}
	room := min(loop.ControlRoom(recvControlRoom(fd, pc.family)), maxControlRoom, pc.l.IO().MaxDatagram()/2&^7)
	return int(pc.wantRoom.Swap(int32(room))) != room
}

// receiveRoom is the room for control messages the socket's receive
// reserves (or will, once re-armed).
func (pc *PacketConn) receiveRoom() int { return int(pc.wantRoom.Load()) }

// applyReceiveOptions has the loop re-arm the receive with the room the
// receive options now need, and waits until it has: a datagram that
// arrives after it returns carries the options' control messages. On a
// loop goroutine it does not wait (on the socket's own loop the receive
// is re-armed once the canceled one ends).
func (pc *PacketConn) applyReceiveOptions() {
	if pc.l.InLoop() {
		pc.rearmForRoom(nil)
		return
	}
	if loop.Current() != nil {
		_ = executeRetrying(pc.l, func() { pc.rearmForRoom(nil) })
		return
	}
	armed := make(chan struct{})
	if err := executeRetrying(pc.l, func() { pc.rearmForRoom(func() { close(armed) }) }); err != nil {
		return // the loop is ending, and the socket with it
	}
	select {
	case <-armed:
	case <-pc.done:
	}
}

// rearmForRoom cancels the armed receive when the room it reserves is not
// the room wanted; the cancel's final completion arms it again (arm),
// which runs done. Without a receive to change, done runs at once: the
// next arm takes the room wanted. Runs on the loop.
func (pc *PacketConn) rearmForRoom(done func()) {
	if pc.closing || !pc.recvArmed || pc.recvRoom == pc.receiveRoom() {
		if done != nil {
			done()
		}
		return
	}
	if done != nil {
		pc.roomWaiters = append(pc.roomWaiters, done)
	}
	pc.cancelRecv()
	if !pc.recvArmed {
		pc.arm() // it had ended: no completion will re-arm it
	}
}

// armedWithRoom records the room of the receive just armed and lets the
// Control calls waiting for it go on. Runs on the loop.
func (pc *PacketConn) armedWithRoom(room int) {
	pc.recvRoom = room
	if room != pc.receiveRoom() {
		return // changed again meanwhile: a waiter's own rearm follows
	}
	for _, done := range pc.roomWaiters {
		done()
	}
	clear(pc.roomWaiters)
	pc.roomWaiters = pc.roomWaiters[:0]
}

// ctlBufLocked returns a buffer of n bytes for a queued datagram's control
// messages, a spare one when n is small. Caller holds pc.mu.
func (pc *PacketConn) ctlBufLocked(n int) []byte {
	if k := len(pc.freeCtl); k > 0 && n <= smallControl {
		b := pc.freeCtl[k-1]
		pc.freeCtl = pc.freeCtl[:k-1]
		return b[:n]
	}
	return make([]byte, n, max(n, smallControl))
}

// smallControl is the size of the spare control buffers a socket keeps,
// more than a QUIC stack's messages (UDP_SEGMENT, IP_TOS, IP_PKTINFO)
// take together.
const smallControl = 256

// putDgram keeps a sent datagram's buffers for reuse.
func (pc *PacketConn) putDgram(d dgramOut) {
	pc.putBuf(d.buf)
	if cap(d.ctl) != smallControl {
		return
	}
	pc.mu.Lock()
	if len(pc.freeCtl) < maxSendsInFlight {
		pc.freeCtl = append(pc.freeCtl, d.ctl[:0])
	}
	pc.mu.Unlock()
}
