package conn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// A Server accepts connections on one listening socket (or, in reuse-port
// mode, one per worker loop) and runs each on a worker loop with its
// Handler. Its methods are safe for concurrent use.
type Server struct {
	workers    *loop.Group
	h          Handler             // shared by every connection, or nil
	newHandler func(*Conn) Handler // a handler per connection (ListenFunc), or nil
	cfg        *config
	network    string // "tcp" or "unix"
	addr       net.Addr
	listeners  []*listener

	closeOnce      sync.Once
	shutting       atomic.Bool // Shutdown was called: new conns are closed at once
	live           atomic.Int64
	accepted       atomic.Uint64 // connections the listening sockets accepted
	closed         atomic.Uint64 // connections that went through OnClose
	refused        atomic.Uint64 // accepted connections closed unserved (Shutdown began, or the worker loop refused them)
	outOfResources atomic.Uint64 // accepts that failed for lack of resources (EMFILE, ENFILE, …), each a backoff
	acceptErrors   atomic.Uint64 // other failed accepts
	overloads      atomic.Uint64 // pauses of accepting because every worker loop was overloaded
	openListeners  atomic.Int32  // listeners whose socket is not closed yet (listener.closed)
	mu             sync.Mutex
}

// Backoff bounds for accept errors that mean "out of resources" (EMFILE,
// ENFILE, ENOBUFS, ENOMEM): the listener stops accepting for a while
// instead of spinning on the same error, doubling the pause up to the cap,
// and resets it on the next successful accept (hard-coded, as Go's
// net/http.Server does for temporary accept errors).
const (
	acceptBackoffMin = 10 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Listen opens a listening socket and serves connections on workers with h,
// one Handler shared by every connection. network is "tcp", "tcp4", "tcp6"
// or "unix"; ctx bounds only the resolution of a host name. An empty or
// unspecified host listens on every address ("tcp": dual stack where IPv6
// exists); port 0 picks a free port (Addr tells which). Each accepted
// connection lives on workers.Next(); the acceptor loop is WithAcceptor's,
// else workers.Next(); WithReusePort gives every worker loop a listener of
// its own. A Unix socket's path is removed by Close. Safe for concurrent
// use.
func Listen(ctx context.Context, workers *loop.Group, network, address string, h Handler, opts ...Option) (*Server, error) {
	if h == nil {
		return nil, fmt.Errorf("conn: Listen: nil handler")
	}
	return listen(ctx, workers, network, address, h, nil, opts)
}

// ListenFunc is Listen with a handler per connection (Netty's
// ChannelInitializer): newHandler makes each accepted connection's Handler
// on that connection's loop, before its OnOpen, so per-connection state
// needs no lock. Do not write to c there (OnOpen is the place). A
// newHandler that panics or returns nil (both logged) closes that
// connection with a reset; no Handler method runs for it.
func ListenFunc(ctx context.Context, workers *loop.Group, network, address string, newHandler func(c *Conn) Handler, opts ...Option) (*Server, error) {
	if newHandler == nil {
		return nil, fmt.Errorf("conn: ListenFunc: nil handler factory")
	}
	return listen(ctx, workers, network, address, nil, newHandler, opts)
}

func listen(ctx context.Context, workers *loop.Group, network, address string, h Handler, newH func(*Conn) Handler, opts []Option) (*Server, error) {
	if workers == nil {
		return nil, fmt.Errorf("conn: Listen: nil group")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	alt := "ListenPacket"
	if cfg.netListener != nil {
		alt = "ListenPacketNet"
	}
	if err := datagramNetworkError(network, alt); err != nil {
		return nil, opError("listen", network, "", nil, nil, err)
	}
	if cfg.acceptor != nil && cfg.acceptor.State() >= loop.StateShuttingDown {
		return nil, invalidOption("acceptor loop %v is shutting down", cfg.acceptor)
	}
	s := &Server{workers: workers, h: h, newHandler: newH, cfg: cfg, network: streamNetwork(network)}
	fail := func(err error) (*Server, error) {
		for _, ln := range s.listeners {
			unix.Close(ln.fd)
		}
		return nil, opError("listen", network, "", nil, nil, err)
	}
	t, err := resolve(ctx, network, address, true)
	if err != nil {
		return fail(err)
	}
	if cfg.reusePort && t.family == unix.AF_UNIX {
		return fail(invalidOption("reuse-port needs a TCP network, not %q", network))
	}
	n := 1
	if cfg.reusePort {
		n = workers.Len()
	}
	for i := range n {
		fd, err := listenSocket(t.family, t.sa, t.v6only, cfg.reusePort, cfg.backlog, cfg.keepAlive)
		if err != nil && i == 0 {
			if t4, ok := ipv4Fallback(network, t); ok {
				// No IPv6 on this host: "tcp" on every address falls back to IPv4.
				t = t4
				fd, err = listenSocket(t.family, t.sa, t.v6only, cfg.reusePort, cfg.backlog, cfg.keepAlive)
			}
		}
		if err != nil {
			return fail(err)
		}
		ln := &listener{srv: s, fd: fd, done: make(chan struct{})}
		s.listeners = append(s.listeners, ln)
		if i == 0 {
			bound, err := unix.Getsockname(fd)
			if err != nil {
				return fail(os.NewSyscallError("getsockname", err))
			}
			// The other reuse-port listeners share the bound port.
			s.addr, ln.path, t = boundListener(t, bound)
		}
		switch {
		case cfg.reusePort:
			ln.l = workers.Loop(i)
		case cfg.acceptor != nil:
			ln.l = cfg.acceptor
		default:
			ln.l = workers.Next()
		}
	}
	s.openListeners.Store(int32(len(s.listeners)))
	track(live.servers, s) // before a listener can close: its close untracks
	for i, ln := range s.listeners {
		ln.rearmFn = ln.arm
		if err := ln.l.Execute(ln.open); err != nil {
			for _, ln := range s.listeners[i:] {
				ln.closeFdOnce() // no loop has seen these
			}
			s.listeners = s.listeners[:i]
			s.Close()
			return nil, opError("listen", network, "", nil, s.addr, err)
		}
	}
	return s, nil
}

// Addr returns the address the server listens on, with the real port when
// Listen asked for port 0. Safe for concurrent use.
func (s *Server) Addr() net.Addr { return s.addr }

// Conns returns the number of live connections: registered on their loop
// and not yet through OnClose. Safe for concurrent use.
func (s *Server) Conns() int { return int(s.live.Load()) }

// ServerStats counts a server's connections.
type ServerStats struct {
	Accepted uint64 // connections the listening sockets accepted
	Active   int    // connections open now (Conns)
	Closed   uint64 // connections that went through OnClose
	// Refused counts accepted connections closed without being served:
	// Shutdown had begun, or the worker loop refused the connection
	// (its shutdown began).
	Refused uint64
	// OutOfResources counts accepts that failed for lack of resources
	// (EMFILE, ENFILE, ENOBUFS, ENOMEM). Each pauses accepting for 10 ms
	// to 1 s (doubling while it repeats), while the peers wait in the
	// kernel's accept queue (Backlog).
	OutOfResources uint64
	// AcceptErrors counts the other failed accepts: the peer gave up
	// before the accept (ECONNABORTED), a transient error, or an
	// unexpected one (which pauses accepting as OutOfResources does).
	AcceptErrors uint64
	// Overloads counts the pauses of accepting because every worker
	// loop kept more than four times its budget of kept bytes
	// (loop.WithBufferBudget): pausing reads on the connections that hold
	// bytes without progress did not hold the total, so new connections
	// wait in the kernel's accept queue (10 ms to 1 s, doubling while it
	// lasts) rather than adding to it.
	Overloads uint64
	// Backlog is the number of connections waiting in the kernel's accept
	// queues of the server's TCP sockets, read when Stats is called, and
	// BacklogMax the queues' size (the listen backlog, capped by
	// net.core.somaxconn). A queue that stays full drops new connections
	// in the kernel: the system-wide count is ListenOverflows in
	// /proc/net/netstat. Zero for Unix sockets.
	Backlog, BacklogMax int
}

// Stats returns the server's counters. Safe for concurrent use.
func (s *Server) Stats() ServerStats {
	st := ServerStats{
		Accepted:       s.accepted.Load(),
		Active:         int(s.live.Load()),
		Closed:         s.closed.Load(),
		Refused:        s.refused.Load(),
		OutOfResources: s.outOfResources.Load(),
		AcceptErrors:   s.acceptErrors.Load(),
		Overloads:      s.overloads.Load(),
	}
	if s.network == "tcp" {
		for _, ln := range s.listeners {
			if q, max, ok := ln.backlog(); ok {
				st.Backlog += q
				st.BacklogMax += max
			}
		}
	}
	return st
}

// Close stops accepting and closes the listening sockets (removing a Unix
// socket's path); live connections stay open. It waits for the listeners'
// accept ops to end, unless called on a loop goroutine (of any group),
// where it returns at once and the listeners close right after. The Accept
// of a NetListener over the server (ListenNet) returns net.ErrClosed from
// then on. A second call returns ErrServerClosed. Safe for concurrent use.
func (s *Server) Close() error { return s.close(context.Background()) }

// close is Close bounded by ctx: it stops waiting for the acceptor loops
// when ctx ends (returning ctx.Err()); the listeners still close.
func (s *Server) close(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() { first = true })
	if !first {
		return ErrServerClosed
	}
	s.stoppedAccepting()
	var wait []*listener
	for _, ln := range s.listeners {
		if err := executeRetrying(ln.l, ln.stop); err != nil {
			// The loop terminated: its drain ended the accept; the
			// listener's fd is closed by its last completion, or here if
			// it never started.
			ln.closeFdOnce()
			continue
		}
		if loop.Current() == nil {
			// Waited for off the loops only: a loop waiting for
			// another's listener would stall its own connections, and
			// two doing so at once would wait for each other.
			wait = append(wait, ln)
		}
	}
	for _, ln := range wait {
		select {
		case <-ln.done:
		case <-ln.l.Done():
			ln.closeFdOnce()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Shutdown closes the server (as Close), then closes every live connection
// (as Conn.Close) and waits until all of them went through OnClose, or
// until ctx ends (returning ctx.Err()). Connections accepted meanwhile are
// closed as they register. Called on a loop goroutine (of any group), it
// starts all of this and returns an error wrapping loop.ErrInLoop instead
// of waiting, which would stall that loop. Safe for concurrent use.
func (s *Server) Shutdown(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background() // as Dial treats a nil ctx
	}
	s.shutting.Store(true)
	err := s.close(ctx)
	if err != nil && !errors.Is(err, ErrServerClosed) {
		return err
	}
	s.closeConns()
	if loop.Current() != nil {
		return fmt.Errorf("conn: Server.Shutdown cannot wait on a loop goroutine: %w", loop.ErrInLoop)
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for s.live.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// stoppedAccepting tells the NetListener over s, if any, that no
// connection comes any more: its Accept returns net.ErrClosed. Called once
// Close began, and once every listening socket closed (the loops' shutdown
// closes them). Safe for concurrent use, on a loop goroutine too.
func (s *Server) stoppedAccepting() {
	if ln := s.cfg.netListener; ln != nil {
		ln.stop()
	}
}

// add registers a new connection. It reports false once Shutdown began.
// On c's loop.
func (s *Server) add(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	c.flags.set(flagCounted)
	s.live.Add(1)
	return true
}

// closeConns closes every open connection of s: each worker loop walks its
// registry (the loop's open connections) for those of s. A loop that
// refuses the task is shutting down and closes them itself.
func (s *Server) closeConns() {
	for i := range s.workers.Len() {
		l := s.workers.Loop(i)
		_ = executeRetrying(l, func() {
			for _, c := range registryFor(l).conns.snapshot() {
				if c.srv == s {
					_ = c.Close()
				}
			}
		})
	}
}

// remove forgets a connection after its OnClose. On c's loop.
func (s *Server) remove(c *Conn) {
	s.mu.Lock()
	if c.flags.has(flagCounted) {
		c.flags.clear(flagCounted)
		s.live.Add(-1)
		s.closed.Add(1)
	}
	s.mu.Unlock()
	s.maybeUntrack()
}

// listener is one listening socket and the accept op on its loop. Fields
// below fdClosed are owned by the loop goroutine.
type listener struct {
	srv      *Server
	l        *loop.Loop
	fd       int
	path     string // Unix socket path to remove on close
	done     chan struct{}
	fdClosed atomic.Bool

	id          loop.OpID
	active      bool
	closing     bool
	backoff     time.Duration
	backOffNext bool // the next arm waits for a backoff timer
	timer       *sched.Timer
	rearmFn     func()
	unhook      func() // removes the shutdown hook that stops ln; nil until set
}

// open hooks the listener to its loop's shutdown, which stops accepting at
// the loop's first shutdown check (Netty's closeAll), not at its end, and
// arms the accept. It runs on the loop, so a shutdown starting meanwhile
// either finds the hook or refuses it, and the fd is closed once either
// way.
func (ln *listener) open() {
	remove, err := ln.l.AddShutdownHook(ln.stop)
	if err != nil {
		ln.stop() // the loop is shutting down
		return
	}
	ln.unhook = remove
	ln.arm()
}

// arm starts the multishot accept, unless every worker loop is
// overloaded: then it tries again after a pause. Must be called on ln's
// loop.
func (ln *listener) arm() {
	ln.timer = nil
	if ln.closing || ln.active {
		return
	}
	if ln.overloaded() {
		ln.srv.overloads.Add(1)
		ln.backOff()
		return
	}
	id, err := ln.l.IO().Accept(ln.fd, true, ln)
	if err != nil {
		if errors.Is(err, loop.ErrTooManyOps) {
			ln.backOff()
			return
		}
		// The loop no longer takes ops: the listener is done.
		ln.closing = true
		ln.closeFdOnce()
		return
	}
	ln.id, ln.active = id, true
}

// Complete handles the accept op's completions: a new fd (handed to a
// worker), or an error. Must be called on ln's loop.
func (ln *listener) Complete(cp *loop.Completion) {
	final := !cp.More()
	if final {
		ln.active = false
	}
	res := cp.Res
	if ln.closing {
		if res >= 0 {
			unix.Close(int(res)) // accepted while closing: nobody will serve it
		}
		if final {
			ln.closeFdOnce()
		}
		return
	}
	if cp.Quarantined {
		// Given up at a ring rebuild (its final word never came): not a
		// shutdown. Accept again after a pause. A connection the
		// kernel accepted for it, if any, is lost with it.
		ln.backOffNext = true
		ln.next()
		return
	}
	if res >= 0 {
		ln.backoff = 0
		ln.srv.accepted.Add(1)
		ln.srv.handoff(ln, int(res))
		if !final && ln.overloaded() {
			// Stop accepting until the workers' totals drain (arm).
			ln.backOffNext = true
			cancelOp(ln.l, ln.id)
		}
	} else {
		switch errnoOf(res) {
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			// Out of resources: stop accepting (so the same error cannot
			// come back at once) and try again after a pause.
			ln.srv.outOfResources.Add(1)
			ln.backOffNext = true
			if !final {
				cancelOp(ln.l, ln.id)
			}
		case unix.ECANCELED:
			if final && !ln.backOffNext {
				// Canceled by the loop's own shutdown: the listener is done.
				ln.closing = true
				ln.closeFdOnce()
				return
			}
		case unix.EINTR, unix.EAGAIN:
			// Nothing accepted, nothing wrong: accept the next one.
		case unix.ECONNABORTED, unix.EPROTO, unix.EPERM:
			// The peer gave up, or a transient condition: accept the next one.
			ln.srv.acceptErrors.Add(1)
		default:
			ln.srv.acceptErrors.Add(1)
			ln.backOffNext = true
		}
	}
	if final {
		ln.next()
	}
}

// overloaded reports whether every loop ln hands connections to keeps
// more than four times its budget of kept bytes (loopConns.checkOverload).
func (ln *listener) overloaded() bool {
	if ln.srv.cfg.reusePort {
		return registryFor(ln.l).overloaded.Load()
	}
	for i := range ln.srv.workers.Len() {
		if !registryFor(ln.srv.workers.Loop(i)).overloaded.Load() {
			return false
		}
	}
	return true
}

// next follows the accept op's final completion: re-arm at once, or after a
// pause if an error asked for one.
func (ln *listener) next() {
	if ln.backOffNext {
		ln.backOffNext = false
		ln.backOff()
		return
	}
	ln.arm()
}

// backOff schedules the next arm after a growing pause.
func (ln *listener) backOff() {
	if ln.timer != nil {
		return
	}
	ln.backoff = min(max(2*ln.backoff, acceptBackoffMin), acceptBackoffMax)
	t, err := ln.l.Schedule(ln.backoff, ln.rearmFn)
	if err != nil {
		ln.closing = true
		if !ln.active {
			ln.closeFdOnce()
		}
		return
	}
	ln.timer = t
}

// stop ends accepting: the accept op is canceled and the fd closed on its
// final completion. Must be called on ln's loop.
func (ln *listener) stop() {
	if ln.closing {
		return
	}
	ln.closing = true
	stopTimer(&ln.timer)
	if ln.active && cancelOp(ln.l, ln.id) {
		return
	}
	ln.closeFdOnce()
}

// closeFdOnce closes the listening fd (once), removes a Unix path and
// signals done. On the loop it closes through a CLOSE op, so the backend
// forgets the fd before its number can be reused (the epoll backend keeps
// per-fd registrations); off the loop (the loop is gone) it closes directly.
func (ln *listener) closeFdOnce() {
	if ln.fdClosed.Swap(true) {
		return
	}
	if ln.l.State() < loop.StateShutdown && ln.l.InLoop() {
		if _, err := ln.l.IO().Close(ln.fd, listenerClose{ln}); err == nil {
			return
		}
	}
	unix.Close(ln.fd)
	ln.closed()
}

func (ln *listener) closed() {
	if ln.path != "" {
		_ = os.Remove(ln.path)
	}
	if ln.unhook != nil {
		ln.unhook()
	}
	close(ln.done)
	if ln.srv.openListeners.Add(-1) == 0 {
		ln.srv.stoppedAccepting()
		ln.srv.maybeUntrack()
	}
}

// listenerClose completes the listener's CLOSE op.
type listenerClose struct{ ln *listener }

func (lc listenerClose) Complete(*loop.Completion) { lc.ln.closed() }

// handoff gives an accepted fd to a worker loop (reuse-port: ln's own
// loop). A worker that refuses the task (shutting down, queue full) makes
// the fd close at once: it is never leaked.
func (s *Server) handoff(ln *listener, fd int) {
	w := ln.l
	if !s.cfg.reusePort {
		// The next worker that is not overloaded, if any.
		w = s.workers.Next()
		for range s.workers.Len() - 1 {
			if !registryFor(w).overloaded.Load() {
				break
			}
			w = s.workers.Next()
		}
	}
	c := newConn(w, fd, s.network, s.h, s.cfg, s)
	if w == ln.l {
		c.lifecycle().register()
		return
	}
	if err := w.Execute(c.lifecycle().register); err != nil && !c.shared.set(sharedClaimed) {
		// Refused, and register did not run meanwhile (a loop whose
		// start failed refuses a task and still runs it as it
		// terminates: whoever claims the fd first closes it).
		s.refused.Add(1)
		unix.Close(fd)
	}
}

// register runs on the connection's loop: the server counts it, then it
// opens. After Shutdown began it is closed at once instead.
func (c *lifecycle) register() {
	if c.shared.set(sharedClaimed) {
		return // the hand-off found the task refused and closed the fd
	}
	if !c.srv.add(c.conn()) {
		c.srv.refused.Add(1)
		unix.Close(int(c.fd))
		c.state = stateClosed
		return
	}
	c.open()
}
