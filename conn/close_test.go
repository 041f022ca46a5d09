package conn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// TestCloseInFlight: Close while a send (8 MiB to a peer that does not
// read) and a receive are in flight: OnClose runs once with nil, the fd
// count returns to its baseline, the loop saw no stale completion and no
// op is left in flight, and a second Close reports net.ErrClosed.
func TestCloseInFlight(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		baseline := testutil.FdCount()
		for round := range 3 {
			ce := ctNewEvents(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ce)
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
			if err := ce.wait(t); err != nil {
				t.Fatalf("OnClose(%v), want nil", err)
			}
			peer.Close()
		}
		ctWaitFor(t, 5*time.Second, "fds back to baseline", func() bool { return testutil.FdCount() == baseline })
		var inflight int
		done := make(chan struct{})
		g.Next().Execute(func() { inflight = g.Next().OpsInFlight(); close(done) })
		<-done
		st := g.Stats().Total
		if st.StaleCompletions != 0 {
			t.Fatalf("%d stale completions", st.StaleCompletions)
		}
		if inflight != 0 {
			t.Fatalf("%d ops in flight after every conn closed", inflight)
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

// TestCloseInCallbacks: Close from OnOpen and from OnData on the loop runs
// the close at once: no OnData after it, OnClose(nil) once.
func TestCloseInCallbacks(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, where := range []string{"open", "data"} {
			h := ctNewServerHandler(t, func(e *ctEvents) {
				if where == "open" {
					e.onOpen = func(c *conn.Conn) { c.Close() }
				} else {
					e.onData = func(c *conn.Conn, _ []byte) {
						c.Write([]byte("dropped")) // Close drops what is still queued
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
				// EOF arrives after Close ran on the loop.
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				if n, err := nc.Read(make([]byte, 16)); err != io.EOF {
					t.Fatalf("client read %d, %v; want EOF (queued bytes dropped by Close)", n, err)
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
