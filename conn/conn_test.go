package conn_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
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
