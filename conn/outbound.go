package conn

import (
	"context"
	"fmt"
	"io"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// The send path. Write copies into the outbound chunkQueue under c.mu and
// queues one flush tail task per loop turn (flushQueued deduplicates it);
// the flush submits one SEND or SENDMSG of up to maxSendIov ranges. One
// send is in flight per connection; its completion consumes what was sent
// and submits the next, so a short write continues where it stopped.

// outbound is a Conn seen from its send side: the outbound queue Write
// appends to, the water marks and writability reports, the outbound limit
// and the loop's count of queued bytes, the flush and the send op (it is
// that op's loop.Completer). A pointer conversion: handing it to the loop
// allocates nothing. Loop goroutine only, but for queueChunks, overLimit,
// afterAppend, markQueued and kick, which Write runs on any goroutine.
type outbound Conn

// conn returns c as the Conn it is.
func (c *outbound) conn() *Conn { return (*Conn)(c) }

// inbound returns c seen from its receive side.
func (c *outbound) inbound() *inbound { return (*inbound)(c) }

// lifecycle returns c seen from its life's course.
func (c *outbound) lifecycle() *lifecycle { return (*lifecycle)(c) }

// unwritable reports whether the connection is above its high-water mark
// (an odd count of writability transitions). Safe for concurrent use.
func (c *outbound) unwritable() bool { return c.writabilityChanges.Load()&1 == 1 }

// Writable reports whether the outbound buffer is below the high-water
// mark: false once more than the high mark is queued, until it drains to
// the low mark. The marks shrink while the loop queues more than its
// budget (WithWaterMarks). Safe for concurrent use.
func (c *Conn) Writable() bool { return c.writabilityChanges.Load()&1 == 0 }

// Buffered returns the outbound bytes queued and not yet sent. Safe for
// concurrent use.
func (c *Conn) Buffered() int {
	c.mu.Lock()
	n := c.outQueue.n
	c.mu.Unlock()
	return n
}

// Write queues a copy of p for sending and returns len(p), nil: p may be
// reused as soon as Write returns. Bytes go out in the order Write calls
// return, also across goroutines (each call's bytes stay contiguous). Write
// does not block and does not wait for the peer: it queues even above the
// high-water mark, so a producer that can outrun the peer should watch
// Writable or OnWritabilityChanged. The queue is bounded all the same
// (WithOutboundLimit, default DefaultOutboundLimit): a Write made while
// more than the limit is already queued queues nothing and returns an
// error wrapping ErrOutboundLimit, and the connection closes with a reset
// (the peer sees ECONNRESET, not a FIN) and OnClose reports that error;
// later Writes return an error wrapping net.ErrClosed. So a peer that never
// reads holds at most the limit plus one Write. After Close or CloseWrite
// it returns an error wrapping net.ErrClosed. Safe for concurrent use.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.Writev([][]byte{p})
	return int(n), err
}

// WriteWait writes p as Write does, after waiting while the connection is
// unwritable (above its high-water mark, until it drains to the low mark),
// so that goroutines producing faster than the peer reads slow down to its
// pace instead of filling the outbound queue to its limit. Goroutines that
// wait together are let through together when the connection turns
// writable, so the queue may pass the high-water mark by one write each.
// It returns ctx's error (wrapped) if ctx ends first, with nothing queued,
// and Write's errors otherwise. It must not be called on a loop goroutine,
// where it returns an error wrapping loop.ErrInLoop at once: a handler uses
// Write with Writable and OnWritabilityChanged instead. Safe for
// concurrent use.
func (c *Conn) WriteWait(ctx context.Context, p []byte) (int, error) {
	if loop.Current() != nil {
		return 0, c.opError("write", "", loop.ErrInLoop)
	}
	for {
		c.mu.Lock()
		if c.shared.has(sharedWritesClosed) || !c.outbound().unwritable() {
			c.mu.Unlock()
			return c.Write(p)
		}
		if c.roomWait == nil {
			c.roomWait = make(chan struct{})
		}
		wait := c.roomWait
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, c.opError("write", "", ctx.Err())
		}
	}
}

// wakeRoomWaiters lets the goroutines waiting in WriteWait look again.
// Caller holds c.mu.
func (c *Conn) wakeRoomWaiters() {
	if c.roomWait != nil {
		close(c.roomWait)
		c.roomWait = nil
	}
}

// Writev queues a copy of every buffer of bufs, in order and contiguous, as
// one Write of their concatenation would, under the same outbound limit.
// Safe for concurrent use.
func (c *Conn) Writev(bufs [][]byte) (int64, error) {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	if n >= spliceMin {
		// A large write is copied into chunks of its own before taking
		// the lock, which the loop's send completions need: copying it
		// under the lock stalled the loop for as long as the copy took.
		if err := c.outbound().queueChunks(fillChunks(bufs), int(n)); err != nil {
			return 0, err
		}
		return n, nil
	}
	c.mu.Lock()
	if c.shared.has(sharedWritesClosed) {
		c.mu.Unlock()
		return 0, c.writesClosed()
	}
	if n == 0 {
		c.mu.Unlock()
		return 0, nil
	}
	if c.outQueue.n > c.cfg.outboundLimit {
		return 0, c.outbound().overLimit()
	}
	for _, b := range bufs {
		c.outQueue.push(b, false)
	}
	c.queuedTotal.Add(uint64(n))
	c.outbound().afterAppend()
	return n, nil
}

// sendDirect writes p as Write does, but when the connection is idle for
// writing (open for writes, nothing queued, no flush queued, no send in
// flight) and its loop waits between turns, it first sends from the
// calling goroutine with one non-blocking send: queueing would cost the
// loop a wakeup and the write a hand-off. Only the first such Write after
// the loop delivered input to a NetConn sends itself; a busy loop, or a
// loop that had one Write sent past it already, gets the bytes queued, as
// Write does, so that the replies of many connections go out together,
// for one wakeup, in the loop's next turn. What
// the direct send does not take, all of p after EAGAIN or any other error,
// the rest after a partial send, is queued as Write queues it, in the same
// critical section, so bytes keep their order and the loop's own send
// reports what went wrong. A connection with an idle timeout always
// queues: its loop counts activity by its own sends. Safe for concurrent
// use.
func (c *outbound) sendDirect(p []byte) (int, error) {
	if len(p) == 0 || len(p) >= spliceMin || c.cfg.idleTimeout > 0 || !c.l.Idle() || registryFor(c.l).directSent.Load() {
		return c.conn().Write(p)
	}
	c.mu.Lock()
	if c.shared.has(sharedWritesClosed) || c.outQueue.n > 0 || c.flushQueued || c.sendBusy || registryFor(c.l).directSent.Swap(true) {
		// Closed (Writev reports it), the loop has bytes to send, or
		// another goroutine sent past the loop already.
		c.mu.Unlock()
		return c.conn().Write(p)
	}
	// The fd stays open: closing it starts with setting
	// sharedWritesClosed, under c.mu, which is held until the send ends.
	sent := 0
	if n, err := sock.SendNow(int(c.fd), p, unix.MSG_NOSIGNAL); err == nil {
		sent = n
		c.traffic.writes.Add(1)
		c.traffic.bytesOut.Add(uint64(n))
	}
	if sent == len(p) {
		c.mu.Unlock()
		return sent, nil
	}
	c.outQueue.push(p[sent:], false)
	c.afterAppend()
	return len(p), nil
}

// queueChunks queues filled chunks holding n bytes, as Writev queues a copy
// of its buffers; the queue owns them from then on (they are freed if the
// connection is closed for writing).
func (c *outbound) queueChunks(filled []*chunk, n int) error {
	c.mu.Lock()
	if c.shared.has(sharedWritesClosed) {
		c.mu.Unlock()
		for _, t := range filled {
			putChunk(t)
		}
		return c.conn().writesClosed()
	}
	if c.outQueue.n > c.cfg.outboundLimit {
		err := c.overLimit()
		for _, t := range filled {
			putChunk(t)
		}
		return err
	}
	c.outQueue.splice(filled, n)
	c.queuedTotal.Add(uint64(n))
	c.afterAppend()
	return nil
}

// overLimit fails a write made while the queued bytes exceed the outbound
// limit: the connection takes no more writes and closes with a reset (the
// stream lost bytes, so the peer must not see an orderly end), OnClose
// reporting the error the write returns. Caller holds c.mu; overLimit
// unlocks it.
func (c *outbound) overLimit() error {
	err := c.conn().opError("write", "", fmt.Errorf("%w: %d bytes queued, limit %d",
		ErrOutboundLimit, c.outQueue.n, c.cfg.outboundLimit))
	c.shared.set(sharedWritesClosed)
	c.conn().wakeRoomWaiters()
	c.mu.Unlock()
	abort := func() {
		if c.state == stateOpen {
			c.lifecycle().failLimit(err)
		}
	}
	if c.l.InLoop() {
		abort()
	} else {
		// An error means the loop is shutting down: its drain closes c.
		_ = executeRetrying(c.l, abort)
	}
	return err
}

// afterAppend publishes what an append queued, unlocks c.mu and has the
// queue flushed. Caller holds c.mu.
func (c *outbound) afterAppend() {
	kick := c.markQueued()
	n := c.outQueue.n
	c.mu.Unlock()
	if kick {
		c.kick()
	}
	// Only an unwritable connection may pause. The flush counts the bytes
	// in the loop's total in any case; asking whether this is the loop
	// costs a system call, so it is asked only then.
	if c.unwritable() && c.cfg.pauseUnwritable != pauseNever && c.l.InLoop() {
		c.chargeOutbound(n)
		c.inbound().syncWritePause()
	}
}

// markQueued publishes the queue's new size after an append and reports
// whether a flush must be queued. Caller holds c.mu.
func (c *outbound) markQueued() bool {
	if c.outQueue.n > c.highWaterNow() && !c.unwritable() {
		c.writabilityChanges.Add(1) // writable → unwritable
	}
	if c.flushQueued {
		return false
	}
	c.flushQueued = true
	return true
}

// kick queues the flush as a tail task. From the loop itself this is a
// queue push (no wakeup, no system call); from another goroutine it wakes
// the loop at most once per wait. A refused task means the loop is shutting
// down: on the loop the flush runs at once; from elsewhere the bytes wait
// for the next event of c on its loop (a send completion, the peer's FIN),
// which starts the send itself, or for the drain that closes c.
func (c *outbound) kick() {
	if err := c.l.ExecuteAfterTurn(c.flushFn); err != nil {
		c.mu.Lock()
		c.flushQueued = false
		c.mu.Unlock()
		if c.l.InLoop() {
			// The loop is terminating and takes no more tasks: flush
			// now (a send the backend refuses closes the connection),
			// so nothing waits for a flush that never runs.
			c.flush()
		}
	}
}

// flush is the per-turn tail task: it starts a send unless one is in
// flight (its completion continues), and reports writability changes.
func (c *outbound) flush() {
	c.mu.Lock()
	c.flushQueued = false
	n := c.outQueue.n
	c.mu.Unlock()
	c.chargeOutbound(n)
	if c.state != stateOpen {
		return
	}
	if !c.flags.has(flagSendArmed) {
		c.startSend()
	}
	c.notifyWritability()
}

// startSend submits one SEND or SENDMSG for the queued bytes, or,
// with nothing queued, runs what waited for the queue to drain (CloseWrite's
// shutdown, the close after the peer's FIN). Must be called on c's loop with
// no send in flight.
func (c *outbound) startSend() {
	var arr [maxSendIov][]byte // the loop copies the list: it can live on the stack
	c.mu.Lock()
	iov, total := c.outQueue.gather(arr[:0], maxSendIov)
	c.sendBusy = total > 0
	if total == 0 && c.flags.has(flagCloseWhenDrained) {
		// drained closes the connection: a Write from another
		// goroutine must fail from here on, not be queued behind
		// this check and dropped by the close.
		c.shared.set(sharedWritesClosed)
	}
	c.mu.Unlock()
	if total == 0 {
		c.drained()
		return
	}
	var (
		id  loop.OpID
		err error
	)
	if len(iov) > 1 {
		id, err = c.l.IO().Sendmsg(int(c.fd), iov, 0, c)
	} else {
		id, err = c.l.IO().Send(int(c.fd), iov[0], 0, c)
	}
	if err != nil {
		c.lifecycle().closeNow(c.conn().opError("write", "", err))
		return
	}
	c.sendID, c.sendRanges = id, int32(len(iov))
	c.flags.set(flagSendArmed)
	c.opsInFlight++
}

// drained runs once the outbound queue is empty and no send is in flight.
func (c *outbound) drained() {
	if c.flags.has(flagLingering) {
		c.lifecycle().closeNow(nil)
		return
	}
	if c.flags.has(flagCloseWhenDrained) {
		c.lifecycle().closeNow(io.EOF)
		return
	}
	if c.flags.has(flagShutdownWanted) && !c.flags.has(flagShutdownStarted) {
		c.flags.set(flagShutdownStarted)
		c.lifecycle().startShutdown()
	}
}

// notifyWritability reports writability transitions to the handler: every
// one, in order, not just a changed level (Netty's behaviour).
// c.writabilityChanges counts the transitions (changed under c.mu; an even
// count means writable), and c.writabilityReported the ones reported. A
// Write that crosses the high mark and a send completion that drains below
// the low mark before the next report make two transitions, reported as
// false then true, so a writer that stopped on Writable() false is resumed
// even though the level looks unchanged. Transitions to writable happen
// only in the send completion, which reports at once, so at most two are
// ever pending. Must be called on c's loop.
func (c *outbound) notifyWritability() {
	c.inbound().syncWritePause()
	g := c.writabilityChanges.Load()
	for c.writabilityReported != g {
		if c.state != stateOpen || c.flags.has(flagLingering) {
			c.writabilityReported = g // closed for the user: nothing more is reported
			return
		}
		c.writabilityReported++
		writable := c.writabilityReported&1 == 0
		if c.flags.has(flagWritabilityHandler) {
			c.callWritability(writable)
		}
		if writable && c.flags.has(flagReadHandler) && c.pauseReasons == 0 && len(c.inbound().keptBytes()) > 0 {
			// A ReadHandler may have stopped consuming for want of room:
			// offer it what it left (inbound.resume).
			c.inbound().queueResume()
		}
	}
}

// callWritability runs OnWritabilityChanged under recover.
func (c *outbound) callWritability(writable bool) {
	defer c.lifecycle().failOnPanic("OnWritabilityChanged")
	c.l.Running(&runOnWritabilityChanged)
	c.h.(WritabilityHandler).OnWritabilityChanged(c.conn(), writable)
}

// loopQueuedHalf reports whether c's loop queues more than half its
// budget. Must be called on c's loop.
func (c *outbound) loopQueuedHalf() bool {
	_, budget := c.l.BufferBudget()
	return registryFor(c.l).outboundQueued > budget/2
}

// outboundPauseMark is the most a connection queues before its reading
// pauses by default, while its loop is under its budget of queued bytes
// (hard-coded; half the outbound limit where that is less).
const outboundPauseMark = 2 << 20

// ownPauseMark returns how much c may queue, by default, before reading
// pauses while its loop is under budget.
func (c *outbound) ownPauseMark() int {
	return max(min(c.cfg.outboundLimit/2, outboundPauseMark), c.cfg.highWater)
}

// pauseMark returns how much c may queue before its reading pauses now:
// its own pause mark, or the high-water mark under
// WithPauseReadWhenUnwritable(true); while its loop queues more than its
// budget, its high-water mark of the moment (highWaterNow). Must be called
// on c's loop.
func (c *outbound) pauseMark() int {
	mark := c.ownPauseMark()
	if c.cfg.pauseUnwritable == pauseAlways {
		mark = c.cfg.highWater
	}
	if pm := int(registryFor(c.l).pressureMark.Load()); pm > 0 {
		mark = min(mark, c.highWaterNow())
	}
	return mark
}

// highWaterNow returns c's high-water mark of the moment: its own, or,
// while its loop queues more than its budget, half the budget shared
// among the loop's connections that queue bytes if that is less (at least
// minPauseMark; loopConns.pressureMark), so that many peers that never
// read hold the budget between them, whether the handler watches Writable,
// a NetConn's Write blocks, or reading pauses. Safe for concurrent use.
func (c *outbound) highWaterNow() int {
	hw := c.cfg.highWater
	if pm := int(registryFor(c.l).pressureMark.Load()); pm > 0 && pm < hw {
		hw = pm
	}
	return hw
}

// lowWaterNow returns the low-water mark that goes with highWaterNow.
// Safe for concurrent use.
func (c *outbound) lowWaterNow() int {
	return min(c.cfg.lowWater, c.highWaterNow()/2)
}

// setPressureMark updates r.pressureMark after a change of the loop's
// queued bytes: 0 under the budget, else the budget shared among the
// connections that queue bytes (at least minPauseMark). On the loop.
func (r *loopConns) setPressureMark(l *loop.Loop) {
	pm := 0
	if _, budget := l.BufferBudget(); r.outboundQueued > budget {
		// Half a share: the connections that passed their marks before
		// the pressure keep what they queued, and the total settles
		// under one and a half budgets, short of an overload.
		pm = max(budget/max(2*r.queuers, 1), minPauseMark)
	}
	if int(r.pressureMark.Load()) != pm {
		r.pressureMark.Store(int64(pm))
	}
}

// minPauseMark is the least a connection may queue before its reading
// pauses, however many share its loop's budget (hard-coded: about one
// answer, as a goroutine blocked in a Write of it holds).
const minPauseMark = 2 << 10

// chargeOutbound brings the loop's count of queued outbound bytes in line
// with c's queue, n bytes (c.outQueue.n, read under c.mu). Must be called
// on c's loop after every change of that queue; a Write from another
// goroutine is counted by the flush it queues.
func (c *outbound) chargeOutbound(n int) {
	if n == c.outboundCharged {
		return
	}
	r := registryFor(c.l)
	switch {
	case c.outboundCharged == 0:
		r.queuers++
	case n == 0:
		r.queuers--
	}
	r.outboundQueued += n - c.outboundCharged
	c.outboundCharged = n
	r.setPressureMark(c.l)
}

// Complete handles the send's completions. Must be called on c's loop.
func (c *outbound) Complete(cp *loop.Completion) {
	res := cp.Res
	if cp.Quarantined {
		// Given up without the kernel's final word: the kernel may
		// still read these chunks, so they never return to the pool.
		c.mu.Lock()
		c.outQueue.pin(int(c.sendRanges))
		c.mu.Unlock()
	}
	c.flags.clear(flagSendArmed)
	c.sendRanges = 0
	c.opsInFlight--
	if c.state != stateOpen {
		c.lifecycle().maybeFinish()
		return
	}
	if cp.Quarantined && res < 0 {
		// The outcome is unknown: some of the bytes may have gone out.
		// Reset the connection so the peer sees a failure, not a gap.
		c.lifecycle().closeWithReset(c.conn().opError("write", "", loop.ErrGivenUp))
		return
	}
	if res < 0 {
		if errnoOf(res) == unix.EAGAIN || errnoOf(res) == unix.EINTR {
			c.startSend()
			return
		}
		// Bytes queued may never reach the peer: reset, so it sees a
		// failure rather than an orderly end with a gap.
		c.lifecycle().closeWithReset(c.conn().resultError("write", "send", res))
		return
	}
	c.traffic.writes.Add(1)
	c.traffic.bytesOut.Add(uint64(res))
	if c.extras != nil && (c.extras.idleTimeout > 0 || c.flags.has(flagLingering)) {
		c.extras.lastIO = c.l.Now() // a linger counts from the last progress too
	}
	c.mu.Lock()
	c.sendBusy = false
	c.outQueue.consume(int(res))
	if c.unwritable() && c.outQueue.n <= c.lowWaterNow() {
		c.writabilityChanges.Add(1) // unwritable → writable
		c.conn().wakeRoomWaiters()
	}
	n := c.outQueue.n
	c.mu.Unlock()
	c.chargeOutbound(n)
	c.notifyWritability()
	// The handler may have started the next send already: a Close or
	// CloseWrite in OnWritabilityChanged sends what is queued at once.
	// A second send of the same bytes would put them on the wire twice
	// and consume bytes never sent.
	if c.state == stateOpen && !c.flags.has(flagSendArmed) {
		c.startSend()
	}
}
