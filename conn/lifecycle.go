package conn

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// The close protocol (docs/op-lifecycle.md, "Closing an fd"): mark the
// connection closed, cancel every op in flight on its fd, wait for their
// final completions (opsInFlight reaching zero), then close the fd with a
// CLOSE op, and only after that completes call OnClose, exactly once. No op
// names the fd when it is closed, so its number can be reused at once
// without a completion landing on the wrong connection.

// lifecycle is a Conn seen from its life's course: open, the close
// protocol (linger, shutdown, the fd's close, OnClose), the read and idle
// timeouts, a dial's outcome, the loop's registry, and the handler's OnOpen
// and OnClose. It is the loop.Completer of the connection's lifecycle op
// (its connect, shutdown or close): a pointer conversion, so handing it to
// the loop allocates nothing. Loop goroutine only.
type lifecycle Conn

// conn returns c as the Conn it is.
func (c *lifecycle) conn() *Conn { return (*Conn)(c) }

// inbound returns c seen from its receive side.
func (c *lifecycle) inbound() *inbound { return (*inbound)(c) }

// outbound returns c seen from its send side.
func (c *lifecycle) outbound() *outbound { return (*outbound)(c) }

// ensureExtras returns c's extras, making them on first use.
func (c *lifecycle) ensureExtras() *connExtras {
	if c.extras == nil {
		c.extras = new(connExtras)
	}
	return c.extras
}

// closeCause is the cause OnClose reports (nil: a local Close). On the
// loop, or elsewhere under c.mu once sharedCloseReported.
func (c *lifecycle) closeCause() error {
	if c.extras == nil {
		return nil
	}
	return c.extras.closeErr
}

// activeOp returns the connect, shutdown or close in flight, or nil.
func (c *lifecycle) activeOp() *lifecycleOp {
	if c.extras != nil && c.extras.op.active {
		return &c.extras.op
	}
	return nil
}

// setHandler sets the connection's handler and records the optional
// interfaces it implements. Before open only.
func (c *lifecycle) setHandler(h Handler) {
	c.h = h
	c.flags.clear(flagReadHandler | flagWritabilityHandler | flagHalfCloseHandler)
	if _, ok := h.(ReadHandler); ok {
		c.flags.set(flagReadHandler)
	}
	if _, ok := h.(WritabilityHandler); ok {
		c.flags.set(flagWritabilityHandler)
	}
	if _, ok := h.(HalfCloseHandler); ok {
		c.flags.set(flagHalfCloseHandler)
	}
}

// newHandler runs the server's handler factory under recover.
func (c *lifecycle) newHandler() (h Handler, err error) {
	defer func() {
		if r := recover(); r != nil {
			h, err = nil, c.recovered("ListenFunc's handler factory", r)
		}
	}()
	c.l.Running(&runNewHandler)
	if h = c.srv.newHandler(c.conn()); h == nil {
		err = fmt.Errorf("conn: ListenFunc's handler factory returned nil")
		c.l.Logger().Error("conn: closing the connection", "loop", c.l.String(), "remote", c.raddr, "error", err)
		return nil, err
	}
	return h, nil
}

// open makes the connection live on its loop: socket options, addresses,
// OnOpen, the first receive and the timers. Must be called on c's loop.
//
// A panic in OnOpen closes the connection with a *PanicError (OnClose
// reports it; nothing stays armed) and is returned, for Dial.
func (c *lifecycle) open() (err error) {
	network := c.conn().network()
	applySockopts(int(c.fd), network, c.cfg, c.srv != nil)
	c.laddr, c.raddr = connAddrs(int(c.fd), network, c.srv)
	if !c.track() {
		// The loop is shutting down: the connection closes at once,
		// before any handler sees it (a dial fails with the error).
		err = c.errLoopShutdown()
		c.setHandler(NopHandler{})
		c.state = stateOpen
		c.closeNow(err)
		return err
	}
	c.flags.set(flagTracked)
	if c.h == nil {
		h, err := c.newHandler()
		if err != nil {
			// No handler to report to: close quietly (logged above).
			c.setHandler(NopHandler{})
			c.state = stateOpen
			c.closeWithReset(err)
			return err
		}
		c.setHandler(h)
	}
	c.state = stateOpen
	if c.extras != nil {
		t := c.l.Now()
		c.extras.lastRead, c.extras.lastIO = t, t
	}
	if err = c.callOpen(); err != nil {
		c.closeWithReset(err)
		return err
	}
	if c.state != stateOpen {
		return nil // closed by OnOpen
	}
	c.inbound().arm()
	c.armTimeouts()
	return nil
}

// recovered turns a recovered panic into a *PanicError, logged with its
// stack and counted.
func (c *lifecycle) recovered(callback string, r any) error {
	panics.Add(1)
	pe := &PanicError{Callback: callback, Value: r, Stack: debug.Stack()}
	c.l.Logger().Error("conn: handler panicked; closing the connection", "loop", c.l.String(),
		"callback", callback, "panic", r, "remote", c.raddr, "stack", stackValue(pe.Stack))
	return pe
}

// failOnPanic, deferred around a callback, closes the connection with a
// reset if the callback panicked. On c's loop.
func (c *lifecycle) failOnPanic(callback string) {
	if r := recover(); r != nil {
		c.closeWithReset(c.recovered(callback, r))
	}
}

// callOpen runs OnOpen under recover.
func (c *lifecycle) callOpen() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.recovered("OnOpen", r)
		}
	}()
	c.l.Running(&runOnOpen)
	c.h.OnOpen(c.conn())
	return nil
}

// callClose runs OnClose under recover: the connection is gone already,
// so a panic is only logged and counted.
func (c *lifecycle) callClose() {
	defer func() {
		if r := recover(); r != nil {
			c.recovered("OnClose", r)
		}
	}()
	c.l.Running(&runOnClose)
	c.h.OnClose(c.conn(), c.closeCause())
}

func stopTimer(t **sched.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// stopTimeouts stops the read and idle timers.
func (c *lifecycle) stopTimeouts() {
	if c.extras != nil {
		stopTimer(&c.extras.readTimer)
		stopTimer(&c.extras.idleTimer)
	}
}

// armTimeouts starts the timers of the timeouts that are set and not armed.
func (c *lifecycle) armTimeouts() {
	x := c.extras
	if x == nil {
		return
	}
	if x.readTimeout > 0 && x.readTimer == nil {
		x.readTimer, _ = c.l.Schedule(x.readTimeout, c.onReadTimer)
	}
	if x.idleTimeout > 0 && x.idleTimer == nil {
		x.idleTimer, _ = c.l.Schedule(x.idleTimeout, c.onIdleTimer)
	}
}

// onReadTimer checks the read timeout: a receive since the timer was armed
// re-arms it for the time left, so receiving costs a clock read only.
func (c *lifecycle) onReadTimer() {
	x := c.extras
	x.readTimer = nil
	if c.state != stateOpen || x.readTimeout <= 0 || c.flags.has(flagPeerEOF|flagLingering) {
		return
	}
	if c.pauseReasons != 0 {
		x.lastRead = c.l.Now() // no read is expected while paused
	}
	if left := x.readTimeout - (c.l.Now() - x.lastRead); left > 0 {
		x.readTimer, _ = c.l.Schedule(left, c.onReadTimer)
		return
	}
	c.closeNow(c.conn().opError("read", "", errDeadline))
}

// onIdleTimer checks the idle timeout as onReadTimer checks the read
// timeout.
func (c *lifecycle) onIdleTimer() {
	x := c.extras
	x.idleTimer = nil
	if c.state != stateOpen || x.idleTimeout <= 0 || c.flags.has(flagLingering) {
		return
	}
	if left := x.idleTimeout - (c.l.Now() - x.lastIO); left > 0 {
		x.idleTimer, _ = c.l.Schedule(left, c.onIdleTimer)
		return
	}
	c.closeNow(c.conn().opError("read", "", errDeadline))
}

// Close closes the connection. Receiving stops at once (no OnData after
// Close returns on the loop, none once the close task ran otherwise); the
// bytes queued by every Write that returned before it still go to the
// kernel, so c.Write(resp); c.Close() delivers resp as with a net.Conn, for
// as long as the peer takes them: the queue is dropped only once no byte
// went out for the linger time (WithLinger). Then the fd is closed and
// OnClose runs with nil once every queued byte went to the kernel, with the
// error that dropped bytes otherwise (the linger ran out: one wrapping
// os.ErrDeadlineExceeded; a failed send: its errno), or with the error that
// closed the connection before Close was called. It returns at once; a
// second call, and Writes after Close, return an error wrapping
// net.ErrClosed. Safe for concurrent use.
func (c *Conn) Close() error {
	c.shared.set(sharedCloseCalled)
	if c.shared.set(sharedCloseRequested) {
		return c.opError("close", "", net.ErrClosed)
	}
	c.mu.Lock()
	c.shared.set(sharedWritesClosed)
	c.wakeRoomWaiters()
	c.mu.Unlock()
	lc := c.lifecycle()
	if c.l.InLoop() {
		lc.closeLinger()
		return nil
	}
	// An error means the loop is shutting down: its drain cancels c's
	// ops, and c closes as they complete (OnClose reports net.ErrClosed).
	_ = executeRetrying(c.l, lc.closeLinger)
	return nil
}

// closeLinger is a local Close on the loop: stop receiving, then close once
// the outbound queue has drained (outbound.drained) or no byte went out
// for the linger time (onLingerTimer), whichever comes first. Must be
// called on c's loop.
func (c *lifecycle) closeLinger() { c.closeLingerCause(nil) }

// closeLingerCause is closeLinger with the cause OnClose reports once the
// queue drained (nil for Close).
func (c *lifecycle) closeLingerCause(cause error) {
	if c.state != stateOpen || c.cfg.linger == 0 {
		c.closeNow(cause)
		return
	}
	if c.flags.has(flagLingering) {
		return
	}
	c.mu.Lock()
	empty := c.outQueue.n == 0
	c.mu.Unlock()
	if empty {
		c.closeNow(cause)
		return
	}
	t, err := c.l.Schedule(c.cfg.linger, c.onLingerTimer)
	switch {
	case err == nil:
		c.ensureExtras().lingerTimer = t
	case errors.Is(err, loop.ErrShuttingDown):
		// The loop is shutting down and takes no timers: linger without
		// one, holding its termination until the queue drains or the
		// shutdown's timeout passes (then its drain cancels the send).
		c.ensureExtras().terminationHold = c.l.DelayTermination(c.cfg.linger)
	default:
		// The loop is terminating: the queue is dropped, as by the
		// loop's shutdown.
		if cause == nil {
			cause = c.errLoopShutdown()
		}
		c.closeNow(cause)
		return
	}
	c.flags.set(flagLingering)
	c.extras.lastIO = c.l.Now() // the send completions move it on (outbound.Complete)
	c.mu.Lock()
	c.extras.closeErr = cause
	c.mu.Unlock()
	if nc, ok := c.h.(*NetConn); ok {
		nc.end(cause) // its Reads and Writes end now, not with the linger
	}
	c.stopTimeouts()
	if c.flags.has(flagRecvArmed) {
		cancelOp(c.l, c.recvID) // its completions are dropped from now on
	}
	if !c.flags.has(flagSendArmed) {
		c.outbound().startSend()
	}
}

// onLingerTimer ends the linger once no byte went out for the linger time:
// the send in flight is canceled and the queue dropped, and OnClose reports
// it. A peer that is still taking bytes gets the time left from the last
// send completion, as the read and idle timers do from their last event.
func (c *lifecycle) onLingerTimer() {
	x := c.extras
	x.lingerTimer = nil
	if !c.flags.has(flagLingering) {
		return
	}
	if left := c.cfg.linger - (c.l.Now() - x.lastIO); left > 0 {
		t, err := c.l.Schedule(left, c.onLingerTimer)
		if err == nil {
			x.lingerTimer = t
			return
		}
		if errors.Is(err, loop.ErrShuttingDown) {
			return // closeForShutdown holds the loop's termination instead
		}
	}
	c.mu.Lock()
	n := c.outQueue.n
	c.mu.Unlock()
	c.closeNow(c.conn().opError("close", "", fmt.Errorf("%w: no byte sent for the linger time (%v), %d queued bytes dropped",
		errDeadline, c.cfg.linger, n)))
}

// CloseWrite shuts down the sending side (shutdown(2) with SHUT_WR) once
// every byte queued before the call is sent; the peer then reads EOF while
// this side keeps receiving. Later Writes fail with EPIPE, as a write to a
// socket shut down for writing does (errors.Is(err, syscall.EPIPE)), and a
// second CloseWrite does nothing, as a second shutdown(2) does (until
// Close). After Close, or once the connection closed before any
// CloseWrite, it returns an error wrapping net.ErrClosed. Safe for
// concurrent use.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	c.wakeRoomWaiters()
	if c.shared.set(sharedWritesClosed) {
		again := c.shutNotClosed()
		c.mu.Unlock()
		if again {
			return nil
		}
		return c.opError("close", "", net.ErrClosed)
	}
	c.shared.set(sharedWriteShut)
	c.mu.Unlock()
	f := func() {
		if c.state != stateOpen {
			return
		}
		c.flags.set(flagShutdownWanted)
		if !c.flags.has(flagSendArmed) {
			c.outbound().startSend() // sends what is queued, or shuts down at once
		}
	}
	if c.l.InLoop() {
		f()
		return nil
	}
	if err := executeRetrying(c.l, f); err != nil {
		return c.opError("close", "", net.ErrClosed)
	}
	return nil
}

// startShutdown submits shutdown(SHUT_WR). Must be called on c's loop.
func (c *lifecycle) startShutdown() {
	op := &c.ensureExtras().op
	id, err := c.l.IO().Shutdown(int(c.fd), unix.SHUT_WR, c)
	if err != nil {
		c.closeNow(c.conn().opError("close", "shutdown", err))
		return
	}
	op.id, op.kind, op.active = id, opShutdown, true
	c.opsInFlight++
}

// failLimit ends c for passing one of its declared limits (its inbound
// limit, its outbound limit), with err as the cause: reading stops and the
// kept input is dropped; a LimitHandler hears err in OnLimit and may
// write an answer, which goes out before the close, as Close lets queued
// bytes go (WithLinger); with nothing queued, or past the outbound limit,
// the connection resets. Must be called on c's loop.
func (c *lifecycle) failLimit(err error) {
	if c.state != stateOpen || c.flags.has(flagLingering) {
		c.closeWithReset(err)
		return
	}
	in := c.inbound()
	in.applyPause(pausedByLimit, true)
	in.unchargeKept()
	c.kept = nil
	if lh, ok := c.h.(LimitHandler); ok {
		c.callLimit(lh, err)
	}
	if c.state != stateOpen {
		return
	}
	c.shared.set(sharedCloseRequested)
	c.mu.Lock()
	wasClosed := c.shared.set(sharedWritesClosed)
	c.conn().wakeRoomWaiters()
	queued := c.outQueue.n
	c.mu.Unlock()
	if queued == 0 || wasClosed && errors.Is(err, ErrOutboundLimit) {
		c.closeWithReset(err)
		return
	}
	c.closeLingerCause(err)
}

// callLimit runs OnLimit under recover.
func (c *lifecycle) callLimit(lh LimitHandler, err error) {
	defer c.failOnPanic("OnLimit")
	c.l.Running(&runOnLimit)
	lh.OnLimit(c.conn(), err)
}

// closeWithReset starts the close protocol with cause err and a reset
// instead of an orderly FIN: the stream broke. Must be called on c's loop.
func (c *lifecycle) closeWithReset(err error) {
	c.flags.set(flagResetOnClose)
	c.closeNow(err)
}

// closeNow starts the close protocol with cause err (nil: a local Close).
// Only the first cause counts. Must be called on c's loop.
func (c *lifecycle) closeNow(err error) {
	if c.state >= stateClosing {
		return
	}
	lingering := c.flags.has(flagLingering)
	c.state = stateClosing
	c.shared.set(sharedCloseRequested)
	// Kept input is never delivered now: let it go at once, not when the
	// fd's close completes (a budget closing many connections counts on
	// it).
	c.inbound().unchargeKept()
	c.kept = nil
	x := c.ensureExtras() // made before the lock: CloseFuture reads c.extras under it
	c.mu.Lock()
	if lingering && (c.outQueue.n == 0 || c.flags.has(flagClosedByShutdown)) {
		// The close that lingers came first: OnClose reports its cause
		// (nil for Close, or the loop's shutdown), unless bytes written
		// before it are dropped.
		err = x.closeErr
	}
	x.closeErr = err
	c.shared.set(sharedWritesClosed)
	c.conn().wakeRoomWaiters()
	if c.outQueue.n > 0 {
		// Bytes the handler wrote are dropped: reset, so the peer sees
		// the stream fail instead of an orderly end after a gap.
		c.flags.set(flagResetOnClose)
	}
	c.mu.Unlock()
	c.stopTimeouts()
	if c.extras != nil {
		stopTimer(&c.extras.lingerTimer)
	}
	if c.flags.has(flagRecvArmed) {
		cancelOp(c.l, c.recvID)
	}
	if c.flags.has(flagSendArmed) {
		cancelOp(c.l, c.sendID)
	}
	if op := c.activeOp(); op != nil {
		cancelOp(c.l, op.id)
	}
	c.maybeFinish()
}

// maybeFinish closes the fd once the connection is closing and no op is
// left in flight. Must be called on c's loop.
func (c *lifecycle) maybeFinish() {
	if c.state != stateClosing || c.opsInFlight > 0 {
		return
	}
	c.state = stateClosed
	if c.flags.has(flagResetOnClose) {
		// Reset instead of an orderly FIN: the peer must see the stream
		// failed, not a clean end after a gap. (TCP only: a Unix socket
		// has no reset, and its peer reads an orderly end.)
		_ = unix.SetsockoptLinger(int(c.fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	op := &c.ensureExtras().op
	id, err := c.l.IO().Close(int(c.fd), c)
	if err != nil {
		// The loop no longer takes ops (it is terminating): close
		// synchronously; nothing is in flight on the fd.
		_ = unix.Close(int(c.fd))
		c.closed()
		return
	}
	op.id, op.kind, op.active = id, opClose, true
}

// closed runs after the fd is closed: it frees the outbound queue and
// reports OnClose. Must be called on c's loop.
func (c *lifecycle) closed() {
	c.mu.Lock()
	c.outQueue.release()
	c.mu.Unlock()
	c.outbound().chargeOutbound(0)
	c.inbound().unchargeKept()
	c.kept = nil
	if c.extras != nil && c.extras.terminationHold != nil {
		c.extras.terminationHold()
		c.extras.terminationHold = nil
	}
	if c.flags.has(flagTracked) {
		c.untrack()
	}
	if c.flags.has(flagClosedByShutdown) && c.closeCause() == nil {
		err := c.errLoopShutdown()
		x := c.ensureExtras()
		c.mu.Lock()
		x.closeErr = err
		c.mu.Unlock()
	}
	c.callClose()
	if c.srv != nil {
		c.srv.remove(c.conn())
	}
	c.mu.Lock()
	c.shared.set(sharedCloseReported)
	var f *sched.Future[struct{}]
	if d := c.userData.Load(); d != nil {
		f = d.closeFuture
	}
	c.mu.Unlock()
	if f != nil {
		f.Complete(struct{}{}, c.closeCause())
	}
}

// lifecycleOpKind tells what lifecycleOp currently carries.
type lifecycleOpKind uint8

const (
	opConnect lifecycleOpKind = iota + 1
	opShutdown
	opClose
	opDialClose // the fd of a failed Dial
)

// lifecycleOp is the connection's one op besides receive and send: its
// CONNECT (Dial), its SHUTDOWN (CloseWrite) or its final CLOSE. They never
// overlap: the shutdown starts only on an open connection (after connect),
// and the close only when nothing else is in flight.
type lifecycleOp struct {
	id     loop.OpID
	kind   lifecycleOpKind
	active bool
}

// Complete handles the completion of the connect, shutdown or close.
func (c *lifecycle) Complete(cp *loop.Completion) {
	op := &c.extras.op
	op.active = false
	switch op.kind {
	case opConnect:
		c.opsInFlight--
		c.connectedAs(cp.Res, cp.Quarantined)
	case opShutdown:
		c.opsInFlight--
		if c.state != stateOpen {
			c.maybeFinish()
			return
		}
		if cp.Res < 0 && errnoOf(cp.Res) != unix.ENOTCONN {
			c.closeNow(c.conn().resultError("close", "shutdown", cp.Res))
			return
		}
		if c.flags.has(flagPeerEOF) && c.cfg.halfClose {
			c.closeNow(io.EOF) // the peer's FIN came first: both directions are done
		}
	case opClose:
		// close(2) errors are not actionable: the fd is gone either way.
		c.closed()
	case opDialClose:
		c.finishDial(c.extras.dial.err)
	}
}
