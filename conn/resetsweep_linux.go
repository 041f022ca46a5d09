package conn

import (
	"io"
	"time"

	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// The reset sweep (docs/conn.md, "TCP receives that miss a reset"; the
// measurements are in docs/decisions.md, "The reset sweep"). A kernel's
// multishot receive over TCP can post a peer's bytes and then never post
// the reset that follows them (ring.TestRecvResetMiss): the connection
// would wait for good, its fd open, with no timeout set. So every
// resetSweepEvery each io_uring loop looks at the TCP connections that
// received bytes in the last two sweeps and still have a multishot receive
// armed, and asks the kernel for the socket's state (getsockopt TCP_INFO,
// which changes nothing). One the peer has reset or shut down (TCP_CLOSE,
// TCP_CLOSE_WAIT) has its receive canceled and re-armed as a single shot
// (flagRecvSingleShot), which reads what is left and then reports the end:
// the reset's ECONNRESET or the FIN, closing the connection as they always
// do. A receive that was merely about to complete loses nothing: the
// single shot takes the bytes and the end in order.
//
// The same sweep, on both backends, looks at every paused TCP connection:
// with no receive armed, nothing would tell it that its peer is gone. One
// whose socket is closed (a reset, or keepalive probes that went
// unanswered) closes with the socket's error; one paused for its loop's
// budget of kept bytes whose peer sent its FIN closes too, since the frame
// it holds can no longer complete. Other paused connections keep waiting
// for their resume after a FIN: their peer may still read.
//
// The hot path pays one byte store per receive completion
// (resetSweepsLeft); the clock is not read. A sweep walks the loop's
// connections once and makes one getsockopt per connection that received
// bytes since the sweep before last.

// resetSweepEvery is the reset sweep's period (hard-coded): a connection
// whose receive missed a reset is closed within two of them.
const resetSweepEvery = 2 * time.Second

// startResetSweep starts the reset sweep of r, l's registry; a shutdown
// hook stops it. Called once per loop, on it.
func (r *loopConns) startResetSweep(l *loop.Loop) {
	if r.closing {
		return
	}
	t, err := l.ScheduleWithFixedDelay(resetSweepEvery, resetSweepEvery, r.resetSweep)
	if err != nil {
		return // shutting down
	}
	if _, err := l.AddShutdownHook(func() { t.Stop() }); err != nil {
		t.Stop()
	}
}

// resetSweep is one pass of the reset sweep. On the loop.
func (r *loopConns) resetSweep() {
	for i := range r.conns.n {
		c := *r.conns.at(i)
		if c.pauseReasons != 0 && c.state == stateOpen {
			c.inbound().checkPausedPeer()
			continue
		}
		if c.resetSweepsLeft == 0 {
			continue
		}
		c.resetSweepsLeft--
		c.inbound().checkReset()
	}
}

// checkReset re-arms c's receive as a single shot if it is multishot and
// the socket's peer is gone. Must be called on c's loop.
func (c *inbound) checkReset() {
	if c.state != stateOpen || !c.flags.has(flagRecvArmed) || c.flags.has(flagRecvCanceled|flagRecvSingleShot) {
		return
	}
	// tcpi_state is tcp_info's first byte: the kernel copies as much as
	// asked for, and nothing is allocated.
	state, err := unix.GetsockoptByte(int(c.fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil || (state != tcpClose && state != tcpCloseWait) {
		return
	}
	// The ECANCELED completion re-arms (inbound.Complete), now single.
	c.flags.set(flagRecvSingleShot | flagRecvCanceled)
	cancelOp(c.l, c.recvID)
}

// checkPausedPeer closes c, whose reading is paused, if its peer is gone:
// its socket is closed (a reset, unanswered keepalive probes), or its peer
// sent its FIN while c is paused for the loop's budget of kept bytes. Must
// be called on c's loop.
func (c *inbound) checkPausedPeer() {
	if c.shared.has(sharedUnix) {
		return
	}
	state, err := unix.GetsockoptByte(int(c.fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	switch {
	case err != nil:
	case state == tcpClose:
		serr, _ := unix.GetsockoptInt(int(c.fd), unix.SOL_SOCKET, unix.SO_ERROR)
		errno := unix.Errno(serr)
		if serr == 0 {
			errno = unix.ECONNRESET
		}
		c.flags.set(flagResetOnClose)
		c.lifecycle().closeNow(c.conn().opError("read", "recv", errno))
	case state == tcpCloseWait && c.pauseReasons&pausedByBudget != 0:
		c.lifecycle().closeNow(io.EOF)
	}
}

// TCP states of tcp_info.tcpi_state (include/net/tcp_states.h).
const (
	tcpClose     = 7 // TCP_CLOSE: reset, or both sides closed
	tcpCloseWait = 8 // TCP_CLOSE_WAIT: the peer's FIN came
)
