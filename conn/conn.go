package conn

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
)

// connState is where a connection is in its life. It only moves forward
// and is read and written on the loop goroutine only.
//
//	stateConnecting ─connect ok─► stateOpen ─Close / EOF flushed / error / timeout─► stateClosing
//	        (Dial)                   ▲                                                   │ in-flight ops
//	stateNew ─registered (accept)────┘                                                   │ reach their
//	                                                                                      ▼ final completion
//	                                                        stateClosed ◄─ close(fd) completes: OnClose
type connState uint8

const (
	stateNew        connState = iota // accepted, not yet registered on its loop
	stateConnecting                  // Dial's CONNECT in flight
	stateOpen                        // OnOpen ran; receiving and sending
	stateClosing                     // closed for the user; waiting for in-flight ops, then close(fd)
	stateClosed                      // fd closed, OnClose ran (or Dial failed)
)

// A Conn is one TCP or Unix stream connection living on one loop for its
// whole life. Its events go to its Handler on that loop. Every method is
// safe for concurrent use unless its comment says otherwise.
//
// The setters (SetReadTimeout, SetIdleTimeout, SetNoDelay, SetKeepAlive,
// SetReadBuffer, SetWriteBuffer) run on the connection's loop: on that loop
// at once; from a goroutine that is no loop, as a task whose result they
// wait for; from another loop's goroutine (a handler of another
// connection), as a task they do not wait for, returning nil, since two
// loops waiting on each other would both stop for good. An error of such a
// task (the connection closed meanwhile) is not reported.
type Conn struct {
	// Immutable after creation.
	l     *loop.Loop
	h     Handler
	cfg   *config
	srv   *Server // nil for a dialed conn
	laddr net.Addr
	raddr net.Addr
	fd    int32

	flushFn func() // c.flush, made once: queuing it allocates nothing

	// Shared with other goroutines.
	wgen        atomic.Uint32           // writability transitions so far: even = writable (see notifyWritability)
	ext         atomic.Pointer[connExt] // SetContext's value and CloseFuture's future; made on first use
	mu          sync.Mutex              // guards out, flushQueued, wclosed, ext.closeF, closedDone and rare.closeErr's writes
	shared      atomic.Uint32           // sharedUserPaused, sharedClaimed, sharedCloseReq
	closedDone  bool                    // OnClose ran; guarded by mu
	flushQueued bool                    // a flush tail task is queued on the loop; guarded by mu
	wclosed     bool                    // no more writes: closed or CloseWrite; guarded by mu
	out         chunkQueue              // outbound bytes, appended by Write, consumed by sends; guarded by mu

	// Loop goroutine only.
	recvID     loop.OpID // the armed receive, while recvActive
	send       sendOp
	kin        *keptInput // bytes kept: made when bytes are first kept
	outCharged int        // c.out.n as counted in the loop's outbound total (chargeOut)
	rare       *connRare  // timeouts, the linger timer, a dial, the last op; nil until one is needed

	state         connState
	pause         uint8  // why reading is paused (pauseUser, pauseWritable); 0: reading
	eofHeld       bool   // the FIN came while kept bytes wait for a resume
	slowed        bool   // reading paused once: receives ask for a limit (LimitRecv)
	resumeQueued  bool   // the resume task is queued
	abort         bool   // close with a reset (SO_LINGER 0): the stream broke
	lingering     bool   // Close waits for the outbound queue to drain (WithLinger)
	eof           bool   // the peer's FIN arrived
	shutWanted    bool   // CloseWrite: shutdown(SHUT_WR) once the queue is empty
	shutDone      bool   // shutdown submitted
	tracked       bool   // in its loop's registry (registry.go)
	shutdownClose bool   // closed by its loop's shutdown: OnClose reports net.ErrClosed
	hasWH         bool   // h implements WritabilityHandler
	hasHH         bool   // h implements HalfCloseHandler
	hasRH         bool   // h implements ReadHandler
	unixSock      bool   // a Unix socket ("unix"), not TCP ("tcp")
	recvOnce      bool   // receive with single shots: the reset sweep found a multishot receive deaf (resetsweep_linux.go)
	rxSweeps      uint8  // reset sweeps left to check c: set by each received byte count (resetsweep_linux.go)
	drainEOF      bool   // close with io.EOF once the outbound queue is empty
	counted       bool   // in its server's live count; guarded by srv.mu
	recvActive    bool   // a receive is armed (recv.id)
	recvCanceled  bool   // the receive was canceled by a pause: its -ECANCELED is no error
	ops           int32  // ops started and not yet at their final completion
	regIdx        int32  // 1-based index in its loop's registry; 0: not in it
	wseen         uint32 // writability transitions reported to the handler
}

// connRare holds what few connections need, apart from Conn: the read and
// idle timeouts (Netty's IdleStateHandler scheme: one timer each, re-armed
// for the time left instead of being reset on every receive), the linger
// timer, a dial's state and the connect, shutdown or close op (every
// connection makes it as it closes).
// Loop goroutine only (a dial sets it before its conn reaches the loop).
type connRare struct {
	read, idle           time.Duration
	lastRead, lastIO     int64 // monotonic ns of the last received data, and of the last receive or send
	readTimer, idleTimer *sched.Timer
	lingerTimer          *sched.Timer
	lingerHold           func()     // releases the loop's DelayTermination while lingering as it shuts down
	dial                 *dialState // non-nil while Dial waits
	misc                 miscOp     // the connect, shutdown or close in flight
	closeErr             error      // the cause OnClose reports; written on the loop under Conn.mu, read elsewhere under it once closedDone
}

// closeCause is the cause OnClose reports (nil: a local Close). On the
// loop, or elsewhere under c.mu once closedDone.
func (c *Conn) closeCause() error {
	if c.rare == nil {
		return nil
	}
	return c.rare.closeErr
}

// miscOp returns the connect, shutdown or close in flight, or nil.
func (c *Conn) miscOp() *miscOp {
	if c.rare != nil && c.rare.misc.active {
		return &c.rare.misc
	}
	return nil
}

// Bits of Conn.shared, flags other goroutines read or set.
const (
	sharedUserPaused uint32 = 1 << iota // PauseRead is in effect (ReadPaused)
	sharedClaimed                       // an accepted fd's owner is settled (register, or a refused hand-off)
	sharedCloseReq                      // Close was called
)

// setShared sets bit in c.shared and reports whether it was set already.
func (c *Conn) setShared(bit uint32) bool { return c.shared.Or(bit)&bit != 0 }

// rareX returns c's rare part, making it on first use.
func (c *Conn) rareX() *connRare {
	if c.rare == nil {
		c.rare = new(connRare)
	}
	return c.rare
}

// ctxBox holds the user's context value (atomic.Pointer needs one type).
type ctxBox struct{ v any }

// connExt holds what a connection needs only once asked: SetContext's
// value and CloseFuture's future.
type connExt struct {
	ctx    atomic.Pointer[ctxBox]
	closeF *sched.Future[struct{}] // guarded by Conn.mu
}

// extX returns c's connExt, making it on first use. Safe for concurrent
// use.
func (c *Conn) extX() *connExt {
	if e := c.ext.Load(); e != nil {
		return e
	}
	e := new(connExt)
	if c.ext.CompareAndSwap(nil, e) {
		return e
	}
	return c.ext.Load()
}

func newConn(l *loop.Loop, fd int, network string, h Handler, cfg *config, srv *Server) *Conn {
	c := &Conn{l: l, cfg: cfg, srv: srv, fd: int32(fd), unixSock: network == "unix"}
	c.flushFn = c.flush
	if h != nil {
		c.setHandler(h)
	}
	if cfg.readTimeout > 0 || cfg.idleTimeout > 0 {
		c.rare = &connRare{read: cfg.readTimeout, idle: cfg.idleTimeout}
	}
	return c
}

// netw returns the connection's network: "tcp" or "unix".
func (c *Conn) netw() string {
	if c.unixSock {
		return "unix"
	}
	return "tcp"
}

// acceptedLocalAddr returns the local address of an accepted connection
// when its server's address says it without a system call: a server bound
// to one IP address, or a Unix socket path. The connections share the
// server's value, as they share the address. Otherwise it returns nil.
func (c *Conn) acceptedLocalAddr() net.Addr {
	if c.srv == nil {
		return nil
	}
	switch a := c.srv.addr.(type) {
	case *net.TCPAddr:
		if a.IP != nil && !a.IP.IsUnspecified() {
			return a
		}
	case *net.UnixAddr:
		if a.Name != "" && a.Name[0] != '@' {
			return a
		}
	}
	return nil
}

// setHandler sets the connection's handler and the optional interfaces it
// implements. Before open only.
func (c *Conn) setHandler(h Handler) {
	c.h = h
	_, c.hasRH = h.(ReadHandler)
	_, c.hasWH = h.(WritabilityHandler)
	_, c.hasHH = h.(HalfCloseHandler)
}

// newHandler runs the server's handler factory under recover.
func (c *Conn) newHandler() (h Handler, err error) {
	defer func() {
		if r := recover(); r != nil {
			h, err = nil, c.recovered("ListenFunc's handler factory", r)
		}
	}()
	if h = c.srv.newH(c); h == nil {
		err = fmt.Errorf("conn: ListenFunc's handler factory returned nil")
		slog.Error("conn: closing the connection", "remote", c.raddr, "error", err)
		return nil, err
	}
	return h, nil
}

// open makes the connection live on its loop: socket options, addresses,
// OnOpen, the first receive and the timers. Must be called on c's loop.
//
// A panic in OnOpen closes the connection with a *PanicError (OnClose
// reports it; nothing stays armed) and is returned, for Dial.
func (c *Conn) open() (err error) {
	applySockopts(int(c.fd), c.netw(), c.cfg)
	c.laddr, c.raddr = c.acceptedLocalAddr(), connAddr(int(c.fd), c.netw(), true)
	if c.laddr == nil {
		c.laddr = connAddr(int(c.fd), c.netw(), false)
	}
	if !c.track() {
		// The loop is shutting down: the connection closes at once,
		// before any handler sees it (a dial fails with the error).
		err = c.errLoopShutdown()
		c.setHandler(NopHandler{})
		c.state = stateOpen
		c.closeNow(err)
		return err
	}
	c.tracked = true
	if c.h == nil {
		h, err := c.newHandler()
		if err != nil {
			// No handler to report to: close quietly (logged above).
			c.setHandler(NopHandler{})
			c.state = stateOpen
			c.abort = true
			c.closeNow(err)
			return err
		}
		c.setHandler(h)
	}
	c.state = stateOpen
	if c.rare != nil {
		t := now()
		c.rare.lastRead, c.rare.lastIO = t, t
	}
	if err = c.callOpen(); err != nil {
		c.abort = true
		c.closeNow(err)
		return err
	}
	if c.state != stateOpen {
		return nil // closed by OnOpen
	}
	c.armRecv()
	c.armTimeouts()
	return nil
}

// A PanicError is the cause a connection closes with when one of its
// handler's callbacks panicked: the panic value and the stack it was
// raised on.
type PanicError struct {
	Callback string // "OnOpen", "OnData", "OnRead", "OnWritabilityChanged", "OnHalfClose" or "OnClose"
	Value    any
	Stack    []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("conn: %s panicked: %v", e.Callback, e.Value)
}

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// panics counts the handler panics recovered (RecoveredPanics).
var panics atomic.Uint64

// RecoveredPanics returns how many handler callbacks have panicked (and
// were recovered) in this process. Safe for concurrent use.
func RecoveredPanics() uint64 { return panics.Load() }

// recovered turns a recovered panic into a *PanicError, logged with its
// stack and counted.
func (c *Conn) recovered(callback string, r any) error {
	panics.Add(1)
	pe := &PanicError{Callback: callback, Value: r, Stack: debug.Stack()}
	slog.Error("conn: handler panicked; closing the connection", "callback", callback,
		"panic", r, "remote", c.raddr, "stack", string(pe.Stack))
	return pe
}

// failOnPanic, deferred around a callback, closes the connection with a
// reset if the callback panicked. On c's loop.
func (c *Conn) failOnPanic(callback string) {
	if r := recover(); r != nil {
		c.abort = true
		c.closeNow(c.recovered(callback, r))
	}
}

// callOpen runs OnOpen under recover.
func (c *Conn) callOpen() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.recovered("OnOpen", r)
		}
	}()
	c.h.OnOpen(c)
	return nil
}

// callData runs OnData under recover; a panic closes the connection.
func (c *Conn) callData(data []byte) {
	defer c.failOnPanic("OnData")
	c.h.OnData(c, data)
}

// callRead runs OnRead under recover and checks its count; ok is false
// when the connection failed instead (a panic leaves the zero results).
func (c *Conn) callRead(data []byte) (n int, ok bool) {
	defer c.failOnPanic("OnRead")
	n = c.h.(ReadHandler).OnRead(c, data)
	if n < 0 || n > len(data) {
		c.abort = true
		c.closeNow(c.opError("read", "", fmt.Errorf("conn: OnRead consumed %d of %d bytes", n, len(data))))
		return 0, false
	}
	return n, true
}

// callWritability runs OnWritabilityChanged under recover.
func (c *Conn) callWritability(writable bool) {
	defer c.failOnPanic("OnWritabilityChanged")
	c.h.(WritabilityHandler).OnWritabilityChanged(c, writable)
}

// callHalfClose runs OnHalfClose, if the handler has it, under recover.
func (c *Conn) callHalfClose() {
	if !c.hasHH {
		return
	}
	defer c.failOnPanic("OnHalfClose")
	c.h.(HalfCloseHandler).OnHalfClose(c)
}

// callClose runs OnClose under recover: the connection is gone already,
// so a panic is only logged and counted.
func (c *Conn) callClose() {
	defer func() {
		if r := recover(); r != nil {
			c.recovered("OnClose", r)
		}
	}()
	c.h.OnClose(c, c.closeCause())
}

// LocalAddr returns the local address (*net.TCPAddr or *net.UnixAddr).
// Safe for concurrent use.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address (*net.TCPAddr or *net.UnixAddr).
// Safe for concurrent use.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// Loop returns the loop the connection lives on; every Handler callback
// runs there. Safe for concurrent use.
func (c *Conn) Loop() *loop.Loop { return c.l }

// Context returns the value last stored by SetContext, or nil. Safe for
// concurrent use.
func (c *Conn) Context() any {
	if e := c.ext.Load(); e != nil {
		if b := e.ctx.Load(); b != nil {
			return b.v
		}
	}
	return nil
}

// SetContext stores v in the connection's user slot (for example per
// connection protocol state). Safe for concurrent use.
func (c *Conn) SetContext(v any) { c.extX().ctx.Store(&ctxBox{v}) }

// CloseFuture returns a future that completes once the connection is
// closed and OnClose has run (Netty's closeFuture): its error is the cause
// OnClose reported (nil after a local Close, io.EOF after the peer's FIN,
// …). Listeners registered with OnDone run on the connection's loop, or at
// once on the caller's goroutine if the connection is closed already. Safe
// for concurrent use.
func (c *Conn) CloseFuture() *sched.Future[struct{}] {
	e := c.extX()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.closeF == nil {
		e.closeF = sched.NewFuture[struct{}]()
		if c.closedDone {
			e.closeF.Complete(struct{}{}, c.closeCause())
		}
	}
	return e.closeF
}

// Writable reports whether the outbound buffer is below the high-water
// mark: false once more than the high mark is queued, until it drains to
// the low mark. Safe for concurrent use.
func (c *Conn) Writable() bool { return c.wgen.Load()&1 == 0 }

// Buffered returns the outbound bytes queued and not yet sent. Safe for
// concurrent use.
func (c *Conn) Buffered() int {
	c.mu.Lock()
	n := c.out.n
	c.mu.Unlock()
	return n
}

// set runs a setter's f on c's loop as Conn's comment describes, where the
// fd cannot be closed (and its number reused) underneath it, unless the
// connection is closed for the user. f's error is a setsockopt's. A loop
// that refuses the task gives its full queue's error, else net.ErrClosed.
func (c *Conn) set(f func() error) error {
	g := func() error {
		if c.state >= stateClosing || c.lingering {
			return c.opError("set", "", net.ErrClosed)
		}
		if err := f(); err != nil {
			return c.opError("set", "setsockopt", err)
		}
		return nil
	}
	if c.l.InLoop() {
		return g()
	}
	var res chan error
	task := func() { _ = g() }
	if loop.Current() == nil {
		res = make(chan error, 1)
		task = func() { res <- g() }
	}
	if err := c.l.Execute(task); err != nil {
		if !errors.Is(err, loop.ErrQueueFull) {
			err = net.ErrClosed
		}
		return c.opError("set", "", err)
	}
	if res == nil {
		return nil
	}
	return <-res
}

// SetReadTimeout closes the connection with an error wrapping
// os.ErrDeadlineExceeded if no data arrives for d, counted from this call
// and from each receive; 0 turns it off. The check runs on the loop's timer
// wheel (resolution: the loop's tick). Safe for concurrent use.
func (c *Conn) SetReadTimeout(d time.Duration) error { return c.setTimeout("read timeout", d, true) }

// SetIdleTimeout closes the connection with an error wrapping
// os.ErrDeadlineExceeded if it neither receives nor sends for d, counted
// from this call; 0 turns it off. Safe for concurrent use.
func (c *Conn) SetIdleTimeout(d time.Duration) error { return c.setTimeout("idle timeout", d, false) }

// setTimeout sets the read or the idle timeout on the connection's loop:
// the duration, the activity mark it counts from, and the timer re-armed
// from now when the connection is open.
func (c *Conn) setTimeout(what string, d time.Duration, read bool) error {
	if d < 0 {
		return invalidOption("%s %v (expected >= 0)", what, d)
	}
	return c.set(func() error {
		if c.rare == nil {
			if d == 0 {
				return nil // off, as it was
			}
			c.rare = &connRare{}
		}
		tm := c.rare
		if read {
			tm.read, tm.lastRead = d, now()
			stopTimer(&tm.readTimer)
		} else {
			tm.idle, tm.lastIO = d, now()
			stopTimer(&tm.idleTimer)
		}
		if c.state == stateOpen {
			c.armTimeouts()
		}
		return nil
	})
}

func stopTimer(t **sched.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// stopTimeouts stops the read and idle timers.
func (c *Conn) stopTimeouts() {
	if c.rare != nil {
		stopTimer(&c.rare.readTimer)
		stopTimer(&c.rare.idleTimer)
	}
}

// armTimeouts starts the timers of the timeouts that are set and not armed.
func (c *Conn) armTimeouts() {
	tm := c.rare
	if tm == nil {
		return
	}
	if tm.read > 0 && tm.readTimer == nil {
		tm.readTimer, _ = c.l.Schedule(tm.read, c.onReadTimer)
	}
	if tm.idle > 0 && tm.idleTimer == nil {
		tm.idleTimer, _ = c.l.Schedule(tm.idle, c.onIdleTimer)
	}
}

// onReadTimer checks the read timeout: a receive since the timer was armed
// re-arms it for the time left, so receiving costs a clock read only.
func (c *Conn) onReadTimer() {
	tm := c.rare
	tm.readTimer = nil
	if c.state != stateOpen || tm.read <= 0 || c.eof || c.lingering {
		return
	}
	if c.pause != 0 {
		tm.lastRead = now() // no read is expected while paused
	}
	if left := tm.read - time.Duration(now()-tm.lastRead); left > 0 {
		tm.readTimer, _ = c.l.Schedule(left, c.onReadTimer)
		return
	}
	c.closeNow(c.opError("read", "", errDeadline))
}

func (c *Conn) onIdleTimer() {
	tm := c.rare
	tm.idleTimer = nil
	if c.state != stateOpen || tm.idle <= 0 || c.lingering {
		return
	}
	if left := tm.idle - time.Duration(now()-tm.lastIO); left > 0 {
		tm.idleTimer, _ = c.l.Schedule(left, c.onIdleTimer)
		return
	}
	c.closeNow(c.opError("read", "", errDeadline))
}

// SetNoDelay sets TCP_NODELAY (a no-op for Unix sockets). Safe for
// concurrent use.
func (c *Conn) SetNoDelay(on bool) error {
	return c.set(func() error { return setNoDelay(int(c.fd), c.netw(), on) })
}

// SetKeepAlive enables keepalive probes with d as idle time and interval
// (whole seconds, rounded up), or disables them for d <= 0. A no-op for Unix
// sockets. Safe for concurrent use.
func (c *Conn) SetKeepAlive(d time.Duration) error {
	if d > MaxKeepAlive {
		return invalidOption("keepalive %v (expected at most %v, the kernel's limit)", d, MaxKeepAlive)
	}
	return c.set(func() error { return setKeepAlive(int(c.fd), c.netw(), d) })
}

// SetReadBuffer sets SO_RCVBUF. Safe for concurrent use.
func (c *Conn) SetReadBuffer(n int) error {
	if n < 0 {
		return invalidOption("read buffer %d (expected >= 0)", n)
	}
	return c.set(func() error { return setBuffer(int(c.fd), false, n) })
}

// SetWriteBuffer sets SO_SNDBUF. Safe for concurrent use.
func (c *Conn) SetWriteBuffer(n int) error {
	if n < 0 {
		return invalidOption("write buffer %d (expected >= 0)", n)
	}
	return c.set(func() error { return setBuffer(int(c.fd), true, n) })
}
