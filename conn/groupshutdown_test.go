package conn_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
)

// TestGroupShutdownClosesAtOnce: a group shut down with a quiet period
// closes its connections (accepted and dialed) and stops accepting at its
// first shutdown check, as Netty does, instead of serving them until the
// quiet period or the timeout ends. The loops run on a clock that stands
// still until the end, so the quiet period cannot end meanwhile.
func TestGroupShutdownClosesAtOnce(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(ctLogger), testknobs.Clock(clk).(loop.Option))
		if err != nil {
			t.Fatal(err)
		}
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, ev := h.accepted(t)
		dialEv := ctNewEvents(t)
		dc, err := conn.Dial(context.Background(), g, "tcp", srv.Addr().String(), dialEv)
		if err != nil {
			t.Fatal(err)
		}
		_ = dc

		const quiet, timeout = 2 * time.Second, 10 * time.Second
		if err := g.ShutdownGracefully(quiet, timeout); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("the connection still answered during the shutdown")
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the connection was not closed during the quiet period")
		}
		if err := ev.wait(t); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("OnClose(%v), want net.ErrClosed", err)
		}
		// The dialed connection's peer is a connection of the same
		// group: its FIN may come first.
		if err := dialEv.wait(t); !errors.Is(err, net.ErrClosed) && err != io.EOF {
			t.Fatalf("dialed OnClose(%v), want net.ErrClosed or io.EOF", err)
		}
		// The listener stopped: a new connection is refused or closed
		// at once, never served.
		if c2, err := net.DialTimeout("tcp", srv.Addr().String(), time.Second); err == nil {
			c2.SetReadDeadline(time.Now().Add(time.Second))
			c2.Write([]byte("x"))
			if _, err := c2.Read(make([]byte, 1)); err == nil {
				t.Fatal("a connection accepted during the shutdown was served")
			}
			c2.Close()
		}
		// Past the shutdown's timeout: the loops end at their next check.
		clk.Advance(timeout)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestServerShutdownHonoursCtx: Server.Shutdown returns when its ctx ends
// even if an acceptor loop is stuck (it waited for the listener's close
// without bound).
func TestServerShutdownHonoursCtx(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, ctNewServerHandler(t, nil))
		unblock := make(chan struct{})
		stuck := make(chan struct{})
		g.Loop(0).Execute(func() { close(stuck); <-unblock })
		<-stuck
		defer close(unblock)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := srv.Shutdown(ctx)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Server.Shutdown took %v with a 200ms ctx", d)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Server.Shutdown: %v, want context.DeadlineExceeded", err)
		}
	})
}
