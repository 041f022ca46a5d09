package conn

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// The close protocol (docs/op-lifecycle.md, "Closing an fd"): mark the
// connection closed, cancel every op in flight on its fd, wait for their
// final completions (c.ops reaching zero), then close the fd with a CLOSE
// op, and only after that completes call OnClose, exactly once. No op names
// the fd when it is closed, so its number can be reused at once without a
// completion landing on the wrong connection.

// Close closes the connection. Receiving stops at once (no OnData after
// Close returns on the loop, none once the close task ran otherwise); the
// bytes queued by earlier Writes still go to the kernel, so c.Write(resp);
// c.Close() delivers resp as with a net.Conn, for at most the linger time
// (WithLinger). Then the fd is closed and OnClose runs with nil, or with the
// error that closed the connection before Close was called (errors while
// lingering are not reported). It returns at once; a second call, and
// Writes after Close, return an error wrapping net.ErrClosed. Safe for
// concurrent use.
func (c *Conn) Close() error {
	if c.setShared(sharedCloseReq) {
		return c.opError("close", "", net.ErrClosed)
	}
	c.mu.Lock()
	c.wclosed = true
	c.mu.Unlock()
	if c.l.InLoop() {
		c.closeLinger()
		return nil
	}
	// An error means the loop is shutting down: its drain cancels c's
	// ops, and c closes as they complete (OnClose reports net.ErrClosed).
	_ = executeRetrying(c.l, c.closeLinger)
	return nil
}

// cancelOp cancels op id on l and reports whether the op is live, its
// final completion still to come. loop.ErrUnknownOp means the op has
// reached its final completion; any other error (the backend could not
// queue the cancel: its submission queue full, the kernel busy) leaves the
// op live, so the cancel is tried again after the turn. A terminating
// loop's drain cancels what is left. Must be called on l.
func cancelOp(l *loop.Loop, id loop.OpID) bool {
	err := l.IO().Cancel(id)
	if err != nil && !errors.Is(err, loop.ErrUnknownOp) {
		_ = l.ExecuteAfterTurn(func() { cancelOp(l, id) })
		return true
	}
	return err == nil
}

// executeRetrying runs f on l as a task that must not be lost to a bounded
// task queue that is full (loop.WithMaxPendingTasks): a close, a pause or
// resume, a dial's cancellation. Refused ones wait in l's overflow, and a
// goroutine hands them to l in order, backing off up to 10 ms, until l
// takes each or shuts down; while any waits, later calls queue behind it,
// so one goroutine's calls keep their order. The error is the loop's other
// than a full queue: l is shutting down.
func executeRetrying(l *loop.Loop, f func()) error {
	o := &registryFor(l).overflow
	o.mu.Lock()
	if len(o.q) == 0 {
		o.mu.Unlock()
		err := l.Execute(f)
		if err == nil || !errors.Is(err, loop.ErrQueueFull) {
			return err
		}
		o.mu.Lock()
	}
	o.q = append(o.q, f)
	if !o.running {
		o.running = true
		go o.drain(l)
	}
	o.mu.Unlock()
	return nil
}

// overflow holds tasks a loop's full task queue refused, for drain.
type overflow struct {
	mu      sync.Mutex
	q       []func()
	running bool
}

// drain hands the overflow's tasks to l in order until none is left. One
// l refuses for shutting down is dropped: the loop's shutdown closes what
// it would have.
func (o *overflow) drain(l *loop.Loop) {
	wait := 100 * time.Microsecond
	for {
		o.mu.Lock()
		if len(o.q) == 0 {
			o.q, o.running = nil, false
			o.mu.Unlock()
			return
		}
		f := o.q[0]
		o.mu.Unlock()
		if err := l.Execute(f); err != nil && errors.Is(err, loop.ErrQueueFull) {
			time.Sleep(wait)
			wait = min(2*wait, 10*time.Millisecond)
			continue
		}
		wait = 100 * time.Microsecond
		o.mu.Lock()
		o.q[0] = nil
		o.q = o.q[1:]
		o.mu.Unlock()
	}
}

// closeLinger is a local Close on the loop: stop receiving, then close once
// the outbound queue has drained (drained) or the linger timer fires,
// whichever comes first. Must be called on c's loop.
func (c *Conn) closeLinger() {
	if c.state != stateOpen || c.cfg.linger == 0 {
		c.closeNow(nil)
		return
	}
	if c.lingering {
		return
	}
	c.mu.Lock()
	empty := c.out.n == 0
	c.mu.Unlock()
	if empty {
		c.closeNow(nil)
		return
	}
	t, err := c.l.Schedule(c.cfg.linger, c.onLingerTimer)
	switch {
	case err == nil:
		c.rareX().lingerTimer = t
	case errors.Is(err, loop.ErrShuttingDown):
		// The loop is shutting down and takes no timers: linger without
		// one, holding its termination until the queue drains or the
		// shutdown's timeout passes (then its drain cancels the send).
		c.rareX().lingerHold = c.l.DelayTermination(c.cfg.linger)
	default:
		c.closeNow(nil) // the loop is terminating
		return
	}
	c.lingering = true
	c.mu.Lock()
	c.rare.closeErr = nil
	c.mu.Unlock()
	c.stopTimeouts()
	if c.recvActive {
		cancelOp(c.l, c.recvID) // its completions are dropped from now on
	}
	if !c.send.active {
		c.startSend()
	}
}

// onLingerTimer ends the linger: the send in flight is canceled and the
// queue dropped.
func (c *Conn) onLingerTimer() {
	c.rare.lingerTimer = nil
	if c.lingering {
		c.closeNow(nil)
	}
}

// CloseWrite shuts down the sending side (shutdown(2) with SHUT_WR) once
// every byte queued before the call is sent; the peer then reads EOF while
// this side keeps receiving. Later Writes fail with net.ErrClosed. Safe for
// concurrent use.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	if c.wclosed {
		c.mu.Unlock()
		return c.opError("close", "", net.ErrClosed)
	}
	c.wclosed = true
	c.mu.Unlock()
	f := func() {
		if c.state != stateOpen {
			return
		}
		c.shutWanted = true
		if !c.send.active {
			c.startSend() // sends what is queued, or shuts down at once
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
func (c *Conn) startShutdown() {
	m := &c.rareX().misc
	id, err := c.l.IO().Shutdown(int(c.fd), unix.SHUT_WR, (*miscDone)(c))
	if err != nil {
		c.closeNow(c.opError("close", "shutdown", err))
		return
	}
	m.id, m.kind, m.active = id, miscShutdown, true
	c.ops++
}

// closeNow starts the close protocol with cause err (nil: a local Close).
// Only the first cause counts. Must be called on c's loop.
func (c *Conn) closeNow(err error) {
	if c.state >= stateClosing {
		return
	}
	if c.lingering {
		err = nil // Close came first: OnClose reports the local close
	}
	c.state = stateClosing
	c.setShared(sharedCloseReq)
	// Kept input is never delivered now: let it go at once, not when the
	// fd's close completes (a budget closing many connections counts on
	// it).
	c.uncharge()
	c.kin = nil
	x := c.rareX() // made before the lock: CloseFuture reads c.rare under it
	c.mu.Lock()
	x.closeErr = err
	c.wclosed = true
	if c.out.n > 0 {
		// Bytes the handler wrote are dropped: reset, so the peer sees
		// the stream fail instead of an orderly end after a gap.
		c.abort = true
	}
	c.mu.Unlock()
	c.stopTimeouts()
	if c.rare != nil {
		stopTimer(&c.rare.lingerTimer)
	}
	if c.recvActive {
		cancelOp(c.l, c.recvID)
	}
	if c.send.active {
		cancelOp(c.l, c.send.id)
	}
	if m := c.miscOp(); m != nil {
		cancelOp(c.l, m.id)
	}
	c.maybeFinish()
}

// maybeFinish closes the fd once the connection is closing and no op is
// left in flight. Must be called on c's loop.
func (c *Conn) maybeFinish() {
	if c.state != stateClosing || c.ops > 0 {
		return
	}
	c.state = stateClosed
	if c.abort {
		// Reset instead of an orderly FIN: the peer must see the stream
		// failed, not a clean end after a gap. (TCP only: a Unix socket
		// has no reset, and its peer reads an orderly end.)
		_ = unix.SetsockoptLinger(int(c.fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	m := &c.rareX().misc
	id, err := c.l.IO().Close(int(c.fd), (*miscDone)(c))
	if err != nil {
		// The loop no longer takes ops (it is terminating): close
		// synchronously; nothing is in flight on the fd.
		_ = unix.Close(int(c.fd))
		c.closed()
		return
	}
	m.id, m.kind, m.active = id, miscClose, true
}

// closed runs after the fd is closed: it frees the outbound queue and
// reports OnClose. Must be called on c's loop.
func (c *Conn) closed() {
	c.mu.Lock()
	c.out.release()
	c.mu.Unlock()
	c.chargeOut(0)
	c.uncharge()
	c.kin = nil
	if c.rare != nil && c.rare.lingerHold != nil {
		c.rare.lingerHold()
		c.rare.lingerHold = nil
	}
	if c.tracked {
		c.untrack()
	}
	if c.shutdownClose && c.closeCause() == nil {
		err := c.errLoopShutdown()
		x := c.rareX()
		c.mu.Lock()
		x.closeErr = err
		c.mu.Unlock()
	}
	c.callClose()
	if c.srv != nil {
		c.srv.remove(c)
	}
	c.mu.Lock()
	c.closedDone = true
	var f *sched.Future[struct{}]
	if e := c.ext.Load(); e != nil {
		f = e.closeF
	}
	c.mu.Unlock()
	if f != nil {
		f.Complete(struct{}{}, c.closeCause())
	}
}

// miscKind tells what miscOp currently carries.
type miscKind uint8

const (
	miscConnect miscKind = iota + 1
	miscShutdown
	miscClose
	miscDialClose // the fd of a failed Dial
)

// miscOp is the connection's one op besides receive and send: its CONNECT
// (Dial), its SHUTDOWN (CloseWrite) or its final CLOSE. They never overlap:
// the shutdown starts only on an open connection (after connect), and the
// close only when nothing else is in flight.
type miscOp struct {
	id     loop.OpID
	kind   miscKind
	active bool
}

// miscDone is a Conn seen as the Completer of its connect, shutdown or
// close (see recvDone).
type miscDone Conn

// Complete handles the completion of the connect, shutdown or close.
func (d *miscDone) Complete(cp *loop.Completion) {
	c := (*Conn)(d)
	m := &c.rare.misc
	m.active = false
	switch m.kind {
	case miscConnect:
		c.ops--
		c.connectedAs(cp.Res, cp.Quarantined)
	case miscShutdown:
		c.ops--
		if c.state != stateOpen {
			c.maybeFinish()
			return
		}
		if cp.Res < 0 && errnoOf(cp.Res) != unix.ENOTCONN {
			c.closeNow(c.resultError("close", "shutdown", cp.Res))
			return
		}
		if c.eof && c.cfg.halfClose {
			c.closeNow(io.EOF) // the peer's FIN came first: both directions are done
		}
	case miscClose:
		// close(2) errors are not actionable: the fd is gone either way.
		c.closed()
	case miscDialClose:
		c.finishDial(c.rare.dial.err)
	}
}
