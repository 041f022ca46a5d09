package conn

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
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
	// A Conn has three sides, each a type of its own over this struct
	// (a pointer conversion away: Conn.inbound, Conn.outbound,
	// Conn.lifecycle): inbound (inbound.go: receiving, pausing, the bytes
	// kept for the handler), outbound (outbound.go: the queue Write fills,
	// writability, sending) and lifecycle (lifecycle.go: open, close,
	// linger, timeouts, a dial's outcome). The loop-only fields are
	// grouped the same way.

	// Immutable once the connection is on its loop.
	l     *loop.Loop
	h     Handler
	cfg   *config
	srv   *Server // nil for a dialed conn
	laddr net.Addr
	raddr net.Addr
	fd    int32

	flushFn func() // the outbound flush, made once: queuing it allocates nothing

	// Shared with other goroutines. mu guards outQueue, flushQueued and sendBusy,
	// the setting of sharedWritesClosed and sharedCloseReported, and the
	// writes of extras.closeErr.
	mu                 sync.Mutex
	shared             sharedFlags                  // sharedUnix, sharedUserPaused, …
	writabilityChanges atomic.Uint32                // writability transitions so far: even = writable (outbound.notifyWritability)
	userData           atomic.Pointer[connUserData] // SetContext's value and CloseFuture's future; made on first use
	outQueue           chunkQueue                   // outbound bytes, appended by Write, consumed by sends; guarded by mu
	flushQueued        bool                         // a flush tail task is queued on the loop; guarded by mu
	sendBusy           bool                         // the loop has a send in flight; guarded by mu (outbound.sendDirect)
	roomWait           chan struct{}                // closed when the connection turns writable or closes for writes (WriteWait); guarded by mu
	traffic            connTraffic                  // Stats: written by the loop (and a NetConn's direct send), read anywhere
	queuedTotal        atomic.Uint64                // bytes ever queued by Write and Writev (inbound.noteAnswers)

	// Lifecycle, loop goroutine only.
	state         connState
	flags         connFlags   // the loop's yes-or-no facts, of every side (connFlags)
	opsInFlight   int32       // ops started and not yet at their final completion
	registryIndex int32       // 1-based index in its loop's registry; 0: not in it
	extras        *connExtras // timeouts, linger, a dial, the lifecycle op, the close cause; nil until one is needed

	// Inbound, loop goroutine only.
	recvID          loop.OpID  // the armed receive, while flagRecvArmed
	pauseReasons    uint8      // why reading is paused (pausedByUser, pausedUnwritable); 0: reading
	resetSweepsLeft uint8      // reset sweeps left to check c: set by each received byte count (resetsweep_linux.go)
	kept            *keptInput // bytes kept for the handler: made when bytes are first kept
	gain            int64      // the handler's answers per input byte lately, in 1/gainOne (inbound.noteAnswers)

	// Outbound, loop goroutine only.
	sendID              loop.OpID // the send in flight, while flagSendArmed
	sendRanges          int32     // queued ranges in flight (the first ones of outQueue)
	outboundCharged     int       // outQueue.n as counted in the loop's outbound total (outbound.chargeOutbound)
	writabilityReported uint32    // writability transitions reported to the handler
}

// ConnStats counts a connection's traffic since it opened.
type ConnStats struct {
	BytesIn  uint64 // bytes received
	BytesOut uint64 // bytes the kernel took for sending
	Reads    uint64 // receives that brought bytes (one receive completion, or one read on the epoll backend, may hold several of the peer's writes)
	Writes   uint64 // sends the kernel completed (one send may carry several Writes queued together)
}

// connTraffic is a connection's live ConnStats. The loop goroutine is its
// main writer; a NetConn Write that sends from its own goroutine
// (outbound.sendDirect) adds to the out side under Conn.mu while the loop
// has no send in flight. Atomic adds keep the counters readable from any
// goroutine without a lock.
type connTraffic struct {
	bytesIn, bytesOut, reads, writes atomic.Uint64
}

// Stats returns the connection's traffic counters. Safe for concurrent use;
// each counter is exact, the four together are not one instant's.
func (c *Conn) Stats() ConnStats {
	t := &c.traffic
	return ConnStats{BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load(), Reads: t.reads.Load(), Writes: t.writes.Load()}
}

// connState is where a connection is in its life. It only moves forward
// and is read and written on the loop goroutine only.
//
//	stateConnecting ─connect ok─► stateOpen ─Close / EOF flushed / error / timeout─► stateClosing
//	        (Dial)                   ▲                                                   │ in-flight ops
//	stateNew ─registered (accept)────┘                                                   │ reach their
//	                                                                                      ▼ final completion
//	                                                        stateClosed ◄─ close(fd) completes: OnClose
//
// A Close that lingers (flagLingering) keeps the connection in stateOpen
// until its outbound queue drains or the linger time passes.
type connState uint8

const (
	stateNew        connState = iota // accepted, not yet registered on its loop
	stateConnecting                  // Dial's CONNECT in flight
	stateOpen                        // OnOpen ran; receiving and sending
	stateClosing                     // closed for the user; waiting for in-flight ops, then close(fd)
	stateClosed                      // fd closed, OnClose ran (or Dial failed)
)

// connFlags is the set of a connection's yes-or-no facts that only its
// loop goroutine reads and writes.
type connFlags uint32

const (
	// Lifecycle.
	flagTracked            connFlags = 1 << iota // in its loop's registry (registry.go)
	flagCounted                                  // in its server's live count
	flagLingering                                // Close waits for the outbound queue to drain (WithLinger)
	flagResetOnClose                             // close with a reset (SO_LINGER 0): the stream broke
	flagClosedByShutdown                         // closed by its loop's shutdown: OnClose reports net.ErrClosed
	flagShutdownWanted                           // CloseWrite: shutdown(SHUT_WR) once the outbound queue is empty
	flagShutdownStarted                          // that shutdown was submitted
	flagCloseWhenDrained                         // the peer's FIN came: close with io.EOF once the outbound queue is empty
	flagReadHandler                              // h implements ReadHandler
	flagWritabilityHandler                       // h implements WritabilityHandler
	flagHalfCloseHandler                         // h implements HalfCloseHandler

	// Inbound.
	flagRecvArmed      // a receive is armed (recvID)
	flagRecvCanceled   // the receive was canceled by a pause or the reset sweep: its -ECANCELED is no error
	flagRecvSingleShot // receive with single shots: a Unix socket, or a TCP one whose multishot receive the reset sweep found deaf
	flagPeerEOF        // the peer's FIN arrived
	flagEOFHeld        // the FIN came while kept bytes wait for a resume
	flagPausedOnce     // reading paused once: receives ask for a limit (LimitRecv)
	flagResumeQueued   // the resume task is queued
	flagGainShown      // a callback given probeLen bytes or more showed the handler's own ratio (answerRoom)

	// Outbound.
	flagSendArmed // a send is in flight (sendID)
)

// has reports whether any of bits is set.
func (f connFlags) has(bits connFlags) bool { return f&bits != 0 }

// set sets bits.
func (f *connFlags) set(bits connFlags) { *f |= bits }

// clear clears bits.
func (f *connFlags) clear(bits connFlags) { *f &^= bits }

// sharedFlags is the set of a connection's yes-or-no facts that goroutines
// other than its loop read or set. Safe for concurrent use.
type sharedFlags struct{ bits atomic.Uint32 }

// Bits of sharedFlags.
const (
	sharedUnix           uint32 = 1 << iota // a Unix socket ("unix"), not TCP ("tcp"); set before the connection is shared
	sharedUserPaused                        // PauseRead is in effect (ReadPaused)
	sharedClaimed                           // an accepted fd's owner is settled (register, or a refused hand-off)
	sharedCloseRequested                    // Close was called, or the connection closed
	sharedWritesClosed                      // no more writes: closed or CloseWrite; set under Conn.mu, read under it
	sharedCloseReported                     // OnClose ran; set under Conn.mu, read under it
	sharedWriteShut                         // CloseWrite was called; set under Conn.mu with sharedWritesClosed
	sharedCloseCalled                       // Close was called (not set when the connection closed on its own)
	sharedBudgetPaused                      // reading is paused for the loop's budget of kept bytes (pausedByBudget); set and cleared on the loop
)

// has reports whether bit is set.
func (f *sharedFlags) has(bit uint32) bool { return f.bits.Load()&bit != 0 }

// set sets bit and reports whether it was set already.
func (f *sharedFlags) set(bit uint32) bool { return f.bits.Or(bit)&bit != 0 }

// clear clears bit.
func (f *sharedFlags) clear(bit uint32) { f.bits.And(^bit) }

// connExtras holds what only some connections need: the read and idle
// timeouts (one timer each, re-armed for the time left instead of being
// reset on every receive), the linger timer, a dial's state and the
// lifecycle op (every connection makes one as it closes). Loop goroutine
// only (a dial sets it before its conn reaches the loop), but for closeErr.
type connExtras struct {
	readTimeout, idleTimeout time.Duration
	lastRead, lastIO         time.Duration // loop clock readings (Loop.Now) of the last received data, and of the last receive or send (while lingering: of the last send)
	readTimer, idleTimer     *sched.Timer
	lingerTimer              *sched.Timer
	terminationHold          func()      // releases the loop's DelayTermination while lingering as it shuts down
	dial                     *dialState  // non-nil while Dial waits
	op                       lifecycleOp // the connect, shutdown or close in flight
	closeErr                 error       // the cause OnClose reports; written on the loop under Conn.mu, read elsewhere under it once sharedCloseReported
}

// connUserData holds what a connection makes only once its user asks:
// SetContext's value and CloseFuture's future.
type connUserData struct {
	context     atomic.Pointer[contextValue]
	closeFuture *sched.Future[struct{}] // guarded by Conn.mu
}

// contextValue holds SetContext's value (atomic.Pointer needs one type).
type contextValue struct{ v any }

// ensureUserData returns c's connUserData, making it on first use. Safe
// for concurrent use.
func (c *Conn) ensureUserData() *connUserData {
	if d := c.userData.Load(); d != nil {
		return d
	}
	d := new(connUserData)
	if c.userData.CompareAndSwap(nil, d) {
		return d
	}
	return c.userData.Load()
}

// inbound returns c seen from its receive side.
func (c *Conn) inbound() *inbound { return (*inbound)(c) }

// outbound returns c seen from its send side.
func (c *Conn) outbound() *outbound { return (*outbound)(c) }

// lifecycle returns c seen from its life's course.
func (c *Conn) lifecycle() *lifecycle { return (*lifecycle)(c) }

func newConn(l *loop.Loop, fd int, network string, h Handler, cfg *config, srv *Server) *Conn {
	c := &Conn{l: l, cfg: cfg, srv: srv, fd: int32(fd)}
	c.flushFn = c.outbound().flush
	if network == "unix" {
		c.shared.set(sharedUnix)
		// A multishot receive over AF_UNIX can miss the peer's
		// shutdown (loop.IO.RecvProvidedOnce).
		c.flags.set(flagRecvSingleShot)
	}
	if h != nil {
		c.lifecycle().setHandler(h)
	}
	if cfg.readTimeout > 0 || cfg.idleTimeout > 0 {
		c.extras = &connExtras{readTimeout: cfg.readTimeout, idleTimeout: cfg.idleTimeout}
	}
	return c
}

// network returns the connection's network: "tcp" or "unix".
func (c *Conn) network() string {
	if c.shared.has(sharedUnix) {
		return "unix"
	}
	return "tcp"
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
	if d := c.userData.Load(); d != nil {
		if v := d.context.Load(); v != nil {
			return v.v
		}
	}
	return nil
}

// SetContext stores v in the connection's user slot (for example per
// connection protocol state). Safe for concurrent use.
func (c *Conn) SetContext(v any) { c.ensureUserData().context.Store(&contextValue{v}) }

// CloseFuture returns a future that completes once the connection is
// closed and OnClose has run (Netty's closeFuture): its error is the cause
// OnClose reported (nil after a local Close, io.EOF after the peer's FIN,
// …). Listeners registered with OnDone run on the connection's loop, or at
// once on the caller's goroutine if the connection is closed already. The
// loop completes it, so its Wait called on that loop before the close
// returns an error wrapping loop.ErrInLoop at once (loop.NewFuture). Safe
// for concurrent use.
func (c *Conn) CloseFuture() *sched.Future[struct{}] {
	d := c.ensureUserData()
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.closeFuture == nil {
		d.closeFuture = loop.NewFuture[struct{}](c.l)
		if c.shared.has(sharedCloseReported) {
			d.closeFuture.Complete(struct{}{}, c.lifecycle().closeCause())
		}
	}
	return d.closeFuture
}

// set runs a setter's f on c's loop as Conn's comment describes (onLoop,
// not waiting on another loop). f's error is a setsockopt's.
func (c *Conn) set(f func() error) error {
	return c.onLoop("set", false, func() error {
		if err := f(); err != nil {
			return c.opError("set", "setsockopt", err)
		}
		return nil
	})
}

// onLoop runs f on c's loop, where the fd cannot be closed (and its number
// reused) underneath it, unless the connection is closed for the user:
// then f does not run, and the error wraps net.ErrClosed. On c's loop f
// runs at once; from a goroutine that is no loop, as a task whose result
// onLoop waits for; from another loop's goroutine, as a task onLoop does
// not wait for, returning nil (an error of f is lost), or, with mustWait,
// not at all: the error wraps loop.ErrInLoop, since two loops waiting on
// each other would both stop for good. A loop that refuses the task gives
// its full queue's error, else net.ErrClosed. Errors are *net.OpErrors of
// op, but f's own, returned as they are.
func (c *Conn) onLoop(op string, mustWait bool, f func() error) error {
	g := func() error {
		if c.state >= stateClosing || c.flags.has(flagLingering) {
			return c.opError(op, "", net.ErrClosed)
		}
		return f()
	}
	if c.l.InLoop() {
		return g()
	}
	var res chan error
	task := func() { _ = g() }
	switch {
	case loop.Current() == nil:
		res = make(chan error, 1)
		task = func() { res <- g() }
	case mustWait:
		return c.opError(op, "", loop.ErrInLoop)
	}
	if err := c.l.Execute(task); err != nil {
		if !errors.Is(err, loop.ErrQueueFull) {
			err = net.ErrClosed
		}
		return c.opError(op, "", err)
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
		if c.extras == nil {
			if d == 0 {
				return nil // off, as it was
			}
			c.extras = &connExtras{}
		}
		x := c.extras
		if read {
			x.readTimeout, x.lastRead = d, c.l.Now()
			stopTimer(&x.readTimer)
		} else {
			x.idleTimeout, x.lastIO = d, c.l.Now()
			stopTimer(&x.idleTimer)
		}
		if c.state == stateOpen {
			c.lifecycle().armTimeouts()
		}
		return nil
	})
}

// SetNoDelay sets TCP_NODELAY (a no-op for Unix sockets). Safe for
// concurrent use.
func (c *Conn) SetNoDelay(on bool) error {
	return c.set(func() error { return setNoDelay(int(c.fd), c.network(), on) })
}

// SetKeepAlive enables keepalive probes with d as idle time and interval
// (whole seconds, rounded up) and DefaultKeepAliveCount probes, or
// disables them for d <= 0 (WithKeepAlive sets the keepalive a connection
// starts with: DefaultKeepAlive unless told otherwise). A no-op for Unix
// sockets. Safe for concurrent use.
func (c *Conn) SetKeepAlive(d time.Duration) error {
	if d > MaxKeepAlive {
		return invalidOption("keepalive %v (expected at most %v, the kernel's limit)", d, MaxKeepAlive)
	}
	return c.set(func() error { return setKeepAlive(int(c.fd), c.network(), d) })
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
