package conn_test

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// accRecorder records a server's connections and their OnClose calls.
type accRecorder struct {
	conn.NopHandler
	echo   bool
	opened chan *conn.Conn
	closed chan error
	closes atomic.Int64
	data   atomic.Int64 // bytes received
}

func newAccRecorder(echo bool) *accRecorder {
	return &accRecorder{echo: echo, opened: make(chan *conn.Conn, 16), closed: make(chan error, 16)}
}

func (r *accRecorder) OnOpen(c *conn.Conn) { r.opened <- c }
func (r *accRecorder) OnData(c *conn.Conn, data []byte) {
	r.data.Add(int64(len(data)))
	if r.echo {
		c.Write(data)
	}
}
func (r *accRecorder) OnClose(c *conn.Conn, err error) {
	r.closes.Add(1)
	r.closed <- err
}

func (r *accRecorder) accept(tb testing.TB) *conn.Conn {
	tb.Helper()
	select {
	case c := <-r.opened:
		return c
	case <-time.After(10 * time.Second):
		tb.Fatal("no connection opened within 10s")
		return nil
	}
}

func (r *accRecorder) closeErr(tb testing.TB) error {
	tb.Helper()
	select {
	case err := <-r.closed:
		return err
	case <-time.After(10 * time.Second):
		tb.Fatal("OnClose not called within 10s")
		return nil
	}
}

// TestAcceptancePeerReset: a client that resets the connection (SO_LINGER 0,
// close) in the middle of an echo stream makes the server's OnClose report
// an error for which errors.Is(err, syscall.ECONNRESET) holds.
func TestAcceptancePeerReset(t *testing.T) {
	accForEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.Watchdog(t, time.Minute)
		g := accGroup(t, b)
		rec := newAccRecorder(true)
		srv := accListen(t, g, rec)

		c, err := net.DialTimeout("tcp", srv.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc := c.(*net.TCPConn)
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		rec.accept(t)
		msg := make([]byte, 1<<20)
		go tc.Write(msg) // the reset below cuts this write short
		if _, err := io.ReadFull(tc, make([]byte, 64<<10)); err != nil {
			t.Fatalf("reading the first echo: %v", err)
		}
		tc.SetLinger(0)
		tc.Close()

		err = rec.closeErr(t)
		t.Logf("OnClose(%v)", err)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("OnClose err = %v, want one matching syscall.ECONNRESET", err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) {
			t.Errorf("OnClose err is %T, want a *net.OpError", err)
		}
		// OnClose runs after the connection's last op ended: only a task
		// already queued could call it again.
		for _, l := range g.Loops() {
			ctTurnPasses(t, l)
		}
		if n := rec.closes.Load(); n != 1 {
			t.Errorf("OnClose called %d times, want 1", n)
		}
	})
}

// TestAcceptanceCloseInFlight closes a connection while a send (the client does
// not read and a large write is queued) and a receive are in flight, from
// another goroutine or from the loop: OnClose runs exactly once with a nil
// error, the process's fd count returns to its baseline, later writes fail
// with net.ErrClosed, and no completion names a freed op slot.
func TestAcceptanceCloseInFlight(t *testing.T) {
	accForEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.Watchdog(t, 2*time.Minute)
		g := accGroup(t, b, loop.WithLoops(2))
		rec := newAccRecorder(false)
		// Linger 0: Close cancels the stalled send at once instead of
		// waiting for the peer (which never reads) for the linger time.
		srv := accListen(t, g, rec, conn.WithLinger(0))
		big := make([]byte, 4<<20)

		// Warm up: the first net.Dial opens the Go runtime's own poller fds,
		// which must not count against the baseline.
		c0, err := net.DialTimeout("tcp", srv.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rec.accept(t)
		c0.Close()
		if err := rec.closeErr(t); err != io.EOF {
			t.Errorf("OnClose after the peer's close = %v, want io.EOF", err)
		}
		rec.closes.Store(0)

		for i := range 10 {
			base := testutil.FdCount()
			c, err := net.DialTimeout("tcp", srv.Addr().String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.(*net.TCPConn).SetReadBuffer(4 << 10) // and never read
			sc := rec.accept(t)
			// A byte received proves the receive is armed; the write queues
			// more than the socket buffers hold, so a send stays in flight.
			if _, err := c.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			accWaitFor(t, 5*time.Second, "the server to receive a byte", func() bool { return rec.data.Load() > 0 })
			if _, err := sc.Write(big); err != nil {
				t.Fatalf("server Write: %v", err)
			}
			// Stalled: bytes queued, and the client advertises a zero
			// window.
			accWaitFor(t, 10*time.Second, "a stalled send", func() bool {
				return sc.Buffered() > 0 && ctZeroWindow(t, c)
			})

			if i%2 == 0 {
				err = sc.Close()
			} else { // from the connection's own loop
				errc := make(chan error, 1)
				sc.Loop().Execute(func() { errc <- sc.Close() })
				err = <-errc
			}
			if err != nil {
				t.Fatalf("iteration %d: Close: %v", i, err)
			}
			if cerr := rec.closeErr(t); cerr != nil {
				t.Fatalf("iteration %d: OnClose(%v), want nil after a local Close", i, cerr)
			}
			if _, err := sc.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
				t.Errorf("iteration %d: Write after Close = %v, want net.ErrClosed", i, err)
			}
			c.Close()
			accWaitFor(t, 5*time.Second, "the fd count to return to its baseline", func() bool { return testutil.FdCount() <= base })
			if n := rec.data.Swap(0); n != 1 {
				t.Errorf("iteration %d: server received %d bytes, want 1", i, n)
			}
		}
		for _, l := range g.Loops() {
			ctTurnPasses(t, l)
		}
		if n := rec.closes.Load(); n != 10 {
			t.Errorf("OnClose called %d times for 10 connections", n)
		}
		s := g.Stats().Total
		t.Logf("10 closes with a send and a recv in flight: %d completions, %d stale", s.Completions, s.StaleCompletions)
		if s.StaleCompletions != 0 {
			t.Errorf("%d stale completions (a CQE named a freed slot)", s.StaleCompletions)
		}
	})
}

// TestAcceptanceHalfClose: the client sends 16 MiB without reading, then
// CloseWrite. The server receives everything and the FIN while most of the
// echo is still queued; it keeps writing after the EOF, the client reads
// every byte and then EOF, and only then does the server close, with
// OnClose(io.EOF).
func TestAcceptanceHalfClose(t *testing.T) {
	const n = 16 << 20
	accForEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.Watchdog(t, time.Minute)
		g := accGroup(t, b)
		rec := newAccRecorder(true)
		// The client writes everything before it reads the echo: the
		// server must keep reading while unwritable and queue it all.
		srv := accListen(t, g, rec, conn.WithPauseReadWhenUnwritable(false), conn.WithOutboundLimit(2*n))

		c, err := net.DialTimeout("tcp", srv.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tc := c.(*net.TCPConn)
		tc.SetDeadline(time.Now().Add(30 * time.Second))
		tc.SetReadBuffer(64 << 10) // keep the kernel from absorbing the whole echo
		sc := rec.accept(t)
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(i * 7)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := tc.Write(msg)
			if err == nil {
				err = tc.CloseWrite()
			}
			errc <- err
		}()
		// The echo is not read yet, so once the server holds all n bytes
		// its echo is mostly queued behind the full socket buffers.
		accWaitFor(t, 10*time.Second, "the server to receive every byte", func() bool { return rec.data.Load() == n })
		if err := <-errc; err != nil {
			t.Fatalf("client write/CloseWrite: %v", err)
		}
		// The FIN follows the data: once the server's kernel has it, a
		// turn of the server's loop takes it (end of stream).
		accWaitFor(t, 10*time.Second, "the server to acknowledge the FIN", func() bool { return ctFinAcked(t, tc) })
		ctTurnPasses(t, sc.Loop())
		ctTurnPasses(t, sc.Loop())
		queued := sc.Buffered()
		select {
		case err := <-rec.closed:
			t.Fatalf("server closed (%v) before the client read the echo", err)
		default:
		}
		if queued == 0 {
			t.Fatalf("nothing queued on the server after the client's FIN; the test needs a backlog")
		}

		got, err := io.ReadAll(tc)
		if err != nil {
			t.Fatalf("reading the echo: %v", err)
		}
		t.Logf("after the client's FIN the server still had %d of %d bytes to send; the client read %d then EOF", queued, n, len(got))
		if len(got) != n || string(got) != string(msg) {
			t.Fatalf("read %d bytes (equal: %v), want the %d bytes sent", len(got), string(got) == string(msg), n)
		}
		if err := rec.closeErr(t); err != io.EOF {
			t.Errorf("OnClose(%v), want io.EOF", err)
		}
	})
}
