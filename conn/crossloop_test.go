package conn_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// TestSettersAcrossLoops: two connections on different loops, each one's
// OnData setting options of the other (as a proxy does): neither loop
// stops, and the settings apply.
func TestSettersAcrossLoops(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		var peers [2]atomic.Pointer[conn.Conn]
		var sets atomic.Int64
		h := ctNewServerHandler(t, func(e *ctEvents) {
			e.echo = true
			e.onData = func(c *conn.Conn, data []byte) {
				i := 0
				if c.Loop() == g.Loop(1) {
					i = 1
				}
				if other := peers[1-i].Load(); other != nil {
					if other.SetNoDelay(false) == nil && other.SetReadTimeout(time.Hour) == nil &&
						other.SetIdleTimeout(time.Hour) == nil && other.SetReadBuffer(64<<10) == nil {
						sets.Add(1)
					}
				}
			}
		})
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		var clients []net.Conn
		for len(clients) < 2 || peers[0].Load() == nil || peers[1].Load() == nil {
			if len(clients) > 8 {
				t.Fatal("the round-robin chooser never put a connection on each loop")
			}
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			clients = append(clients, c)
			sc, _ := h.accepted(t)
			i := 0
			if sc.Loop() == g.Loop(1) {
				i = 1
			}
			peers[i].CompareAndSwap(nil, sc)
		}
		// Both loops' handlers set options on the other at once, many
		// times.
		buf := make([]byte, 1)
		for range 200 {
			for _, c := range clients {
				c.Write([]byte("x"))
			}
			for _, c := range clients {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Fatalf("a loop stopped: %v", err)
				}
			}
		}
		if sets.Load() == 0 {
			t.Fatal("no setter ran across loops")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Fatalf("Group.Shutdown: %v", err)
		}
	})
}

// TestCloseFuture: the close future completes after OnClose with its
// cause, also when asked for after the close.
func TestCloseFuture(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewServerHandler(t, nil)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		c, sc, ev := ctDialAccepted(t, srv, h)
		f := sc.CloseFuture()
		if f.IsDone() {
			t.Fatal("close future done while open")
		}
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := f.Wait(ctx); err != io.EOF {
			t.Fatalf("close future: %v, want io.EOF", err)
		}
		ev.mu.Lock()
		closes := ev.closes
		ev.mu.Unlock()
		if closes != 1 {
			t.Fatal("the close future completed before OnClose")
		}
		if _, err, done := sc.CloseFuture().Result(); !done || err != io.EOF {
			t.Fatalf("close future asked for after the close: done %v, %v", done, err)
		}
	})
}
