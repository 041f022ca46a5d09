package conn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
)

// TestCloseInFlight: Close while a send (8 MiB to a peer that does not
// read) and a receive are in flight: OnClose runs once, the fd count
// returns to its baseline, the loop saw no stale completion and no op is
// left in flight, and a second Close reports net.ErrClosed. With
// WithLinger(0) the close cancels both at once and OnClose reports nil (the
// drop was asked for); with a short linger the send stays in flight until
// the linger timer cancels it, and OnClose reports the drop as a timeout.
func TestCloseInFlight(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		baseline := testutil.FdCount()
		for round := range 4 {
			ce := ctNewEvents(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			linger := time.Duration(0)
			if round == 3 {
				linger = 50 * time.Millisecond
			}
			c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ce, conn.WithLinger(linger))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c.Write(make([]byte, 8<<20))
			ctWaitFor(t, 5*time.Second, "a send in flight", func() bool {
				n := c.Buffered()
				return n > 0 && n < 8<<20 // the first sends completed, the next one waits
			})
			if round == 1 {
				// Close from the loop itself.
				done := make(chan error, 1)
				c.Loop().Execute(func() { done <- c.Close() })
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); !errorsIsClosed(err) {
				t.Fatalf("second Close: %v, want net.ErrClosed", err)
			}
			err = ce.wait(t)
			if linger == 0 && err != nil {
				t.Fatalf("OnClose(%v), want nil", err)
			}
			if linger > 0 && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("OnClose(%v), want an error wrapping os.ErrDeadlineExceeded (queued bytes dropped)", err)
			}
			peer.Close()
		}
		ctWaitFor(t, 5*time.Second, "fds back to baseline", func() bool { return testutil.FdCount() == baseline })
		// Stats.OpsInFlight is the count as of each loop's last turn.
		ctWaitFor(t, 5*time.Second, "no op in flight", func() bool { return g.Stats().Total.OpsInFlight == 0 })
		if st := g.Stats().Total; st.StaleCompletions != 0 {
			t.Fatalf("%d stale completions", st.StaleCompletions)
		}
	})
}

// TestPeerReset: a peer that resets the connection mid-stream closes it
// with an error for which errors.Is(err, syscall.ECONNRESET) holds, as a
// *net.OpError.
func TestPeerReset(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		s := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		nc, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("r"), 4096)
		nc.Write(msg)
		io.ReadFull(nc, make([]byte, len(msg)))
		_, se := h.accepted(t)
		nc.(*net.TCPConn).SetLinger(0) // close sends RST
		nc.Close()
		err = se.wait(t)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("OnClose(%v), want ECONNRESET", err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("OnClose(%#v), want a *net.OpError for read", err)
		}
	})
}

// TestCloseInCallbacks: Close from OnOpen and from OnData on the loop stops
// receiving at once (no OnData after it) and still delivers what was
// written before it; OnClose(nil) once.
func TestCloseInCallbacks(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, where := range []string{"open", "data"} {
			h := ctNewServerHandler(t, func(e *ctEvents) {
				if where == "open" {
					e.onOpen = func(c *conn.Conn) { c.Close() }
				} else {
					e.onData = func(c *conn.Conn, _ []byte) {
						c.Write([]byte("kept")) // Close still sends what is queued
						c.Close()
					}
				}
			})
			s := ctListen(t, "tcp", "127.0.0.1:0", g, h)
			nc, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			nc.Write([]byte("a"))
			if where == "data" {
				// The queued bytes, then EOF, arrive after Close ran on
				// the loop.
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, err := io.ReadAll(nc)
				if err != nil || string(got) != "kept" {
					t.Fatalf("client read %q, %v; want \"kept\" then EOF", got, err)
				}
				nc.Write([]byte("b"))
			}
			_, se := h.accepted(t)
			if err := se.wait(t); err != nil {
				t.Fatalf("%s: OnClose(%v), want nil", where, err)
			}
			if n := len(se.received()); (where == "open" && n != 0) || (where == "data" && n != 1) {
				t.Fatalf("%s: %d bytes delivered after Close", where, n)
			}
			nc.Close()
		}
	})
}

// TestWriteThenClose: Write 1 MiB, then Close at once (from another
// goroutine and from the loop): the peer, reading at its own pace, gets
// every byte, in order, then EOF; OnClose(nil) runs once the queue drained,
// and Write after Close fails with net.ErrClosed.
func TestWriteThenClose(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		want := make([]byte, 1<<20)
		for i := range want {
			want[i] = byte(i * 7 / 5)
		}
		for _, onLoop := range []bool{false, true} {
			ce := ctNewEvents(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ce, conn.WithWriteBuffer(64<<10))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			if onLoop {
				done := make(chan error, 1)
				c.Loop().Execute(func() {
					c.Write(want)
					done <- c.Close()
				})
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else {
				if n, err := c.Write(want); n != len(want) || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Write([]byte("late")); !errorsIsClosed(err) {
				t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
			}
			// The peer starts reading once c's loop took the Close, with
			// most of the MiB still queued.
			ctTurnPasses(t, c.Loop())
			peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(peer)
			if err != nil {
				t.Fatalf("peer read %d bytes, then %v; want all %d, then EOF", len(got), err, len(want))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("peer read %d bytes, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
			}
			if err := ce.wait(t); err != nil {
				t.Fatalf("OnClose(%v), want nil", err)
			}
			peer.Close()
		}
	})
}

// TestCloseLingerTimeout: Close with bytes queued for a peer that never
// reads closes once the linger time has passed (not before, and not much
// later), with OnClose reporting the drop (an error wrapping
// os.ErrDeadlineExceeded), and the fd gone.
func TestCloseLingerTimeout(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := ctGroup(t, b, 1, testknobs.Clock(clk).(loop.Option))
		ln := testutil.Loopback(t)
		baseline := testutil.FdCount()
		const linger = 200 * time.Millisecond
		ce := ctNewEvents(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Fixed socket buffers (no autotuning): once the peer's is full,
		// the kernel takes no more bytes, so no send makes progress
		// after the clock starts moving.
		c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ce, conn.WithLinger(linger), conn.WithWriteBuffer(64<<10))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		peer, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		peer.(*net.TCPConn).SetReadBuffer(64 << 10)
		c.Write(make([]byte, 16<<20)) // far more than the socket buffers hold
		c.Close()
		ctWaitFor(t, 5*time.Second, "the peer's window closed", func() bool { return ctZeroWindow(t, peer) })
		// On the loop's clock, which the test moves: open a nanosecond
		// before the linger time after the last send completion, closed
		// at it.
		ctTurnPasses(t, c.Loop())
		clk.Advance(linger - 1)
		ctTurnPasses(t, c.Loop())
		select {
		case <-ce.closed:
			t.Fatalf("closed before the linger time %v, OnClose(%v)", linger, ce.closeErr)
		default:
		}
		clk.Advance(1)
		c.Loop().Execute(func() {})
		if err := ce.wait(t); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("OnClose(%v), want an error wrapping os.ErrDeadlineExceeded", err)
		}
		peer.Close()
		ctWaitFor(t, 5*time.Second, "fds back to baseline", func() bool { return testutil.FdCount() == baseline })
		if n := g.Stats().Total.StaleCompletions; n != 0 {
			t.Fatalf("%d stale completions", n)
		}
	})
}

// TestCloseLingerProgress: the linger bounds the time without progress,
// not the whole drain. A peer that keeps reading, a little at a time, gets
// every byte queued before Close and an orderly end, however long past
// the linger time that takes; once it stops reading for the linger time,
// the rest is dropped with a reset and OnClose reports it.
func TestCloseLingerProgress(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := ctGroup(t, b, 1, testknobs.Clock(clk).(loop.Option))
		ln := testutil.Loopback(t)
		const (
			linger = 200 * time.Millisecond
			size   = 4 << 20
			step   = 256 << 10 // read between moves of the clock
		)
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i*13 + i>>12)
		}
		for _, stall := range []bool{false, true} {
			ce := ctNewEvents(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ce, conn.WithLinger(linger),
				conn.WithWriteBuffer(32<<10), conn.WithOutboundLimit(2*size))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			peer.(*net.TCPConn).SetReadBuffer(32 << 10)
			peer.SetReadDeadline(time.Now().Add(20 * time.Second))
			if n, err := c.Write(want); n != size || err != nil {
				t.Fatalf("Write: %d, %v", n, err)
			}
			c.Close()
			ctTurnPasses(t, c.Loop())
			// Ten linger times and more pass on the loop's clock while
			// the peer reads the first half: the connection stays open.
			got := make([]byte, 0, size)
			buf := make([]byte, step)
			for len(got) < size/2 {
				out := c.Stats().BytesOut
				n, err := io.ReadFull(peer, buf)
				got = append(got, buf[:n]...)
				if err != nil {
					t.Fatalf("stall=%v: peer read %d bytes, then %v", stall, len(got), err)
				}
				// The read made room: wait for the send completion that
				// filled it before the clock moves on.
				ctWaitFor(t, 5*time.Second, "a send completion", func() bool { return c.Stats().BytesOut > out })
				ctTurnPasses(t, c.Loop())
				clk.Advance(linger / 2)
				ctTurnPasses(t, c.Loop())
				select {
				case <-ce.closed:
					t.Fatalf("stall=%v: closed after %d bytes read while the peer reads, OnClose(%v)", stall, len(got), ce.closeErr)
				default:
				}
			}
			if !stall {
				rest, err := io.ReadAll(peer)
				got = append(got, rest...)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("peer read %d of %d bytes (first difference at %d), then %v; want all, then EOF",
						len(got), size, firstDiff(got, want), err)
				}
				if err := ce.wait(t); err != nil {
					t.Fatalf("OnClose(%v), want nil", err)
				}
				peer.Close()
				continue
			}
			// The peer stops reading: a linger time after the last send
			// completion the rest is dropped, the peer sees a reset, and
			// OnClose says why. (The kernel may take a last few bytes
			// after the window closed, moving that completion on.)
			ctWaitFor(t, 5*time.Second, "the peer's window closed", func() bool { return ctZeroWindow(t, peer) })
			ctTurnPasses(t, c.Loop())
			for range 10 {
				clk.Advance(linger)
				c.Loop().Execute(func() {})
				if testutil.Eventually(time.Second, func() bool {
					select {
					case <-ce.closed:
						return true
					default:
						return false
					}
				}) {
					break
				}
			}
			if err := ce.wait(t); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("OnClose(%v), want an error wrapping os.ErrDeadlineExceeded", err)
			}
			rest, err := io.ReadAll(peer)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("peer read %d more bytes, then %v; want ECONNRESET", len(rest), err)
			}
			peer.Close()
		}
	})
}

// firstDiff returns the first index where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
