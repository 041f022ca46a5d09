package conn_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// TestPanickingCallbacks: a panic in OnOpen fails Dial with a
// *conn.PanicError (it hung for good) and closes the connection; on a
// server, a panicking OnOpen or OnData closes the connection (it stayed
// half-armed, counted in Conns), and the loop goes on serving.
func TestPanickingCallbacks(t *testing.T) {
	ctQuietLogs(t)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		echo := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, echo)

		// Dial whose OnOpen panics.
		ev := ctNewEvents(t)
		ev.onOpen = func(*conn.Conn) { panic("boom in OnOpen") }
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := conn.Dial(ctx, g, "tcp", srv.Addr().String(), ev)
			done <- err
		}()
		select {
		case err := <-done:
			var pe *conn.PanicError
			if !errors.As(err, &pe) || pe.Callback != "OnOpen" || pe.Value != "boom in OnOpen" || len(pe.Stack) == 0 {
				t.Fatalf("Dial with a panicking OnOpen: %v, want a *conn.PanicError with its stack", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Dial with a panicking OnOpen did not return")
		}
		var pe *conn.PanicError
		if err := ev.wait(t); !errors.As(err, &pe) {
			t.Fatalf("OnClose(%v), want the *conn.PanicError", err)
		}

		// Servers whose OnOpen or OnData panics.
		for _, where := range []string{"OnOpen", "OnData"} {
			h := ctNewServerHandler(t, func(e *ctEvents) {
				if where == "OnOpen" {
					e.onOpen = func(*conn.Conn) { panic("boom") }
				} else {
					e.onData = func(*conn.Conn, []byte) { panic("boom") }
				}
			})
			s := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithIdleTimeout(time.Hour))
			c, err := net.Dial("tcp", s.Addr().String())
			if err == nil { // else the reset came first: the failure is seen
				c.Write([]byte("x"))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err == nil {
					t.Fatalf("%s panicked, but the connection answered", where)
				}
				c.Close()
			}
			ctWaitFor(t, 5*time.Second, where+": the server forgets the connection", func() bool { return s.Conns() == 0 })
			if err := h.conns[0].wait(t); !errors.As(err, &pe) || pe.Callback != where {
				t.Fatalf("%s: OnClose(%v), want a *conn.PanicError", where, err)
			}
		}

		// The other callbacks: OnWritabilityChanged, OnHalfClose, OnRead
		// and OnClose. Each panic is counted; the connection closes
		// (OnClose's own panic only logs) and the server forgets it.
		for _, where := range []string{"OnWritabilityChanged", "OnHalfClose", "OnRead", "OnClose"} {
			before := conn.RecoveredPanics()
			h := &panicky{where: where, closed: make(chan error, 1)}
			s := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithHalfClose(true), conn.WithWaterMarks(1, 2))
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("xyz"))
			if where == "OnHalfClose" {
				c.(*net.TCPConn).CloseWrite()
			}
			if where == "OnClose" {
				c.Close()
			}
			select {
			case err := <-h.closed:
				if where != "OnClose" && (!errors.As(err, &pe) || pe.Callback != where) {
					t.Fatalf("%s: OnClose(%v), want a *conn.PanicError", where, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s panicked and the connection did not close", where)
			}
			ctWaitFor(t, 5*time.Second, where+": the server forgets the connection", func() bool { return s.Conns() == 0 })
			ctWaitFor(t, 5*time.Second, where+": the panic counted", func() bool { return conn.RecoveredPanics() > before })
			c.Close()
		}

		// The loop still serves.
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("ok"))
		buf := make([]byte, 2)
		if _, err := c.Read(buf); err != nil || string(buf) != "ok" {
			t.Fatalf("echo after the panics: %q, %v", buf, err)
		}
	})
}

// panicky panics in the callback named by where (its connections write
// enough to become unwritable under tiny water marks).
type panicky struct {
	where  string
	closed chan error
}

func (h *panicky) OnOpen(c *conn.Conn)              {}
func (h *panicky) OnData(c *conn.Conn, data []byte) {}
func (h *panicky) OnRead(c *conn.Conn, data []byte) int {
	if h.where == "OnRead" {
		panic("boom")
	}
	if h.where == "OnWritabilityChanged" {
		c.Write(make([]byte, 1<<20))
	}
	return len(data)
}
func (h *panicky) OnWritabilityChanged(c *conn.Conn, writable bool) {
	if h.where == "OnWritabilityChanged" {
		panic("boom")
	}
}
func (h *panicky) OnHalfClose(c *conn.Conn) {
	if h.where == "OnHalfClose" {
		panic("boom")
	}
	c.Close()
}
func (h *panicky) OnClose(c *conn.Conn, err error) {
	h.closed <- err
	if h.where == "OnClose" {
		panic("boom")
	}
}
