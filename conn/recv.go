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

// deliverMax is the most bytes one OnData call gets from a bundle receive
// or from the kept bytes, so that a pause stops them within one receive
// buffer (hard-coded).
const deliverMax = 16 << 10

// Why reading is paused (Conn.pause bits).
const (
	pauseUser     = 1 << iota // PauseRead
	pauseWritable             // WithPauseReadWhenUnwritable, while unwritable
)

// armRecv starts the connection's receive. Must be called on c's loop.
func (c *Conn) armRecv() {
	if c.recvActive || c.state != stateOpen || c.eof || c.lingering || c.pause != 0 || c.pending() > 0 {
		return // paused, or kept bytes go first (resume arms after them)
	}
	var (
		id  loop.OpID
		err error
	)
	if c.unixSock || c.recvOnce {
		// Single shots: a multishot receive over AF_UNIX can miss the
		// peer's shutdown (RecvProvidedOnce), and one over TCP its reset
		// (resetsweep_linux.go).
		id, err = c.l.IO().RecvProvidedOnce(int(c.fd), 0, (*recvDone)(c))
	} else {
		id, err = c.l.IO().RecvProvided(int(c.fd), 0, (*recvDone)(c))
	}
	if err != nil {
		c.closeNow(c.opError("read", "", err))
		return
	}
	c.recvID, c.recvActive, c.recvCanceled = id, true, false
	c.ops++
}

// recvDone is a Conn seen as its receive's loop.Completer: a pointer
// conversion, so handing it to the loop allocates nothing and the op needs
// no pointer back to its Conn. sendDone and miscDone do the same for the
// other ops.
type recvDone Conn

// Complete handles the receive's completions. Must be called on c's loop.
func (d *recvDone) Complete(cp *loop.Completion) {
	c := (*Conn)(d)
	final := !cp.More()
	if final {
		c.recvActive = false
		c.ops--
	}
	if cp.Quarantined {
		// Given up without the kernel's final word: bytes may have been
		// consumed, so reset the connection (the stream is broken).
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
		c.rxSweeps = 2 // resetsweep_linux.go
		if tm := c.rare; tm != nil && (tm.read > 0 || tm.idle > 0) {
			// Only a timeout reads these (setTimeout starts them
			// afresh), so without one the clock is not read.
			t := now()
			tm.lastRead, tm.lastIO = t, t
		}
		c.deliverChunks(cp.Data)
		if final {
			c.armRecv()
		}
	case res == 0:
		if c.pending() > 0 {
			c.eofHeld = true // after the bytes kept while paused
			return
		}
		c.onEOF()
	case errnoOf(res) == unix.EAGAIN || errnoOf(res) == unix.EINTR || errnoOf(res) == unix.ENOBUFS,
		errnoOf(res) == unix.ECANCELED && c.recvCanceled:
		if final {
			c.armRecv() // unless still paused
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
	charged int    // cap(buf) as counted in the loop's kept total (charge)
}

// charge brings the loop's count of kept bytes (loopConns.kept) in line
// with the capacity of c's kept buffer. Must be called on c's loop after
// every change of that buffer.
func (c *Conn) charge() {
	if c.state >= stateClosing {
		return // closed: uncharge takes out what was counted
	}
	k := c.kin
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

// uncharge takes c's kept buffer out of the loop's count as it goes.
// Must be called on c's loop.
func (c *Conn) uncharge() {
	if k := c.kin; k != nil && k.charged > 0 {
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
func (c *Conn) overBudget(grow int) bool {
	if c.cfg.netConn {
		return true // a NetConn's connection holds what is already on its way
	}
	r := registryFor(c.l)
	share := c.cfg.inboundBudget / max(c.l.Group().Len(), 1)
	for r.kept+grow > share {
		mine := 0
		if c.kin != nil {
			mine = c.kin.charged
		}
		victim := c
		if r.keepers > 0 && mine < r.kept/r.keepers {
			victim = r.largestKeeper()
		}
		if victim == nil || victim.kin == nil || victim.kin.charged == 0 {
			victim = c
		}
		err := fmt.Errorf("%w: the group's inbound budget of %d bytes is reached (%d kept on this loop, %d by this connection)",
			ErrInboundLimit, c.cfg.inboundBudget, r.kept, victim.kin.chargedOrZero())
		victim.abort = true
		victim.closeNow(victim.opError("read", "", err))
		if victim == c {
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
		if x.state != stateOpen || x.kin == nil {
			continue
		}
		if best == nil || x.kin.charged > best.kin.charged {
			best = x
		}
	}
	return best
}

// keptIn returns c's kept input, making it on first use.
func (c *Conn) keptIn() *keptInput {
	if c.kin == nil {
		c.kin = new(keptInput)
	}
	return c.kin
}

// pending returns how many kept bytes the handler has not seen.
func (c *Conn) pending() int {
	if c.kin == nil {
		return 0
	}
	return c.kin.pending
}

// kept returns the kept bytes.
func (c *Conn) kept() []byte {
	if c.kin == nil {
		return nil
	}
	return c.kin.buf[c.kin.off:]
}

// consume drops the first n kept bytes.
func (c *Conn) consume(n int) {
	k := c.kin
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
			c.charge()
		}
	}
}

// deliverChunks delivers data in pieces of one receive buffer when it is
// longer (a bundle receive fills several buffers at once): deliverMax, as
// the resume of kept bytes delivers, or the loop's buffer size if larger. A handler that pauses reading, or a connection
// that does on becoming unwritable, stops the bytes after the piece it was
// given, and the rest is kept for the resume, as bytes arriving while
// paused are. So what a paused connection takes in stays within one
// receive buffer of what it had when it paused. Must be called on c's loop.
func (c *Conn) deliverChunks(data []byte) {
	if len(data) > deliverMax {
		chunk := max(int(c.l.Features().BufSize), deliverMax)
		for len(data) > chunk && c.pause == 0 && c.pending() == 0 && c.state == stateOpen {
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
func (c *Conn) deliver(data []byte) {
	if c.pause != 0 || c.pending() > 0 {
		// Paused, or resumed with kept bytes the resume task has yet to
		// deliver: these go after them.
		c.keep(data, true)
		return
	}
	if len(c.kept()) == 0 {
		c.handle(data, false)
		return
	}
	if c.keep(data, false) {
		c.handle(c.kept(), true)
	}
}

// keep appends data to the kept bytes; unseen marks bytes the handler has not been
// given yet. Past the inbound limit the connection fails. Must be called
// on c's loop. It reports false when the limit closed the connection.
func (c *Conn) keep(data []byte, unseen bool) bool {
	// The limit is on what the handler left unconsumed: the bytes kept
	// while paused are at most a receive or two (the receive stops at
	// once), and the budget counts them.
	n := len(c.kept()) - c.pending()
	if !unseen {
		n += len(data)
	}
	if n > c.cfg.inboundLimit {
		c.abort = true
		c.closeNow(c.opError("read", "", fmt.Errorf("%w: %d bytes kept, limit %d",
			ErrInboundLimit, n, c.cfg.inboundLimit)))
		return false
	}
	if !c.overBudget(len(data)) || c.state != stateOpen {
		return false
	}
	k := c.keptIn()
	defer c.charge()
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
		k.buf = k.buf[:copy(k.buf, c.kept())]
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
// data is c.kept() itself. Must be called on c's loop.
func (c *Conn) handle(data []byte, fromBuf bool) {
	if c.kin != nil {
		c.kin.pending = 0
	}
	if !c.hasRH {
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

// PauseRead stops reading (Netty's autoRead off): no receive is armed until
// ResumeRead, so the kernel's receive window fills and the peer's sends
// stall. On the connection's loop it takes effect at once: no OnData or
// OnRead follows until ResumeRead, and bytes the kernel had already taken
// are kept for then. From another goroutine it takes effect when the loop
// runs it, in order with the goroutine's other calls. The read timeout
// does not run while paused. It returns an error wrapping net.ErrClosed
// once the connection is closed. Safe for concurrent use.
func (c *Conn) PauseRead() error { return c.setPaused(pauseUser, true) }

// ResumeRead undoes PauseRead: the bytes kept while paused are delivered
// first (on the loop, in a task of their own, never inside the call), then
// a receive is armed again. Safe for concurrent use.
func (c *Conn) ResumeRead() error { return c.setPaused(pauseUser, false) }

// ReadPaused reports whether PauseRead is in effect (the writability
// pause of WithPauseReadWhenUnwritable is not counted). Safe for
// concurrent use.
func (c *Conn) ReadPaused() bool { return c.shared.Load()&sharedUserPaused != 0 }

func (c *Conn) setPaused(bit uint8, on bool) error {
	if bit == pauseUser {
		if on {
			c.shared.Or(sharedUserPaused)
		} else {
			c.shared.And(^sharedUserPaused)
		}
	}
	if c.l.InLoop() {
		if c.state >= stateClosing {
			return c.opError("read", "", net.ErrClosed)
		}
		c.applyPause(bit, on)
		return nil
	}
	if c.shared.Load()&sharedCloseReq != 0 {
		return c.opError("read", "", net.ErrClosed)
	}
	// Each call's own word, in the order the loop takes the tasks: the
	// shared bit cannot say it, since a pause on the loop and a resume
	// from a goroutine may set and clear it in the other order.
	if err := executeRetrying(c.l, func() { c.applyPause(bit, on) }); err != nil {
		return c.opError("read", "", net.ErrClosed)
	}
	return nil
}

// applyPause sets or clears one reason to pause and acts on a change of
// the whole: cancel the armed receive, or deliver what was kept and
// re-arm. Must be called on c's loop.
func (c *Conn) applyPause(bit uint8, on bool) {
	was := c.pause
	if on {
		c.pause |= bit
	} else {
		c.pause &^= bit
	}
	if c.state != stateOpen || (was == 0) == (c.pause == 0) {
		return
	}
	if c.pause != 0 {
		c.slowed = true
		if c.recvActive && !c.recvCanceled {
			c.recvCanceled = true
			cancelOp(c.l, c.recvID)
		}
		return
	}
	if c.rare != nil && c.rare.read > 0 {
		c.rare.lastRead = now() // the pause did not count against the timeout
	}
	if c.pending() > 0 || c.eofHeld {
		if !c.resumeQueued {
			c.resumeQueued = true
			// A task (not a tail task, which queued from the tail phase
			// would wait for the loop's next wakeup); a full bounded
			// queue is retried.
			if executeRetrying(c.l, c.resume) != nil {
				c.resumeQueued = false
			}
		}
		return
	}
	c.armRecv()
}

// resume delivers what was kept while paused, then the held FIN, then
// re-arms. Must be called on c's loop.
func (c *Conn) resume() {
	c.resumeQueued = false
	if c.state != stateOpen || c.pause != 0 {
		return
	}
	if c.pending() > 0 && c.hasRH {
		c.handle(c.kept(), true)
	}
	// OnData gets the kept bytes a receive buffer's worth at a time, so a
	// handler whose writes pause reading again (WithPauseReadWhenUnwritable)
	// stops them within one buffer.
	for c.pending() > 0 && c.state == stateOpen && c.pause == 0 {
		n := min(c.pending(), deliverMax)
		c.kin.pending -= n
		c.callData(c.kept()[:n])
		c.consume(n)
	}
	if c.state != stateOpen || c.pause != 0 {
		return
	}
	if c.eofHeld {
		c.eofHeld = false
		c.onEOF()
		return
	}
	c.armRecv()
}

// syncWritePause pauses or resumes reading with the connection's
// writability under WithPauseReadWhenUnwritable. Must be called on c's
// loop.
func (c *Conn) syncWritePause() {
	if c.cfg.pauseUnwritable == pauseNever {
		return
	}
	paused := c.pause&pauseWritable != 0
	want := c.wgen.Load()&1 == 1 &&
		(paused || c.cfg.pauseUnwritable == pauseAlways || c.backlogged())
	if want != paused {
		c.applyPause(pauseWritable, want)
	}
}

// backlogged reports whether bytes pile up where the default pause acts
// (WithPauseReadWhenUnwritable): c queues more than half its outbound
// limit, or its loop's connections more than outboundPressure in all.
// Must be called on c's loop.
func (c *Conn) backlogged() bool {
	return c.outCharged > c.cfg.outboundLimit/2 || registryFor(c.l).out > outboundPressure
}

// chargeOut brings the loop's count of queued outbound bytes in line with
// c's queue, n bytes (c.out.n, read under c.mu). Must be called on c's
// loop after every change of that queue; a Write from another goroutine
// is counted by the flush it queues.
func (c *Conn) chargeOut(n int) {
	registryFor(c.l).out += n - c.outCharged
	c.outCharged = n
}

// LimitRecv implements loop.RecvLimiter: a connection that may pause soon
// asks for receives that take less at a time, so that what it keeps when
// it pauses stays small. That is one that paused reading once, one that
// pauses at its high-water mark, one that is unwritable, and any while
// its loop's connections queue half the bytes that make the default pause
// act.
func (d *recvDone) LimitRecv() bool {
	c := (*Conn)(d)
	return c.slowed || c.cfg.pauseUnwritable == pauseAlways || c.wgen.Load()&1 == 1 ||
		registryFor(c.l).out > outboundPressure/2
}

// onEOF handles the peer's FIN: stop receiving, then close once every
// queued byte is sent (the peer may still be reading: a half-close). Under
// WithHalfClose, report it and stay open instead. Must be called on c's
// loop.
func (c *Conn) onEOF() {
	c.eof = true
	if c.rare != nil {
		stopTimer(&c.rare.readTimer)
	}
	if c.recvActive {
		cancelOp(c.l, c.recvID)
	}
	if c.cfg.halfClose {
		switch {
		case c.shutDone && c.miscOp() == nil:
			c.closeNow(io.EOF) // both directions are done
		case c.shutDone:
			// The shutdown's completion closes.
		default:
			c.callHalfClose()
		}
		return
	}
	c.drainEOF = true
	if !c.send.active {
		// Sends what is queued (the last send completion then closes),
		// or closes at once: never waits for a flush task, which a
		// terminating loop may have refused.
		c.startSend()
	}
}
