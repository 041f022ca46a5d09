package conn_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// TestBlockingCallsRefuseLoop: Dial and Server.Shutdown called from a
// callback return an error wrapping loop.ErrInLoop at once, instead of
// waiting on the loop they run on (which would stall it for good).
func TestBlockingCallsRefuseLoop(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		results := make(chan error, 2)
		var srvP atomic.Pointer[conn.Server] // set before the client connects
		h := ctNewServerHandler(t, func(e *ctEvents) {
			e.onData = func(c *conn.Conn, data []byte) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				srv := srvP.Load()
				_, err := conn.Dial(ctx, g, "tcp", srv.Addr().String(), ctNewEvents(t))
				results <- err
				results <- srv.Shutdown(ctx)
			}
		})
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		srvP.Store(srv)
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		for _, what := range []string{"Dial", "Server.Shutdown"} {
			select {
			case err := <-results:
				if !errors.Is(err, loop.ErrInLoop) {
					t.Fatalf("%s on the loop: %v, want an error wrapping loop.ErrInLoop", what, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s on the loop did not return", what)
			}
		}
		// The shutdown started anyway: the connection closes.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("connection still open after Server.Shutdown from its loop")
		}
	})
}

// TestCurrent: loop.Current names the loop a callback runs on, and nil
// elsewhere.
func TestCurrent(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		if loop.Current() != nil {
			t.Fatal("Current() off every loop is not nil")
		}
		for _, l := range g.Loops() {
			got := make(chan *loop.Loop, 1)
			if err := l.Execute(func() { got <- loop.Current() }); err != nil {
				t.Fatal(err)
			}
			if c := <-got; c != l {
				t.Fatalf("Current() on %v = %v", l, c)
			}
		}
	})
}
