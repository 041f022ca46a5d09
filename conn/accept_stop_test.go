package conn_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// asWantAcceptClosed fails t unless err is what package net's Accept
// returns once its socket is closed: a *net.OpError of "accept" wrapping
// net.ErrClosed.
func asWantAcceptClosed(t *testing.T, what string, err error) {
	t.Helper()
	var oe *net.OpError
	if !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) || oe.Op != "accept" {
		t.Fatalf("%s: %v, want an accept *net.OpError wrapping net.ErrClosed", what, err)
	}
}

// asAcceptAtOnce calls ln.Accept and fails t unless it returns
// net.ErrClosed within a second.
func asAcceptAtOnce(t *testing.T, ln *conn.NetListener, what string) {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if c != nil {
			c.Close()
		}
		res <- err
	}()
	select {
	case err := <-res:
		asWantAcceptClosed(t, what, err)
	case <-time.After(time.Second):
		t.Fatalf("%s: Accept still blocked after 1s", what)
	}
}

// asGet makes a request with client and returns the body and whether the
// request went over a reused (keep-alive) connection.
func asGet(t *testing.T, client *http.Client, url string) (string, bool) {
	t.Helper()
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return string(body), reused
}

// TestNetListenerAcceptEndsWithServer: http.Serve on a NetListener returns
// as it does on a net.Listener whose socket closes (an accept *net.OpError
// wrapping net.ErrClosed) when the server under the listener stops,
// whichever way: Group.Shutdown, Server().Close() or Server().Shutdown(ctx),
// with a keep-alive client connection open meanwhile. A later Accept fails
// at once, and no goroutine, fd or ring is left. Server().Close() leaves
// the accepted connection open, as net.Listener.Close does: the client's
// next request goes over it.
func TestNetListenerAcceptEndsWithServer(t *testing.T) {
	stops := []struct {
		name      string
		stop      func(g *loop.Group, ln *conn.NetListener) error
		connLives bool // the keep-alive connection outlives the stop
	}{
		{"Group.Shutdown", func(g *loop.Group, _ *conn.NetListener) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return g.Shutdown(ctx)
		}, false},
		{"Server.Close", func(_ *loop.Group, ln *conn.NetListener) error { return ln.Server().Close() }, true},
		{"Server.Shutdown", func(_ *loop.Group, ln *conn.NetListener) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return ln.Server().Shutdown(ctx)
		}, false},
	}
	for _, st := range stops {
		t.Run(st.name, func(t *testing.T) {
			ctBackends(t, func(t *testing.T, b loop.Backend) {
				testutil.CheckLeaks(t) // first, so its check runs after every other cleanup
				g := ctGroup(t, b, 2)
				ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				served := make(chan error, 1)
				go func() {
					served <- http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						io.WriteString(w, "ok")
					}))
				}()
				// A client on package net, apart from the group.
				tr := &http.Transport{}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
				url := "http://" + ln.Addr().String() + "/"
				if body, _ := asGet(t, client, url); body != "ok" {
					t.Fatalf("first request: %q", body)
				}

				if err := st.stop(g, ln); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				select {
				case err := <-served:
					asWantAcceptClosed(t, "http.Serve after "+st.name, err)
				case <-time.After(2 * time.Second):
					t.Fatalf("http.Serve still running 2s after %s returned", st.name)
				}
				asAcceptAtOnce(t, ln, "Accept after "+st.name)
				if st.connLives {
					body, reused := asGet(t, client, url)
					if body != "ok" || !reused {
						t.Errorf("request after %s: %q over a reused connection: %v, want \"ok\" over the kept one", st.name, body, reused)
					}
				}

				tr.CloseIdleConnections()
				ctWaitFor(t, 5*time.Second, "net/http's goroutines to exit", func() bool {
					s := string(testutil.AllStacks())
					return !strings.Contains(s, "net/http.(*conn).serve") &&
						!strings.Contains(s, "net/http.(*persistConn)") &&
						!strings.Contains(s, "net/http.(*Server).Serve")
				})
			})
		})
	}
}

// TestNetListenerStopClosesQueued: a connection accepted but not yet
// returned by Accept is closed when the server stops accepting, as
// NetListener.Close closes it, and counted in Dropped; Accept then fails at
// once. Server().Close() does it before it returns. A graceful group
// shutdown does it once the listening socket closed, at the shutdown's
// first check (its hook on another loop may close the connection first,
// and an Accept meanwhile return it, closed), while the loops still run
// their quiet period: Accept does not wait for the group's end.
func TestNetListenerStopClosesQueued(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		t.Run("Server.Close", func(t *testing.T) {
			testutil.CheckLeaks(t)
			g := ctGroup(t, b, 2)
			ln, c := asQueued(t, g)
			if err := ln.Server().Close(); err != nil {
				t.Fatal(err)
			}
			if d := ln.Dropped(); d != 1 {
				t.Errorf("Dropped() = %d once Server().Close() returned, want 1", d)
			}
			asClosedByServer(t, c)
			asAcceptAtOnce(t, ln, "Accept after Server().Close()")
		})
		t.Run("ShutdownGracefully", func(t *testing.T) {
			testutil.CheckLeaks(t)
			g := ctGroup(t, b, 2)
			ln, c := asQueued(t, g)
			if err := g.ShutdownGracefully(2*time.Second, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			asClosedByServer(t, c)
			returned := 0
			deadline := time.Now().Add(time.Second)
			for {
				nc, err := ln.Accept()
				if err != nil {
					asWantAcceptClosed(t, "Accept after ShutdownGracefully", err)
					break
				}
				returned++
				nc.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := nc.Read(make([]byte, 1)); err == nil || isTimeout(err) {
					t.Fatalf("Accept returned an open connection during the shutdown: read %v", err)
				}
				nc.Close()
				if time.Now().After(deadline) {
					t.Fatal("Accept did not fail within 1s of the shutdown")
				}
			}
			if d := ln.Dropped(); d+uint64(returned) != 1 {
				t.Errorf("Dropped() = %d and %d returned by Accept, want 1 in all", d, returned)
			}
			asAcceptAtOnce(t, ln, "a second Accept after ShutdownGracefully")
			select {
			case <-g.Done():
				t.Errorf("the group terminated before Accept failed: its quiet period was cut short")
			default:
			}
		})
	})
}

// asQueued listens with ListenNet on g and connects a package net client,
// which the server accepts and queues for Accept; both are closed when the
// test ends.
func asQueued(t *testing.T, g *loop.Group) (*conn.NetListener, net.Conn) {
	t.Helper()
	ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctWaitFor(t, 5*time.Second, "the connection accepted", func() bool { return ln.Server().Conns() == 1 })
	// The server counts a connection just before it opens it (and queues
	// it for Accept) in the same task on its loop: wait for that task to
	// end, or a shutdown begun in between closes the connection unopened,
	// neither queued nor dropped.
	for _, l := range g.Loops() {
		runOnLoop(t, l)
	}
	return ln, c
}

// asClosedByServer fails t unless the server closes the client c's
// connection within 5s.
func asClosedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read from the queued connection: %d, %v, want EOF or a reset", n, err)
	}
}
