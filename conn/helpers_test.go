package conn_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// Helpers of the conn unit tests. Their names start with "ct" so that
// other test files of the package can define their own without clashing.

// ctLogger is the logger of ctGroup's groups: warnings and errors to
// stderr, unless ctQuietLogs silenced them.
var ctLogger = slog.New(&ctQuietable{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})})

// ctQuiet silences ctLogger (ctQuietLogs).
var ctQuiet atomic.Bool

// ctQuietable is a slog.Handler that drops every record while ctQuiet is
// set.
type ctQuietable struct{ slog.Handler }

func (h *ctQuietable) Enabled(ctx context.Context, l slog.Level) bool {
	return !ctQuiet.Load() && h.Handler.Enabled(ctx, l)
}

func (h *ctQuietable) WithAttrs(as []slog.Attr) slog.Handler {
	return &ctQuietable{h.Handler.WithAttrs(as)}
}

func (h *ctQuietable) WithGroup(name string) slog.Handler {
	return &ctQuietable{h.Handler.WithGroup(name)}
}

// ctBackends runs f once per backend as "backend=uring" and
// "backend=epoll"; uring is skipped where io_uring is refused.
func ctBackends(t *testing.T, f func(t *testing.T, b loop.Backend)) {
	t.Helper()
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		t.Run("backend="+b.String(), func(t *testing.T) {
			if b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			testutil.Watchdog(t, 60*time.Second)
			f(t, b)
		})
	}
}

// ctUDP4 returns a package-net UDP socket bound to 127.0.0.1 (port 0),
// closed when the test ends.
func ctUDP4(tb testing.TB) *net.UDPConn {
	tb.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// ctGroup creates a group of n loops on backend b, shut down when the
// test ends.
func ctGroup(tb testing.TB, b loop.Backend, n int, opts ...loop.Option) *loop.Group {
	tb.Helper()
	g, err := loop.NewGroup(append([]loop.Option{loop.WithBackend(b), loop.WithLoops(n), loop.WithLogger(ctLogger)}, opts...)...)
	if err != nil {
		if b == loop.BackendUring && errors.Is(err, ring.ErrNotSupported) {
			tb.Skipf("io_uring unavailable: %v", err)
		}
		tb.Fatalf("NewGroup: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			tb.Errorf("group Shutdown: %v", err)
		}
	})
	return g
}

// ctListen starts a server, shut down when the test ends.
func ctListen(tb testing.TB, network, addr string, g *loop.Group, h conn.Handler, opts ...conn.Option) *conn.Server {
	tb.Helper()
	s, err := conn.Listen(context.Background(), g, network, addr, h, opts...)
	if err != nil {
		tb.Fatalf("Listen(%s, %s): %v", network, addr, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// ctEvents records a connection's callbacks and checks their contract:
// every callback on the conn's loop, OnOpen first, OnClose exactly once.
type ctEvents struct {
	mu       sync.Mutex
	t        testing.TB
	opened   int
	closes   int
	closeErr error
	data     []byte
	offLoop  int
	writable []bool
	closed   chan struct{}
	echo     bool
	onData   func(c *conn.Conn, data []byte)
	onOpen   func(c *conn.Conn)
}

func ctNewEvents(t testing.TB) *ctEvents { return &ctEvents{t: t, closed: make(chan struct{})} }

func (e *ctEvents) check(c *conn.Conn) {
	if !c.Loop().InLoop() {
		e.offLoop++
	}
}

func (e *ctEvents) OnOpen(c *conn.Conn) {
	e.mu.Lock()
	e.check(c)
	e.opened++
	f := e.onOpen
	e.mu.Unlock()
	if f != nil {
		f(c)
	}
}

func (e *ctEvents) OnData(c *conn.Conn, data []byte) {
	e.mu.Lock()
	e.check(c)
	if e.opened != 1 || e.closes != 0 {
		e.t.Errorf("OnData with opened=%d closes=%d", e.opened, e.closes)
	}
	e.data = append(e.data, data...)
	f, echo := e.onData, e.echo
	e.mu.Unlock()
	if echo {
		c.Write(data)
	}
	if f != nil {
		f(c, data)
	}
}

func (e *ctEvents) OnClose(c *conn.Conn, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.check(c)
	e.closes++
	if e.closes > 1 {
		e.t.Errorf("OnClose called %d times (err %v)", e.closes, err)
		return
	}
	e.closeErr = err
	close(e.closed)
}

func (e *ctEvents) OnWritabilityChanged(c *conn.Conn, w bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.check(c)
	e.writable = append(e.writable, w)
}

// wait waits for OnClose and returns its error.
func (e *ctEvents) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case <-e.closed:
	case <-time.After(10 * time.Second):
		tb.Fatalf("OnClose did not run within 10s")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.offLoop != 0 {
		tb.Errorf("%d callbacks ran off the connection's loop", e.offLoop)
	}
	return e.closeErr
}

func (e *ctEvents) received() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]byte(nil), e.data...)
}

// ctServerHandler creates one ctEvents per accepted connection.
type ctServerHandler struct {
	t     testing.TB
	mu    sync.Mutex
	conns []*ctEvents
	byC   map[*conn.Conn]*ctEvents
	setup func(e *ctEvents)
	opens chan *conn.Conn
}

func ctNewServerHandler(t testing.TB, setup func(e *ctEvents)) *ctServerHandler {
	return &ctServerHandler{t: t, byC: map[*conn.Conn]*ctEvents{}, setup: setup, opens: make(chan *conn.Conn, 1024)}
}

func (h *ctServerHandler) ev(c *conn.Conn) *ctEvents {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byC[c]
	if e == nil {
		e = ctNewEvents(h.t)
		if h.setup != nil {
			h.setup(e)
		}
		h.byC[c] = e
		h.conns = append(h.conns, e)
	}
	return e
}

func (h *ctServerHandler) OnOpen(c *conn.Conn) {
	h.ev(c).OnOpen(c)
	h.opens <- c
}
func (h *ctServerHandler) OnData(c *conn.Conn, d []byte)   { h.ev(c).OnData(c, d) }
func (h *ctServerHandler) OnClose(c *conn.Conn, err error) { h.ev(c).OnClose(c, err) }
func (h *ctServerHandler) OnWritabilityChanged(c *conn.Conn, w bool) {
	h.ev(c).OnWritabilityChanged(c, w)
}

// accepted waits for the next accepted connection and its events.
func (h *ctServerHandler) accepted(tb testing.TB) (*conn.Conn, *ctEvents) {
	tb.Helper()
	select {
	case c := <-h.opens:
		return c, h.ev(c)
	case <-time.After(10 * time.Second):
		tb.Fatalf("no connection accepted within 10s")
		return nil, nil
	}
}

// ctWaitFor polls cond until it holds or d passes.
func ctWaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	testutil.WaitFor(tb, d, what, cond)
}

// ctTurnPasses waits until l has finished a whole turn that began after
// the call (waking it with empty tasks): the completions the kernel had
// posted by then were dispatched, and the tasks queued before it ran.
func ctTurnPasses(tb testing.TB, l *loop.Loop) {
	tb.Helper()
	k := l.Stats().Turns
	ctWaitFor(tb, 10*time.Second, "a turn of "+l.String(), func() bool {
		l.Execute(func() {})
		return l.Stats().Turns >= k+2
	})
}

// ctTCPInfo returns the TCP_INFO of the TCP connection c.
func ctTCPInfo(tb testing.TB, c net.Conn) *unix.TCPInfo {
	tb.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var ti *unix.TCPInfo
	rc.Control(func(fd uintptr) { ti, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if err != nil {
		tb.Fatalf("TCP_INFO: %v", err)
	}
	return ti
}

// ctZeroWindow reports whether the TCP connection c advertises a zero
// receive window: its receive buffer is full, and its peer cannot send.
func ctZeroWindow(tb testing.TB, c net.Conn) bool { return ctTCPInfo(tb, c).Rcv_wnd == 0 }

// ctFinAcked reports whether the peer of the TCP connection c acknowledged
// the FIN c sent (c is in FIN_WAIT2): the FIN is in the peer's socket.
func ctFinAcked(tb testing.TB, c net.Conn) bool {
	return ctTCPInfo(tb, c).State == 5 // TCP_FIN_WAIT2
}

// ctHangingAddr returns the address of a listener whose accept queue is
// full and never drained: it drops further SYNs, so a connect to it stays
// in flight until canceled.
func ctHangingAddr(tb testing.TB) string {
	tb.Helper()
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(lfd) })
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(lfd, 0); err != nil {
		tb.Fatal(err)
	}
	sa, _ := unix.Getsockname(lfd)
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}).String()
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		tb.Cleanup(func() { c.Close() })
	}
	return addr
}

// ctQuietLogs discards the output of ctLogger and of the default logger
// for the rest of the test (handler panics are logged with their stacks by
// design).
func ctQuietLogs(tb testing.TB) {
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	wasQuiet := ctQuiet.Swap(true)
	tb.Cleanup(func() {
		slog.SetDefault(prev)
		ctQuiet.Store(wasQuiet)
	})
}

// ctDialAccepted dials srv with package net (the client is closed at the
// test's end) and returns both ends: the client and the server's
// connection with its events.
func ctDialAccepted(tb testing.TB, srv *conn.Server, h *ctServerHandler) (net.Conn, *conn.Conn, *ctEvents) {
	tb.Helper()
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	sc, ev := h.accepted(tb)
	return c, sc, ev
}
