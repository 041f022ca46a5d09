package conn

import (
	"sync/atomic"

	"io"

	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// The receive path.
//
// A connection keeps one receive armed while open: RecvProvided, the loop's
// multishot receive into its provided-buffer ring, whose completions carry
// the bytes in a loop-owned buffer that returns to the ring as soon as
// OnData returns. A completion without F_MORE ends the multishot receive:
// -ENOBUFS (the ring ran dry; the kernel consumed nothing, so nothing is
// lost), a kernel that ends it for its own reasons, or a single-shot
// provided receive. While the connection is open, each of those re-arms;
// after ENOBUFS the connection first waits its turn in the loop's starved
// queue (starve.go), which re-arms as many receives per loop turn as the
// buffer ring can serve. Where the backend has no multishot receive, or refuses
// RecvProvided, the connection falls back to single-shot Recv into a buffer
// of its own (allocated on first use, kept for the connection's life).
//
// A zero-byte completion is the peer's FIN: receiving stops, queued writes
// are flushed, then the connection closes and OnClose reports io.EOF.

// singleRecvSize is the per-connection buffer of the single-shot fallback
// (hard-coded; the multishot path uses the loop's buffer ring instead).
const singleRecvSize = 16 << 10

// forceSingleRecv makes every connection use the single-shot fallback (a
// test seam set through export_test.go).
var forceSingleRecv atomic.Bool

// recvOp is the connection's armed receive and its completer.
type recvOp struct {
	c      *Conn
	id     loop.OpID
	active bool
	single bool // single-shot Recv into c.rbuf
}

// armRecv starts the connection's receive. Must be called on c's loop.
func (c *Conn) armRecv() {
	r := &c.recv
	if r.active || c.state != stateOpen || c.eof || c.lingering {
		return
	}
	if !r.single && (forceSingleRecv.Load() || !c.l.Features().MultishotRecv) {
		r.single = true
	}
	var (
		id  loop.OpID
		err error
	)
	if !r.single {
		id, err = c.l.RecvProvided(c.fd, 0, r)
		if err != nil {
			r.single = true // provided buffers refused: fall back for good
		}
	}
	if r.single {
		if c.rbuf == nil {
			c.rbuf = make([]byte, singleRecvSize)
		}
		id, err = c.l.Recv(c.fd, c.rbuf, 0, r)
	}
	if err != nil {
		c.closeNow(c.opError("read", "", err))
		return
	}
	r.id, r.active = id, true
	c.ops++
}

// Complete handles the receive's completions. Must be called on c's loop.
func (r *recvOp) Complete(cp *loop.Completion) {
	c := r.c
	final := !cp.More()
	if final {
		r.active = false
		c.ops--
	}
	if cp.Quarantined {
		// Given up without the kernel's final word: the kernel may still
		// write the buffer, and bytes may have been consumed. Never reuse
		// the buffer, and reset the connection (the stream is broken).
		c.rbuf = nil
		if c.state == stateOpen {
			c.abort = true
			c.closeNow(c.opError("read", "", loop.ErrGivenUp))
		}
		c.maybeFinish()
		return
	}
	if c.state != stateOpen || c.eof || c.lingering {
		c.maybeFinish()
		return
	}
	switch res := cp.Res; {
	case res > 0:
		if c.readTimeout > 0 || c.idleTimeout > 0 {
			// Only a timeout reads these (setTimeout starts them
			// afresh), so without one the clock is not read.
			t := now()
			c.lastRead, c.lastIO = t, t
		}
		data := cp.Data
		if r.single {
			data = c.rbuf[:res]
		}
		c.callData(data)
		if final {
			c.armRecv()
		}
	case res == 0:
		c.onEOF()
	case errnoOf(res) == unix.ENOBUFS:
		if final {
			c.starve() // re-armed from the loop's starved queue (starve.go)
		}
	case errnoOf(res) == unix.EAGAIN || errnoOf(res) == unix.EINTR:
		if final {
			c.armRecv()
		}
	default:
		if errnoOf(res) != unix.ECANCELED {
			// The stream failed: reset, so the peer cannot take what
			// it got for a complete stream.
			c.abort = true
		}
		c.closeNow(c.resultError("read", "recv", res))
	}
}

// onEOF handles the peer's FIN: stop receiving, then close once every
// queued byte is sent (the peer may still be reading: a half-close).
func (c *Conn) onEOF() {
	c.eof = true
	stopTimer(&c.readTimer)
	if c.recv.active {
		_ = c.l.Cancel(c.recv.id)
	}
	c.closeOnDrain = io.EOF
	if !c.send.active {
		c.mu.Lock()
		empty := c.out.n == 0
		c.mu.Unlock()
		if empty {
			c.closeNow(io.EOF)
		}
		// else the flush queued by the Write that filled the queue sends
		// it, and the last send completion closes.
	}
}
