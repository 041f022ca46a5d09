package conn

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

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
	pausedUnwritable             // its outbound queue passed the mark where reading pauses (syncWritePause)
	pausedByBudget               // its loop keeps more than its budget, and c held bytes without progress (overKeptBudget)
	pausedByLimit                // it passed a declared limit and is closing (lifecycle.failLimit)
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
// its loop's connections queue half their budget. One whose handler's
// answers outgrow its input takes one buffer at a time: a receive of
// pipelined requests it may answer only a few of would otherwise be kept
// whole (64 KiB of requests whose answers never get read). So does every
// connection of a loop that keeps more than its budget of kept bytes, so
// that each new one keeps a buffer, not a bundle, before it can pause. A
// NetConn sizes its receives to what its reader takes (recvAhead).
func (c *inbound) LimitRecv() loop.RecvLimit {
	if kept, _ := c.l.BufferBudget(); registryFor(c.l).keptTotal() > kept {
		// The loop keeps more than its budget: a connection that keeps
		// what it receives next (a frame that never ends) must keep
		// little before the budget pauses it.
		return loop.RecvOneBuffer
	}
	if ra, ok := c.h.(recvAhead); ok {
		return ra.recvAhead()
	}
	if !c.flags.has(flagPausedOnce) && c.cfg.pauseUnwritable != pauseAlways && !c.outbound().unwritable() &&
		!c.outbound().loopQueuedHalf() {
		return loop.RecvUnlimited
	}
	if c.gain > gainOne || c.cfg.flow.sharedGain(c.l) > gainOne {
		return loop.RecvOneBuffer
	}
	return recvHalf
}

// recvHalf is the limit of a receive that may pause soon: half of what an
// io_uring multishot receive takes by default (loop.RecvLimiter).
const recvHalf loop.RecvLimit = 512 << 10

// A recvAhead is a handler that sizes its connection's receives itself
// (NetConn, whose receives follow its reader), unless the loop keeps more
// than its budget.
type recvAhead interface {
	recvAhead() loop.RecvLimit
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
// consume, and those received while reading is paused or beyond what the
// handler may answer at once. Most connections never keep any, so it lives
// apart from Conn. Loop goroutine only.
type keptInput struct {
	buf     []byte        // kept bytes from off on
	off     int           // start of the kept bytes in buf
	pending int           // bytes at the end of buf the handler has not seen
	charged int           // the kept bytes as counted in the loop's kept total (chargeKept)
	since   time.Duration // loop clock (Loop.Now) of the last progress: bytes first kept, or some consumed
}

// chargeKept brings the loop's count of kept bytes (loopConns.kept) in
// line with the bytes c keeps. Must be called on c's loop after every
// change of them.
func (c *inbound) chargeKept() {
	if c.state >= stateClosing {
		return // closed: unchargeKept takes out what was counted
	}
	k := c.kept
	if k == nil {
		return
	}
	n, old := len(k.buf)-k.off, k.charged
	if n == old {
		return
	}
	k.charged = n
	r := registryFor(c.l)
	r.kept += n - old
	switch {
	case old == 0:
		r.keepers++
	case n == 0:
		r.keepers--
	}
	if n < old {
		r.resumeUnderBudget(c.l)
	}
	r.checkOverload(c.l)
}

// unchargeKept takes c's kept buffer out of the loop's count as it goes.
// Must be called on c's loop.
func (c *inbound) unchargeKept() {
	r := registryFor(c.l)
	if c.pauseReasons&pausedByBudget != 0 {
		c.pauseReasons &^= pausedByBudget
		c.shared.clear(sharedBudgetPaused)
		r.budgetPaused.Add(-1)
	}
	if k := c.kept; k != nil && k.charged > 0 {
		r.kept -= k.charged
		r.keepers--
		k.charged = 0
		r.resumeUnderBudget(c.l)
		r.checkOverload(c.l)
	}
}

// keptStallAge and keptStallBytes say when a connection holds kept bytes
// without progress (hard-coded): once the bytes it holds times the time
// since it last consumed any (or first kept them) reach keptStallBytes ×
// keptStallAge. A connection holding 64 KiB stalls after 100 ms without
// progress, one holding 1 MiB after about 6 ms, while an honest frame
// arriving at the speed of a local network completes first.
const (
	keptStallAge   = 100 * time.Millisecond
	keptStallBytes = 64 << 10
)

// overloadFactor is how many times its budget of kept bytes a loop keeps
// before it is overloaded and its servers stop accepting (hard-coded):
// stopping costs new clients their service, so it is kept for floods that
// pausing did not hold, well past the twice the budget where every
// connection that grows without progress pauses.
const overloadFactor = 4

// keptTotal returns the bytes the connections of r's loop keep: their kept
// input and their NetConns' unread bytes.
func (r *loopConns) keptTotal() int { return r.kept + int(r.netKept.Load()) }

// checkOverload updates r.overloaded: set once the loop keeps more than
// overloadFactor times its budget of kept bytes (pausing the connections
// that hold bytes without progress did not hold the total: a flood of
// connections each keeping what it sent before it could pause), cleared
// once it is back under twice the budget. While every worker loop of a
// server is overloaded, the server stops accepting (listener.overloaded).
// Queued bytes do not overload a loop: past their budget each
// connection's high-water mark shrinks to its share
// (outbound.highWaterNow), which bounds their total by the number of
// connections, and peers that never read would otherwise hold accepting
// off for good. Must be called on l, after a change of the total.
func (r *loopConns) checkOverload(l *loop.Loop) {
	kept, _ := l.BufferBudget()
	k := r.keptTotal()
	switch over := r.overloaded.Load(); {
	case !over && k > overloadFactor*kept:
		r.overloaded.Store(true)
	case over && k <= 2*kept:
		r.overloaded.Store(false)
	}
}

// overKeptBudget applies the loop's budget of kept bytes
// (loop.WithBufferBudget) to c as its kept bytes grow (overKeptBudgetHeld).
// Must be called on c's loop.
func (c *inbound) overKeptBudget() {
	if c.kept != nil {
		c.overKeptBudgetHeld(len(c.keptBytes()), c.kept.since)
	}
}

// overKeptBudgetHeld applies the loop's budget of kept bytes to c, which
// holds held bytes without progress since since (its kept input, or a
// NetConn's unread bytes). Past the budget, c pauses reading if it stalls
// (keptStallAge); past twice the budget, it pauses if it holds bytes at
// all without having made progress since, so that connections filling
// their frames faster than they stall cannot take the total further.
// Nobody is reset for the total: the paused connections resume when the
// loop keeps less than three quarters of its budget (resumeUnderBudget).
// Must be called on c's loop.
func (c *inbound) overKeptBudgetHeld(held int, since time.Duration) {
	if c.stallsBudget(held, since) {
		c.shared.set(sharedBudgetPaused)
		c.pauseForBudget()
	}
}

// stallsBudget reports whether c, holding held bytes without progress
// since since, must pause for its loop's budget of kept bytes
// (overKeptBudgetHeld). Must be called on c's loop.
func (c *inbound) stallsBudget(held int, since time.Duration) bool {
	r := registryFor(c.l)
	budget, _ := c.l.BufferBudget()
	total := r.keptTotal()
	if total <= budget || held == 0 || c.pauseReasons&pausedByBudget != 0 || c.state != stateOpen {
		return false
	}
	age := c.l.Now() - since
	return total > 2*budget || int64(held)*int64(age) >= keptStallBytes*int64(keptStallAge)
}

// pauseForBudget pauses c for its loop's budget of kept bytes; the caller
// set sharedBudgetPaused. Must be called on c's loop.
func (c *inbound) pauseForBudget() {
	if c.pauseReasons&pausedByBudget != 0 || c.state != stateOpen {
		return
	}
	registryFor(c.l).budgetPaused.Add(1)
	c.applyPause(pausedByBudget, true)
}

// progressed resumes c if the loop's budget of kept bytes paused it: it
// consumed, so it no longer holds bytes without progress (its clock
// started again). Must be called on c's loop.
func (c *inbound) progressed() {
	if c.pauseReasons&pausedByBudget == 0 {
		c.shared.clear(sharedBudgetPaused)
		return
	}
	registryFor(c.l).budgetPaused.Add(-1)
	c.shared.clear(sharedBudgetPaused)
	c.applyPause(pausedByBudget, false)
}

// resumeUnderBudget resumes the connections of the loop that the budget of
// kept bytes paused, once the loop keeps at most three quarters of it. It
// scans the loop's connections only when some are paused so. Must be
// called on the loop.
func (r *loopConns) resumeUnderBudget(l *loop.Loop) {
	r.checkOverload(l)
	if r.budgetPaused.Load() == 0 || r.resuming {
		return
	}
	if budget, _ := l.BufferBudget(); r.keptTotal() > budget/4*3 {
		return
	}
	r.resuming = true
	defer func() { r.resuming = false }()
	for i := 0; i < r.conns.n && r.budgetPaused.Load() > 0; i++ {
		(*r.conns.at(i)).inbound().progressed()
	}
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

// consume drops the first n kept bytes: progress, for the budget of kept
// bytes.
func (c *inbound) consume(n int) {
	k := c.kept
	if k == nil {
		return // closed inside the handler: the buffer is gone
	}
	if n > 0 {
		k.since = c.l.Now()
		defer c.progressed()
	}
	k.off += n
	if k.off == len(k.buf) {
		k.buf, k.off = k.buf[:0], 0
		if cap(k.buf) > maxIdleInbuf {
			b := k.buf
			stashPool.Put(&b)
			k.buf = nil
		}
	}
	c.chargeKept()
}

// deliverChunks hands the bytes of a receive to the handler, in pieces
// where that matters, and keeps what the handler may not take now:
//
//   - A receive longer than one receive buffer (a bundle) goes in pieces of
//     deliverMax, or of the loop's buffer size if larger, so that a pause
//     stops it within one buffer.
//   - Where a handler's answers outgrow its input (answerRoom), pieces are
//     no larger than what its answers may take before the connection
//     reaches the mark where reading pauses, so answering a pipelined
//     receive stops there.
//
// Once reading pauses, or when the handler has bytes kept from before, the
// rest is kept: for the resume, or to follow the kept bytes. Must be called
// on c's loop.
func (c *inbound) deliverChunks(data []byte) {
	for len(data) > 0 && c.state == stateOpen {
		if c.pauseReasons != 0 || len(c.keptBytes()) > 0 {
			if c.keep(data) && c.pauseReasons == 0 {
				c.feed(false)
			}
			return
		}
		n := c.pieceLen(len(data))
		c.handleFresh(data[:n])
		data = data[n:]
	}
}

// pieceLen returns how many of n received bytes the handler gets in one
// call: all of them, but for a bundle's pieces (deliverChunks) and a
// handler whose answers outgrow its input (answerRoom). Must be called on
// c's loop.
func (c *inbound) pieceLen(n int) int {
	if n > deliverMax {
		n = max(int(c.l.Features().BufSize), deliverMax)
	}
	return min(n, c.answerRoom(n))
}

// handleFresh gives newly received bytes, with nothing kept before them,
// to the handler, keeping what a ReadHandler leaves unconsumed. Must be
// called on c's loop.
func (c *inbound) handleFresh(data []byte) {
	if !c.flags.has(flagReadHandler) {
		c.callData(data)
		return
	}
	n, ok := c.callRead(data, len(data))
	if !ok || c.state != stateOpen || n == len(data) {
		return
	}
	if c.keep(data[n:]) {
		c.kept.pending = 0 // the handler saw them
		c.checkInboundLimit()
	}
}

// feed hands kept bytes to the handler while reading is not paused: for
// OnData the unseen ones, a piece at a time; for OnRead every kept byte
// with the unseen ones a piece at a time, until it has seen them all.
// force runs OnRead once even with nothing unseen (a resume or Wake: the
// handler may now consume what it left). Must be called on c's loop.
func (c *inbound) feed(force bool) {
	for c.state == stateOpen && c.pauseReasons == 0 && c.kept != nil && (c.kept.pending > 0 || force) {
		k := c.kept
		seen := len(c.keptBytes()) - k.pending
		piece := c.pieceLen(k.pending)
		if !c.flags.has(flagReadHandler) {
			if force && piece == 0 {
				return
			}
			k.pending -= piece
			c.callData(c.keptBytes()[seen : seen+piece])
			c.consume(piece)
			force = false
			continue
		}
		force = false
		k.pending -= piece
		n, ok := c.callRead(c.keptBytes()[:seen+piece], piece)
		if !ok || c.state != stateOpen {
			return
		}
		c.consume(n)
		if !c.checkInboundLimit() {
			return
		}
	}
}

// keep appends received bytes, not yet seen by the handler, to the kept
// bytes. Must be called on c's loop. It reports false when the connection
// closed.
func (c *inbound) keep(data []byte) bool {
	if c.state != stateOpen {
		return false // closed inside the handler: nobody will take them
	}
	k := c.ensureKept()
	if len(c.keptBytes()) == 0 {
		k.since = c.l.Now()
	}
	switch {
	case k.buf == nil:
		if p, _ := stashPool.Get().(*[]byte); p != nil && cap(*p) >= len(data) {
			k.buf = (*p)[:0]
		} else {
			k.buf = make([]byte, 0, max(len(data), 512))
		}
	case k.off > 0 && len(k.buf)+len(data) > cap(k.buf):
		// Move the kept bytes to the front before growing.
		k.buf = k.buf[:copy(k.buf, c.keptBytes())]
		k.off = 0
	}
	k.buf = append(k.buf, data...)
	k.pending += len(data)
	c.chargeKept()
	if !c.cfg.netConn {
		// A NetConn's connection keeps bytes only while its NetConn
		// paused it, and only a Read can make progress there: its
		// NetConn decides (NetConn.OnData, NetConn.took).
		c.overKeptBudget()
	}
	return true
}

// checkInboundLimit ends the connection when the bytes its handler has
// seen and left unconsumed pass its inbound limit: a frame longer than the
// protocol allows (LimitHandler hears first). It reports false when it did.
// Must be called on c's loop.
func (c *inbound) checkInboundLimit() bool {
	n := len(c.keptBytes()) - c.pending()
	if n <= c.cfg.inboundLimit {
		return true
	}
	c.lifecycle().failLimit(c.conn().opError("read", "", fmt.Errorf("%w: %d bytes kept, limit %d",
		ErrInboundLimit, n, c.cfg.inboundLimit)))
	return false
}

// callData runs OnData under recover; a panic closes the connection.
func (c *inbound) callData(data []byte) {
	before := c.queuedTotal.Load()
	c.callDataOnly(data)
	c.afterCallback(len(data), c.queuedTotal.Load()-before)
}

// afterCallback follows a delivery callback given in fresh bytes that
// queued out: it notes the ratio (noteAnswers) and, if it queued anything,
// counts the queue and pauses reading if it passed its mark, so that the
// rest of a receive is kept. Must be called on c's loop.
func (c *inbound) afterCallback(in int, out uint64) {
	c.noteAnswers(in, out)
	if out == 0 || c.state != stateOpen {
		return
	}
	if !c.outbound().unwritable() && registryFor(c.l).pressureMark.Load() == 0 {
		// At or under the high-water mark, and so under every mark where
		// reading pauses: nothing to count before the flush does.
		return
	}
	c.mu.Lock()
	n := c.outQueue.n
	c.mu.Unlock()
	c.outbound().chargeOutbound(n)
	c.syncWritePause()
}

func (c *inbound) callDataOnly(data []byte) {
	defer c.lifecycle().failOnPanic("OnData")
	c.l.Running(&runOnData)
	c.h.OnData(c.conn(), data)
}

// callRead runs OnRead under recover and checks its count; fresh is how
// many bytes at the end of data it had not seen before. ok is false when
// the connection failed instead (a panic leaves the zero results).
func (c *inbound) callRead(data []byte, fresh int) (n int, ok bool) {
	before := c.queuedTotal.Load()
	n, ok = c.callReadOnly(data)
	c.afterCallback(fresh, c.queuedTotal.Load()-before)
	return n, ok
}

func (c *inbound) callReadOnly(data []byte) (n int, ok bool) {
	defer c.lifecycle().failOnPanic("OnRead")
	c.l.Running(&runOnRead)
	n = c.h.(ReadHandler).OnRead(c.conn(), data)
	if n < 0 || n > len(data) {
		c.lifecycle().closeWithReset(c.conn().opError("read", "", fmt.Errorf("conn: OnRead consumed %d of %d bytes", n, len(data))))
		return 0, false
	}
	return n, true
}

// How answers outgrow input. A handler that answers a request of a few
// bytes with kilobytes (a line server, a GET) can queue, for one receive
// of pipelined requests, far more than the mark where reading pauses; the
// pause acts only after the call. So each connection keeps the ratio of
// the bytes its handler's callbacks queued to the bytes they were given
// (gain, in 1/gainOne), and the connections of one Listen or Dial share the
// largest ratio seen lately (flowShared.gain, halved every gainHalfLife), so that
// a new connection's first receive is cut as well. answerRoom cuts the
// input handed to the handler at once to what its answers may take before
// the pause.
const gainOne = 16

// gainHalfLife is how long the largest ratio the connections of one
// Listen or Dial showed counts whole (hard-coded): it halves every
// gainHalfLife since it was last seen.
const gainHalfLife = 10 * time.Second

// flowShared is what the connections of one Listen or Dial share for flow
// control. Safe for concurrent use.
type flowShared struct {
	gain     atomic.Int64 // the largest answer-to-input ratio seen lately, in 1/gainOne
	gainAt   atomic.Int64 // loop clock (Loop.Now) when gain was set
	measured atomic.Bool  // a callback of these connections was given probeLen bytes or more
}

// probeLen is the most the first callbacks of a Listen or Dial are given
// at once, until one was given that much and showed how much its handler
// answers (hard-coded): a handler answering each byte of a receive of
// pipelined requests with kilobytes queues at most probeLen answers
// before its ratio is known, not one for every request of the receive.
const probeLen = 64

// sharedGain returns s's ratio, halved for every gainHalfLife since it was set
// (on l's clock).
func (s *flowShared) sharedGain(l *loop.Loop) int64 {
	g := s.gain.Load()
	if g <= gainOne {
		return g
	}
	age := (l.Now() - time.Duration(s.gainAt.Load())) / gainHalfLife
	if age >= 32 {
		return 0
	}
	return g >> max(age, 0)
}

// noteAnswers records that a callback given in fresh bytes queued out.
// Must be called on c's loop.
func (c *inbound) noteAnswers(in int, out uint64) {
	if in <= 0 {
		return
	}
	if in >= probeLen {
		c.flags.set(flagGainShown)
		if !c.cfg.flow.measured.Load() {
			c.cfg.flow.measured.Store(true)
		}
	}
	if out <= uint64(in) {
		// No more out than in (an echo, a quiet handler): the common
		// case, without a division.
		c.gain /= 2
		return
	}
	g := int64(min(out, 1<<40)) * gainOne / int64(in)
	c.gain = max(g, c.gain/2)
	if g <= gainOne {
		return
	}
	s := c.cfg.flow
	if g > s.sharedGain(c.l) {
		s.gain.Store(g)
		s.gainAt.Store(int64(c.l.Now()))
	}
}

// answerRoom returns how many of n input bytes the handler may be given at
// once: n, unless its answers outgrow its input, then what its answers may
// take before the connection reaches the outbound mark where reading
// pauses (at least 1). Must be called on c's loop.
func (c *inbound) answerRoom(n int) int {
	if n <= 1 || c.cfg.pauseUnwritable == pauseNever {
		return n
	}
	g := c.gain
	if g <= gainOne {
		g = max(g, c.cfg.flow.sharedGain(c.l))
		if g <= gainOne {
			if n > probeLen && !c.cfg.flow.measured.Load() {
				return probeLen // nothing known yet: a small first piece
			}
			return n
		}
		if !c.flags.has(flagGainShown) {
			// The ratio is other connections', measured per byte of
			// their requests: this peer's may be shorter (a newline
			// where the others sent a line) and answered alike, so
			// its first pieces are probeLen until its own ratio is
			// known.
			n = min(n, probeLen)
		}
	}
	room := int64(c.outbound().pauseMark() - c.conn().Buffered())
	return int(min(int64(n), max(1, room*gainOne/g)))
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
	if len(c.keptBytes()) > 0 || c.flags.has(flagEOFHeld) {
		c.queueResume()
		return
	}
	c.arm()
}

// queueResume queues the task that hands the kept bytes to the handler
// before reading resumes (resume), once. Must be called on c's loop.
func (c *inbound) queueResume() {
	if c.flags.has(flagResumeQueued) {
		return
	}
	c.flags.set(flagResumeQueued)
	// A task (not a tail task, which queued from the tail phase would wait
	// for the loop's next wakeup); a full bounded queue is retried.
	if executeRetrying(c.l, c.resume) != nil {
		c.flags.clear(flagResumeQueued)
	}
}

// resume hands the kept bytes to the handler: the unseen ones, and to a
// ReadHandler once more those it left, since it may take them now (it
// stopped, say, because its connection was unwritable). Then the held FIN,
// then it re-arms. Must be called on c's loop.
func (c *inbound) resume() {
	c.flags.clear(flagResumeQueued)
	if c.state != stateOpen || c.pauseReasons != 0 {
		return
	}
	c.feed(c.flags.has(flagReadHandler) && len(c.keptBytes()) > 0)
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

// Wake runs the handler's OnRead again on the bytes the connection keeps
// for it (possibly none), as a task on the connection's loop, unless
// reading is paused then: for a ReadHandler that left input unconsumed and
// can now take it (gnet's Wake). It returns an error wrapping
// ErrInvalidOption when the handler has no OnRead, and one wrapping
// net.ErrClosed once the connection is closed. Safe for concurrent use.
func (c *Conn) Wake() error {
	if !isReadHandler(c.h) {
		return c.opError("read", "", invalidOption("Wake needs a ReadHandler"))
	}
	if c.shared.has(sharedCloseRequested) {
		return c.opError("read", "", net.ErrClosed)
	}
	f := func() {
		if c.state == stateOpen && c.pauseReasons == 0 && !c.flags.has(flagResumeQueued) {
			c.inbound().feed(true)
			c.inbound().arm()
		}
	}
	if err := executeRetrying(c.l, f); err != nil {
		return c.opError("read", "", net.ErrClosed)
	}
	return nil
}

func isReadHandler(h Handler) bool {
	_, ok := h.(ReadHandler)
	return ok
}

// syncWritePause pauses reading once the connection queues more than its
// pause mark (outbound.pauseMark), and resumes it once the queue drains to
// the low-water mark (or half the mark, if less), unless
// WithPauseReadWhenUnwritable(false). Must be called on c's loop after the
// queue's size was charged (outbound.chargeOutbound).
func (c *inbound) syncWritePause() {
	if c.cfg.pauseUnwritable == pauseNever {
		return
	}
	o := c.outbound()
	q, mark := c.outboundCharged, o.pauseMark()
	paused := c.pauseReasons&pausedUnwritable != 0
	want := q > mark
	if paused {
		want = q > min(c.outbound().lowWaterNow(), mark/2)
	}
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
