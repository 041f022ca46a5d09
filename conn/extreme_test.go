package conn_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// bulkThenClose writes n pattern bytes on open, then closes.
// closed is closed once it has.
type bulkThenClose struct {
	conn.NopHandler
	n      int
	closed chan struct{}
}

func (h bulkThenClose) OnOpen(c *conn.Conn) {
	buf := make([]byte, h.n)
	ctPattern(buf, 0)
	c.Write(buf)
	c.Close()
	close(h.closed)
}

// TestHugeDurations: durations too long for the clock mean "never": a
// linger of math.MaxInt64 lets every queued byte out (it lost all but
// 175,616 of 8 MiB), and read and idle timeouts of math.MaxInt64 neither
// fire nor make the loop spin.
func TestHugeDurations(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		t.Run("linger", func(t *testing.T) {
			const n = 8 << 20
			h := bulkThenClose{n: n, closed: make(chan struct{})}
			srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithLinger(math.MaxInt64))
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			<-h.closed // the server's queue waits on us
			sum := sha256.New()
			got, err := io.Copy(sum, c)
			if err != nil || got != n {
				t.Fatalf("read %d of %d bytes: %v", got, n, err)
			}
			want := make([]byte, n)
			ctPattern(want, 0)
			if sha256.Sum256(want) != [32]byte(sum.Sum(nil)) {
				t.Fatal("the bytes differ")
			}
		})
		t.Run("timeouts", func(t *testing.T) {
			h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
			srv := ctListen(t, "tcp", "127.0.0.1:0", g, h,
				conn.WithReadTimeout(math.MaxInt64), conn.WithIdleTimeout(math.MaxInt64))
			_, sc, ev := ctDialAccepted(t, srv, h)
			if err := sc.SetReadTimeout(math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			if err := sc.SetIdleTimeout(math.MaxInt64 - 1); err != nil {
				t.Fatal(err)
			}
			turns := g.Loop(0).Stats().Turns
			time.Sleep(300 * time.Millisecond)
			if d := g.Loop(0).Stats().Turns - turns; d > 20 {
				t.Fatalf("the loop turned %d times in 300ms with only far timeouts pending", d)
			}
			ev.mu.Lock()
			closes := ev.closes
			ev.mu.Unlock()
			if closes != 0 {
				t.Fatal("a timeout of math.MaxInt64 closed the connection")
			}
		})
	})
}

// TestLargeWriteKeepsLoopResponsive: a 256 MiB Write from another goroutine
// does not hold the connection for the length of its copy: the loop keeps
// answering tasks (round trips took 1.3-2.6 s while the copy held the
// lock the send completions need).
func TestLargeWriteKeepsLoopResponsive(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewServerHandler(t, nil)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		c, sc, _ := ctDialAccepted(t, srv, h)
		go io.Copy(io.Discard, c)
		big := make([]byte, 256<<20)
		writes := 4
		if testing.Short() || accRace {
			writes = 1
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range writes {
				sc.Write(big)
			}
		}()
		// worst is the slowest round trip, split into the way to the
		// loop (queue, wakeup, the loop's turn) and the way back (the
		// test goroutine being scheduled), to tell a stalled loop from a
		// busy scheduler.
		var worst, worstIn time.Duration
		var gc0 runtime.MemStats
		runtime.ReadMemStats(&gc0)
		for {
			select {
			case <-done:
				var gc1 runtime.MemStats
				runtime.ReadMemStats(&gc1)
				var maxPause time.Duration
				for i := gc0.NumGC; i < gc1.NumGC && i < gc0.NumGC+256; i++ {
					maxPause = max(maxPause, time.Duration(gc1.PauseNs[(i+255)%256]))
				}
				t.Logf("worst loop round trip during %d writes of 256 MiB: %v (%v to run the task); %d GCs, longest pause %v",
					writes, worst, worstIn, gc1.NumGC-gc0.NumGC, maxPause)
				if worst > time.Second {
					t.Fatalf("a loop round trip took %v while a large Write copied (loop stats %+v)", worst, g.Loop(0).Stats())
				}
				sc.Close()
				return
			default:
			}
			start := time.Now()
			res := make(chan time.Time, 1)
			if err := g.Loop(0).Execute(func() { res <- time.Now() }); err != nil {
				t.Fatal(err)
			}
			ran := <-res
			if d := time.Since(start); d > worst {
				worst, worstIn = d, ran.Sub(start)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// TestOptionLimits: values past the kernel's limits are refused instead of
// silently doing something else; nil contexts are taken as Background; an
// empty write after CloseWrite fails the same way for Write and Writev.
func TestOptionLimits(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, o := range []conn.Option{conn.WithKeepAlive(10 * time.Hour), conn.WithBacklog(1 << 32)} {
			if _, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", ctNewEvents(t), o); !errors.Is(err, conn.ErrInvalidOption) {
				t.Fatalf("Listen: %v, want ErrInvalidOption", err)
			}
		}
		h := ctNewServerHandler(t, nil)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		_, sc, _ := ctDialAccepted(t, srv, h)
		if err := sc.SetKeepAlive(10 * time.Hour); !errors.Is(err, conn.ErrInvalidOption) {
			t.Fatalf("SetKeepAlive(10h): %v, want ErrInvalidOption", err)
		}
		if err := sc.SetKeepAlive(conn.MaxKeepAlive); err != nil {
			t.Fatalf("SetKeepAlive(MaxKeepAlive): %v", err)
		}
		sc.CloseWrite()
		if _, err := sc.Write(nil); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("Write(nil) after CloseWrite: %v", err)
		}
		if _, err := sc.Writev(nil); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("Writev(nil) after CloseWrite: %v", err)
		}
		sc.Close()
		if _, err := sc.Writev(nil); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Writev(nil) after Close: %v", err)
		}
		if err := srv.Shutdown(nil); err != nil {
			t.Fatalf("Server.Shutdown(nil): %v", err)
		}
		if err := g.Shutdown(nil); err != nil {
			t.Fatalf("Group.Shutdown(nil): %v", err)
		}
	})
}

// TestGoexitInHandler: runtime.Goexit in OnData (what t.FailNow does)
// terminates that loop properly: its connections close with OnClose, the
// server forgets them, and the group's shutdown completes.
func TestGoexitInHandler(t *testing.T) {
	ctQuietLogs(t)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		h := ctNewServerHandler(t, func(e *ctEvents) {
			e.onData = func(*conn.Conn, []byte) { runtime.Goexit() }
		})
		srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("x"))
		_, ev := h.accepted(t)
		if err := ev.wait(t); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("OnClose(%v), want net.ErrClosed", err)
		}
		ctWaitFor(t, 5*time.Second, "the server to forget the connection", func() bool { return srv.Conns() == 0 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Fatalf("Group.Shutdown: %v", err)
		}
		srv.Close()
	})
}
