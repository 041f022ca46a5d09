package conn

import (
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// The receive path (docs/conn.md has the whole story). A connection keeps
// one RecvProvided armed while open and re-arms it after a completion
// without F_MORE; the loop parks a receive the buffer ring ran dry for. A
// zero-byte completion is the peer's FIN. Flow control and framing share
// one per-connection buffer of kept bytes (keptInput): bytes received
// while paused, and a ReadHandler's unconsumed ones. Bytes that arrive
// whole and are consumed whole are never kept.

// inbound is a Conn seen from its receive side: the receive op (it is the
// op's loop.Completer and loop.RecvLimiter), delivery to the handler,
// pausing and resuming, the bytes kept for the handler, and the inbound
// limit and budget. A pointer conversion: handing it to the loop allocates
// nothing and the op needs no pointer back to its Conn. Loop goroutine
// only, but for setPaused.
type inbound Conn

// conn returns c as the Conn it is.
func (c *inbound) conn() *Conn { return (*Conn)(c) }

// outbound returns c seen from its send side.
func (c *inbound) outbound() *outbound { return (*outbound)(c) }

// lifecycle returns c seen from its life's course.
func (c *inbound) lifecycle() *lifecycle { return (*lifecycle)(c) }

// deliverMax is the most bytes one OnData call gets from a bundle receive
// or from the kept bytes, so that a pause stops them within one receive
// buffer (hard-coded).
const deliverMax = 16 << 10

// Why reading is paused (Conn.pauseReasons bits).
const (
	pausedByUser     = 1 << iota // PauseRead
	pausedUnwritable             // WithPauseReadWhenUnwritable, while unwritable
)

// arm starts the connection's receive. Must be called on c's loop.
func (c *inbound) arm() {
	if c.flags.has(flagRecvArmed|flagPeerEOF|flagLingering) || c.state != stateOpen || c.pauseReasons != 0 || c.pending() > 0 {
		return // paused, or kept bytes go first (resume arms after them)
	}
	var (
		id  loop.OpID
		err error
	)
	if c.flags.has(flagRecvSingleShot) {
		// Single shots: a multishot receive over AF_UNIX can miss the
		// peer's shutdown (RecvProvidedOnce), and one over TCP its reset
		// (resetsweep_linux.go).
		id, err = c.l.IO().RecvProvidedOnce(int(c.fd), 0, c)
	} else {
		id, err = c.l.IO().RecvProvided(int(c.fd), 0, c)
	}
	if err != nil {
		c.lifecycle().closeNow(c.conn().opError("read", "", err))
		return
	}
	c.recvID = id
	c.flags.set(flagRecvArmed)
	c.flags.clear(flagRecvCanceled)
	c.opsInFlight++
}

// Complete handles the receive's completions. Must be called on c's loop.
func (c *inbound) Complete(cp *loop.Completion) {
	final := !cp.More()
	if final {
		c.flags.clear(flagRecvArmed)
		c.opsInFlight--
	}
	if cp.Quarantined {
		// Given up without the kernel's final word: bytes may have been
		// consumed, so reset the connection (the stream is broken).
		if c.state == stateOpen {
			c.lifecycle().closeWithReset(c.conn().opError("read", "", loop.ErrGivenUp))
		}
		c.lifecycle().maybeFinish()
		return
	}
	if c.state != stateOpen || c.flags.has(flagPeerEOF|flagLingering) {
		c.lifecycle().maybeFinish()
		return
	}

	switch res := cp.Res; {
	case res > 0:
		c.traffic.reads.Add(1)
		c.traffic.bytesIn.Add(uint64(res))
		c.resetSweepsLeft = 2 // resetsweep_linux.go
		if x := c.extras; x != nil && (x.readTimeout > 0 || x.idleTimeout > 0) {
			// Only a timeout reads these (setTimeout starts them
			// afresh), so without one the clock is not read.
			t := c.l.Now()
			x.lastRead, x.lastIO = t, t
		}
		c.deliverChunks(cp.Data)
		if final {
			c.arm()
		}
	case res == 0:
		if c.pending() > 0 {
			c.flags.set(flagEOFHeld) // after the bytes kept while paused
			return
		}
		c.onEOF()
	case errnoOf(res) == unix.EAGAIN || errnoOf(res) == unix.EINTR || errnoOf(res) == unix.ENOBUFS,
		errnoOf(res) == unix.ECANCELED && c.flags.has(flagRecvCanceled):
		if final {
			c.arm() // unless still paused
		}
	default:
		if errnoOf(res) != unix.ECANCELED {
			// The stream failed: reset, so the peer cannot take what
			// it got for a complete stream.
			c.flags.set(flagResetOnClose)
		}
		c.lifecycle().closeNow(c.conn().resultError("read", "recv", res))
	}
}

// LimitRecv implements loop.RecvLimiter: a connection that may pause soon
// asks for receives that take less at a time, so that what it keeps when
// it pauses stays small. That is one that paused reading once, one that
// pauses at its high-water mark, one that is unwritable, and any while
// its loop's connections queue half the bytes that make the default pause
// act.
func (c *inbound) LimitRecv() bool {
	return c.flags.has(flagPausedOnce) || c.cfg.pauseUnwritable == pauseAlways || c.outbound().unwritable() ||
		registryFor(c.l).outboundQueued > outboundPressure/2
}

// maxIdleInbuf is the largest inbound buffer a connection keeps once it
// is empty (hard-coded); a bigger one goes to stashPool.
const maxIdleInbuf = 64 << 10

// stashPool holds the large inbound buffers of connections that kept bytes
// while paused and drained them: a connection that pauses again under load
// takes one back instead of allocating (a proxy pauses constantly), while
// an idle connection holds none.
var stashPool sync.Pool // of *[]byte

// keptInput holds the bytes a connection keeps: those OnRead did not
// consume, and those received while reading is paused. Most connections
// never keep any, so it lives apart from Conn. Loop goroutine only.
type keptInput struct {
	buf     []byte // kept bytes from off on
	off     int    // start of the kept bytes in buf
	pending int    // bytes at the end of buf the handler has not seen
	charged int    // cap(buf) as counted in the loop's kept total (chargeKept)
}

// chargeKept brings the loop's count of kept bytes (loopConns.kept) in
// line with the capacity of c's kept buffer. Must be called on c's loop
// after every change of that buffer.
func (c *inbound) chargeKept() {
	if c.state >= stateClosing {
		return // closed: unchargeKept takes out what was counted
	}
	k := c.kept
	n := 0
	if k != nil {
		n = cap(k.buf)
	}
	old := 0
	if k != nil {
		old = k.charged
		k.charged = n
	}
	if n == old {
		return
	}
	r := registryFor(c.l)
	r.kept += n - old
	switch {
	case old == 0:
		r.keepers++
	case n == 0:
		r.keepers--
	}
}

// unchargeKept takes c's kept buffer out of the loop's count as it goes.
// Must be called on c's loop.
func (c *inbound) unchargeKept() {
	if k := c.kept; k != nil && k.charged > 0 {
		r := registryFor(c.l)
		r.kept -= k.charged
		r.keepers--
		k.charged = 0
	}
}

// overBudget enforces WithInboundBudget before c keeps grow more bytes:
// past its loop's share of the group's budget, the connection of the loop
// holding the most is closed (c itself if it holds at least the average of
// the loop's keeping connections). It reports false when that closed c.
// Must be called on c's loop.
func (c *inbound) overBudget(grow int) bool {
	if c.cfg.netConn {
		return true // a NetConn's connection holds what is already on its way
	}
	self := c.conn()
	r := registryFor(c.l)
	share := c.cfg.inboundBudget / max(c.l.Group().Len(), 1)
	for r.kept+grow > share {
		mine := 0
		if c.kept != nil {
			mine = c.kept.charged
		}
		victim := self
		if r.keepers > 0 && mine < r.kept/r.keepers {
			victim = r.largestKeeper()
		}
		if victim == nil || victim.kept == nil || victim.kept.charged == 0 {
			victim = self
		}
		err := fmt.Errorf("%w: the group's inbound budget of %d bytes is reached (%d kept on this loop, %d by this connection)",
			ErrInboundLimit, c.cfg.inboundBudget, r.kept, victim.kept.chargedOrZero())
		victim.lifecycle().closeWithReset(victim.opError("read", "", err))
		if victim == self {
			return false
		}
	}
	return true
}

func (k *keptInput) chargedOrZero() int {
	if k == nil {
		return 0
	}
	return k.charged
}

// largestKeeper returns the open connection of the loop whose kept bytes
// take the most memory. It scans every connection: it runs only when the
// loop is past its budget.
func (r *loopConns) largestKeeper() *Conn {
	var best *Conn
	for i := range r.conns.n {
		x := *r.conns.at(i)
		if x.state != stateOpen || x.kept == nil {
			continue
		}
		if best == nil || x.kept.charged > best.kept.charged {
			best = x
		}
	}
	return best
}

// ensureKept returns c's kept input, making it on first use.
func (c *inbound) ensureKept() *keptInput {
	if c.kept == nil {
		c.kept = new(keptInput)
	}
	return c.kept
}

// pending returns how many kept bytes the handler has not seen.
func (c *inbound) pending() int {
	if c.kept == nil {
		return 0
	}
	return c.kept.pending
}

// keptBytes returns the kept bytes.
func (c *inbound) keptBytes() []byte {
	if c.kept == nil {
		return nil
	}
	return c.kept.buf[c.kept.off:]
}

// consume drops the first n kept bytes.
func (c *inbound) consume(n int) {
	k := c.kept
	if k == nil {
		return // closed inside the handler: the buffer is gone
	}
	k.off += n
	if k.off == len(k.buf) {
		k.buf, k.off = k.buf[:0], 0
		if cap(k.buf) > maxIdleInbuf {
			b := k.buf
			stashPool.Put(&b)
			k.buf = nil
			c.chargeKept()
		}
	}
}

// deliverChunks delivers data in pieces of one receive buffer when it is
// longer (a bundle receive fills several buffers at once): deliverMax, as
// the resume of kept bytes delivers, or the loop's buffer size if larger.
// A handler that pauses reading, or a connection that does on becoming
// unwritable, stops the bytes after the piece it was given, and the rest is
// kept for the resume, as bytes arriving while paused are. So what a paused
// connection takes in stays within one receive buffer of what it had when
// it paused. Must be called on c's loop.
func (c *inbound) deliverChunks(data []byte) {
	if len(data) > deliverMax {
		chunk := max(int(c.l.Features().BufSize), deliverMax)
		for len(data) > chunk && c.pauseReasons == 0 && c.pending() == 0 && c.state == stateOpen {
			c.deliver(data[:chunk])
			data = data[chunk:]
		}
		if c.state != stateOpen {
			return
		}
	}
	c.deliver(data)
}

// deliver hands received bytes to the handler, or keeps them
// while reading is paused. Must be called on c's loop.
func (c *inbound) deliver(data []byte) {
	if c.pauseReasons != 0 || c.pending() > 0 {
		// Paused, or resumed with kept bytes the resume task has yet to
		// deliver: these go after them.
		c.keep(data, true)
		return
	}
	if len(c.keptBytes()) == 0 {
		c.handle(data, false)
		return
	}
	if c.keep(data, false) {
		c.handle(c.keptBytes(), true)
	}
}

// keep appends data to the kept bytes; unseen marks bytes the handler has
// not been given yet. Past the inbound limit the connection fails. Must be
// called on c's loop. It reports false when the limit closed the
// connection.
func (c *inbound) keep(data []byte, unseen bool) bool {
	// The limit is on what the handler left unconsumed: the bytes kept
	// while paused are at most a receive or two (the receive stops at
	// once), and the budget counts them.
	n := len(c.keptBytes()) - c.pending()
	if !unseen {
		n += len(data)
	}
	if n > c.cfg.inboundLimit {
		c.lifecycle().closeWithReset(c.conn().opError("read", "", fmt.Errorf("%w: %d bytes kept, limit %d",
			ErrInboundLimit, n, c.cfg.inboundLimit)))
		return false
	}
	if !c.overBudget(len(data)) || c.state != stateOpen {
		return false
	}
	k := c.ensureKept()
	defer c.chargeKept()
	switch {
	case k.buf == nil && unseen:
		if p, _ := stashPool.Get().(*[]byte); p != nil {
			k.buf = (*p)[:0]
		} else {
			k.buf = make([]byte, 0, max(len(data), 4096))
		}
	case k.buf == nil:
		k.buf = make([]byte, 0, max(len(data), 512))
	case k.off > 0 && len(k.buf)+len(data) > cap(k.buf):
		// Move the kept bytes to the front before growing.
		k.buf = k.buf[:copy(k.buf, c.keptBytes())]
		k.off = 0
	}
	k.buf = append(k.buf, data...)
	if unseen {
		k.pending += len(data)
	}
	return true
}

// handle gives data to the handler: all of it to OnData, or to a
// ReadHandler's OnRead, keeping what it did not consume. fromBuf says
// data is c.keptBytes() itself. Must be called on c's loop.
func (c *inbound) handle(data []byte, fromBuf bool) {
	if c.kept != nil {
		c.kept.pending = 0
	}
	if !c.flags.has(flagReadHandler) {
		c.callData(data)
		if fromBuf {
			c.consume(len(data))
		}
		return
	}
	n, ok := c.callRead(data)
	if !ok {
		return // closed
	}
	if fromBuf {
		c.consume(n)
	} else if n < len(data) {
		c.keep(data[n:], false)
	}
}

// callData runs OnData under recover; a panic closes the connection.
func (c *inbound) callData(data []byte) {
	defer c.lifecycle().failOnPanic("OnData")
	c.l.Running(&runOnData)
	c.h.OnData(c.conn(), data)
}

// callRead runs OnRead under recover and checks its count; ok is false
// when the connection failed instead (a panic leaves the zero results).
func (c *inbound) callRead(data []byte) (n int, ok bool) {
	defer c.lifecycle().failOnPanic("OnRead")
	c.l.Running(&runOnRead)
	n = c.h.(ReadHandler).OnRead(c.conn(), data)
	if n < 0 || n > len(data) {
		c.lifecycle().closeWithReset(c.conn().opError("read", "", fmt.Errorf("conn: OnRead consumed %d of %d bytes", n, len(data))))
		return 0, false
	}
	return n, true
}

// callHalfClose runs OnHalfClose, if the handler has it, under recover.
func (c *inbound) callHalfClose() {
	if !c.flags.has(flagHalfCloseHandler) {
		return
	}
	defer c.lifecycle().failOnPanic("OnHalfClose")
	c.l.Running(&runOnHalfClose)
	c.h.(HalfCloseHandler).OnHalfClose(c.conn())
}

// PauseRead stops reading (Netty's autoRead off): no receive is armed until
// ResumeRead, so the kernel's receive window fills and the peer's sends
// stall. On the connection's loop it takes effect at once: no OnData or
// OnRead follows until ResumeRead, and bytes the kernel had already taken
// are kept for then. From another goroutine it takes effect when the loop
// runs it, in order with the goroutine's other calls. The read timeout
// does not run while paused. It returns an error wrapping net.ErrClosed
// once the connection is closed. Safe for concurrent use.
func (c *Conn) PauseRead() error { return c.inbound().setPaused(pausedByUser, true) }

// ResumeRead undoes PauseRead: the bytes kept while paused are delivered
// first (on the loop, in a task of their own, never inside the call), then
// a receive is armed again. Safe for concurrent use.
func (c *Conn) ResumeRead() error { return c.inbound().setPaused(pausedByUser, false) }

// ReadPaused reports whether PauseRead is in effect (the writability
// pause of WithPauseReadWhenUnwritable is not counted). Safe for
// concurrent use.
func (c *Conn) ReadPaused() bool { return c.shared.has(sharedUserPaused) }

// setPaused sets or clears one reason to pause, on the loop: at once when
// called there, else as a task. Safe for concurrent use.
func (c *inbound) setPaused(reason uint8, on bool) error {
	if reason == pausedByUser {
		if on {
			c.shared.set(sharedUserPaused)
		} else {
			c.shared.clear(sharedUserPaused)
		}
	}
	if c.l.InLoop() {
		if c.state >= stateClosing {
			return c.conn().opError("read", "", net.ErrClosed)
		}
		c.applyPause(reason, on)
		return nil
	}
	if c.shared.has(sharedCloseRequested) {
		return c.conn().opError("read", "", net.ErrClosed)
	}
	// Each call's own word, in the order the loop takes the tasks: the
	// shared bit cannot say it, since a pause on the loop and a resume
	// from a goroutine may set and clear it in the other order.
	if err := executeRetrying(c.l, func() { c.applyPause(reason, on) }); err != nil {
		return c.conn().opError("read", "", net.ErrClosed)
	}
	return nil
}

// applyPause sets or clears one reason to pause and acts on a change of
// the whole: cancel the armed receive, or deliver what was kept and
// re-arm. Must be called on c's loop.
func (c *inbound) applyPause(reason uint8, on bool) {
	was := c.pauseReasons
	if on {
		c.pauseReasons |= reason
	} else {
		c.pauseReasons &^= reason
	}
	if c.state != stateOpen || (was == 0) == (c.pauseReasons == 0) {
		return
	}
	if c.pauseReasons != 0 {
		c.flags.set(flagPausedOnce)
		if c.flags.has(flagRecvArmed) && !c.flags.has(flagRecvCanceled) {
			c.flags.set(flagRecvCanceled)
			cancelOp(c.l, c.recvID)
		}
		return
	}
	if c.extras != nil && c.extras.readTimeout > 0 {
		c.extras.lastRead = c.l.Now() // the pause did not count against the timeout
	}
	if c.pending() > 0 || c.flags.has(flagEOFHeld) {
		if !c.flags.has(flagResumeQueued) {
			c.flags.set(flagResumeQueued)
			// A task (not a tail task, which queued from the tail phase
			// would wait for the loop's next wakeup); a full bounded
			// queue is retried.
			if executeRetrying(c.l, c.resume) != nil {
				c.flags.clear(flagResumeQueued)
			}
		}
		return
	}
	c.arm()
}

// resume delivers what was kept while paused, then the held FIN, then
// re-arms. Must be called on c's loop.
func (c *inbound) resume() {
	c.flags.clear(flagResumeQueued)
	if c.state != stateOpen || c.pauseReasons != 0 {
		return
	}
	if c.pending() > 0 && c.flags.has(flagReadHandler) {
		c.handle(c.keptBytes(), true)
	}
	// OnData gets the kept bytes a receive buffer's worth at a time, so a
	// handler whose writes pause reading again (WithPauseReadWhenUnwritable)
	// stops them within one buffer.
	for c.pending() > 0 && c.state == stateOpen && c.pauseReasons == 0 {
		n := min(c.pending(), deliverMax)
		c.kept.pending -= n
		c.callData(c.keptBytes()[:n])
		c.consume(n)
	}
	if c.state != stateOpen || c.pauseReasons != 0 {
		return
	}
	if c.flags.has(flagEOFHeld) {
		c.flags.clear(flagEOFHeld)
		c.onEOF()
		return
	}
	c.arm()
}

// syncWritePause pauses or resumes reading with the connection's
// writability under WithPauseReadWhenUnwritable. Must be called on c's
// loop.
func (c *inbound) syncWritePause() {
	if c.cfg.pauseUnwritable == pauseNever {
		return
	}
	paused := c.pauseReasons&pausedUnwritable != 0
	want := c.outbound().unwritable() &&
		(paused || c.cfg.pauseUnwritable == pauseAlways || c.outbound().backlogged())
	if want != paused {
		c.applyPause(pausedUnwritable, want)
	}
}

// onEOF handles the peer's FIN: stop receiving, then close once every
// queued byte is sent (the peer may still be reading: a half-close). Under
// WithHalfClose, report it and stay open instead. Must be called on c's
// loop.
func (c *inbound) onEOF() {
	c.flags.set(flagPeerEOF)
	if c.extras != nil {
		stopTimer(&c.extras.readTimer)
	}
	if c.flags.has(flagRecvArmed) {
		cancelOp(c.l, c.recvID)
	}
	if c.cfg.halfClose {
		switch {
		case c.flags.has(flagShutdownStarted) && c.lifecycle().activeOp() == nil:
			c.lifecycle().closeNow(io.EOF) // both directions are done
		case c.flags.has(flagShutdownStarted):
			// The shutdown's completion closes.
		default:
			c.callHalfClose()
		}
		return
	}
	c.flags.set(flagCloseWhenDrained)
	if !c.flags.has(flagSendArmed) {
		// Sends what is queued (the last send completion then closes),
		// or closes at once: never waits for a flush task, which a
		// terminating loop may have refused.
		c.outbound().startSend()
	}
}
