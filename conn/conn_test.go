package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
)

// TestEcho: a round trip through an echo server, over TCP v4, v6 and a Unix
// socket, with a net.Conn client and with a conn.Dial client; the server's
// callbacks run on the conn's loop, OnClose once with io.EOF after the
// client closes.
func TestEcho(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		for _, tc := range []struct{ network, addr string }{
			{"tcp", "127.0.0.1:0"},
			{"tcp4", "127.0.0.1:0"},
			{"tcp6", "[::1]:0"},
			{"unix", ""},
		} {
			t.Run("net="+tc.network, func(t *testing.T) {
				addr := tc.addr
				if tc.network == "unix" {
					addr = t.TempDir() + "/echo.sock"
				}
				if tc.network == "tcp6" {
					ln, err := net.Listen("tcp6", "[::1]:0")
					if err != nil {
						t.Skipf("no IPv6 loopback: %v", err)
					}
					ln.Close()
				}
				g := ctGroup(t, b, 2)
				h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
				s := ctListen(t, tc.network, addr, g, h)

				// A net.Conn client.
				nc, err := net.Dial(s.Addr().Network(), s.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				msg := bytes.Repeat([]byte("ringloop "), 1000)
				if _, err := nc.Write(msg); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(nc, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, msg) {
					t.Fatal("echo mismatch")
				}
				_, se := h.accepted(t)
				nc.Close()
				if err := se.wait(t); err != io.EOF {
					t.Fatalf("server OnClose(%v), want io.EOF", err)
				}

				// A conn.Dial client.
				ce := ctNewEvents(t)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c, err := conn.Dial(ctx, g, s.Addr().Network(), s.Addr().String(), ce)
				if err != nil {
					t.Fatal(err)
				}
				if c.RemoteAddr().String() != s.Addr().String() && tc.network != "unix" {
					t.Errorf("RemoteAddr %v, want %v", c.RemoteAddr(), s.Addr())
				}
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				ctWaitFor(t, 10*time.Second, "echo", func() bool { return len(ce.received()) >= len(msg) })
				if !bytes.Equal(ce.received(), msg) {
					t.Fatal("dial echo mismatch")
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				if err := ce.wait(t); err != nil {
					t.Fatalf("client OnClose(%v), want nil", err)
				}
				if _, err := c.Write(msg); !errorsIsClosed(err) {
					t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
				}
			})
		}
	})
}

// TestHalfClose: the client sends, then CloseWrite; the server sees EOF
// only after echoing everything, and the client reads every byte before
// its own OnClose(io.EOF).
func TestHalfClose(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		s := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		ce := ctNewEvents(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := conn.Dial(ctx, g, "tcp", s.Addr().String(), ce)
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(msg); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("Write after CloseWrite: %v, want EPIPE", err)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatalf("second CloseWrite: %v", err)
		}
		if err := ce.wait(t); err != io.EOF {
			t.Fatalf("client OnClose(%v), want io.EOF", err)
		}
		if got := ce.received(); !bytes.Equal(got, msg) {
			t.Fatalf("client read %d bytes, want %d (equal: false)", len(got), len(msg))
		}
		_, se := h.accepted(t)
		if err := se.wait(t); err != io.EOF {
			t.Fatalf("server OnClose(%v), want io.EOF", err)
		}
	})
}

// TestWriteOrderAcrossGoroutines: Writes from many goroutines arrive with
// each goroutine's records in order and every record intact.
func TestWriteOrderAcrossGoroutines(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		ce := ctNewEvents(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ce)
		if err != nil {
			t.Fatal(err)
		}
		peer, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		const writers, records = 8, 2000
		read := make(chan []byte, 1)
		go func() {
			all, _ := io.ReadAll(peer)
			read <- all
		}()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range records {
					rec := fmt.Sprintf("%02d:%06d|", w, i) // 10 bytes
					if i%3 == 0 {
						c.Writev([][]byte{[]byte(rec[:4]), []byte(rec[4:])})
					} else if _, err := c.Write([]byte(rec)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		c.CloseWrite()
		var all []byte
		select {
		case all = <-read:
		case <-time.After(20 * time.Second):
			t.Fatal("peer did not read EOF")
		}
		if len(all) != writers*records*10 {
			t.Fatalf("got %d bytes, want %d", len(all), writers*records*10)
		}
		next := make([]int, writers)
		for off := 0; off < len(all); off += 10 {
			var w, i int
			if _, err := fmt.Sscanf(string(all[off:off+10]), "%02d:%06d|", &w, &i); err != nil {
				t.Fatalf("record %q at %d: %v", all[off:off+10], off, err)
			}
			if i != next[w] {
				t.Fatalf("writer %d: record %d, want %d", w, i, next[w])
			}
			next[w]++
		}
		c.Close()
		ce.wait(t)
	})
}

// TestWritability: with water marks 4 KiB / 16 KiB, queuing 1 MiB to a
// peer that does not read makes the conn unwritable (Writable false,
// OnWritabilityChanged(false)); once the peer reads everything, it turns
// writable again (OnWritabilityChanged(true)) and every byte arrived.
func TestWritability(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		ce := ctNewEvents(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ce, conn.WithWaterMarks(4<<10, 16<<10), conn.WithWriteBuffer(16<<10))
		if err != nil {
			t.Fatal(err)
		}
		peer, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		peer.(*net.TCPConn).SetReadBuffer(16 << 10)
		if !c.Writable() {
			t.Fatal("new conn not writable")
		}
		const total = 1 << 20
		chunk := make([]byte, 32<<10)
		for range total / len(chunk) {
			c.Write(chunk)
		}
		if c.Writable() {
			t.Fatal("Writable true with 1 MiB queued above a 16 KiB high mark")
		}
		ctWaitFor(t, 10*time.Second, "OnWritabilityChanged(false)", func() bool {
			ce.mu.Lock()
			defer ce.mu.Unlock()
			return len(ce.writable) >= 1
		})
		if n := c.Buffered(); n <= 16<<10 {
			t.Fatalf("Buffered %d with a non-reading peer", n)
		}
		n, err := io.CopyN(io.Discard, peer, total)
		if err != nil || n != total {
			t.Fatalf("peer read %d: %v", n, err)
		}
		ctWaitFor(t, 10*time.Second, "the queue to drain", func() bool { return c.Buffered() == 0 })
		ctWaitFor(t, 10*time.Second, "writable again", func() bool {
			ce.mu.Lock()
			defer ce.mu.Unlock()
			return len(ce.writable) >= 2 && ce.writable[len(ce.writable)-1]
		})
		ce.mu.Lock()
		got := append([]bool(nil), ce.writable...)
		ce.mu.Unlock()
		// The loop sends while the test writes, so the state may toggle
		// more than once; the reports must alternate, starting unwritable
		// and ending writable.
		for i, w := range got {
			if w != (i%2 == 1) {
				t.Fatalf("writability changes %v: not alternating from false", got)
			}
		}
		if !c.Writable() {
			t.Fatal("not writable after the drain")
		}
		c.Close()
		ce.wait(t)
	})
}

// TestTimeouts: a read timeout closes a silent conn, an idle timeout one
// that neither reads nor writes, both with os.ErrDeadlineExceeded; traffic
// keeps an idle timeout from firing.
func TestTimeouts(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		// On the loop's clock, which the test moves: each timeout fires
		// in the timer tick (1ms) it is due, not a tick before.
		clk := sched.NewManualClock(int64(time.Hour))
		g := ctGroup(t, b, 1, testknobs.Clock(clk).(loop.Option))
		lp := g.Loops()[0]
		notClosed := func(t *testing.T, e *ctEvents, when string) {
			t.Helper()
			ctTurnPasses(t, lp)
			select {
			case <-e.closed:
				t.Fatalf("closed %s: OnClose(%v)", when, e.closeErr)
			default:
			}
		}
		t.Run("read", func(t *testing.T) {
			const timeout = 100 * time.Millisecond
			h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
			s := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithReadTimeout(timeout))
			nc, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_, se := h.accepted(t)
			notClosed(t, se, "at once")
			clk.Advance(timeout - time.Millisecond)
			notClosed(t, se, "before the read timeout")
			// Data starts the timeout afresh.
			if _, err := nc.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(nc, make([]byte, 4)); err != nil {
				t.Fatalf("echo: %v", err)
			}
			clk.Advance(timeout - time.Millisecond)
			notClosed(t, se, "a read timeout after data came")
			clk.Advance(time.Millisecond)
			lp.Execute(func() {})
			if err := se.wait(t); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("OnClose(%v), want os.ErrDeadlineExceeded", err)
			}
			if _, err := nc.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("client read %v, want EOF", err)
			}
		})
		t.Run("idle", func(t *testing.T) {
			const timeout = 150 * time.Millisecond
			h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
			s := ctListen(t, "tcp", "127.0.0.1:0", g, h)
			ce := ctNewEvents(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := conn.Dial(ctx, g, "tcp", s.Addr().String(), ce)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.SetIdleTimeout(timeout); err != nil {
				t.Fatal(err)
			}
			// Traffic every 100ms of the loop's clock, for 600ms: the
			// timeout never fires.
			for n := 4; n <= 24; n += 4 {
				clk.Advance(100 * time.Millisecond)
				c.Write([]byte("ping"))
				ctWaitFor(t, 10*time.Second, "the echo", func() bool { return len(ce.received()) >= n })
				notClosed(t, ce, "during traffic")
			}
			clk.Advance(timeout - time.Millisecond)
			notClosed(t, ce, "before the idle timeout")
			clk.Advance(time.Millisecond)
			lp.Execute(func() {})
			if err := ce.wait(t); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("OnClose(%v), want os.ErrDeadlineExceeded", err)
			}
			if err := c.SetIdleTimeout(time.Second); !errorsIsClosed(err) {
				t.Fatalf("SetIdleTimeout after close: %v", err)
			}
		})
	})
}

// TestEchoAllocs: a warm echo round trip (64 bytes, blocking net.Conn
// client, server echoing with c.Write in OnData) allocates nothing on the
// uring backend, counting every goroutine of the process.
func TestEchoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 60*time.Second)
	g := ctGroup(t, loop.BackendUring, 1)
	s := ctListen(t, "tcp", "127.0.0.1:0", g, echoHandler{})
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg := make([]byte, 64)
	got := make([]byte, 64)
	round := func() {
		if _, err := nc.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(nc, got); err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 {
		round()
	}
	if n := testing.AllocsPerRun(2000, round); n != 0 {
		t.Fatalf("warm echo round trip: %v allocs, want 0", n)
	}
}

type echoHandler struct{ conn.NopHandler }

func (echoHandler) OnData(c *conn.Conn, data []byte) { c.Write(data) }
