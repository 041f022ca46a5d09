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
	"github.com/ringloop/ringloop/loop"
)

// TestDialAsyncFromLoop: a handler dials a backend from OnData on a 1-loop
// group (Netty's proxy pattern). The blocking Dial refuses at once; the
// asynchronous one connects on the caller's loop, and its future completes
// there with an open connection.
func TestDialAsyncFromLoop(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		backend := ctListen(t, "tcp", "127.0.0.1:0", g, ctNewServerHandler(t, func(e *ctEvents) { e.echo = true }))
		type result struct {
			blockingErr   error
			err           error
			sameLoop      bool
			completedOnIt bool
		}
		results := make(chan result, 1)
		h := ctNewServerHandler(t, func(e *ctEvents) {
			e.onData = func(front *conn.Conn, data []byte) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, berr := conn.Dial(ctx, g, "tcp", backend.Addr().String(), ctNewEvents(t))
				f := conn.DialAsync(ctx, g, "tcp", backend.Addr().String(), ctNewEvents(t))
				f.OnDone(func(bc *conn.Conn, err error) {
					cancel()
					r := result{blockingErr: berr, err: err, completedOnIt: loop.Current() == front.Loop()}
					if err == nil {
						r.sameLoop = bc.Loop() == front.Loop()
						bc.Close()
						front.Write([]byte("connected"))
					}
					results <- r
				})
			}
		})
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-results:
			if !errors.Is(r.blockingErr, loop.ErrInLoop) {
				t.Fatalf("blocking Dial on the loop: %v, want loop.ErrInLoop", r.blockingErr)
			}
			if r.err != nil {
				t.Fatalf("DialAsync from the loop: %v", r.err)
			}
			if !r.sameLoop || !r.completedOnIt {
				t.Fatalf("backend on the caller's loop: %v; future completed on it: %v", r.sameLoop, r.completedOnIt)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("DialAsync from the loop never completed")
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, len("connected"))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "connected" {
			t.Fatalf("reply %q, %v", buf, err)
		}
	})
}

// TestDialAsyncBounds: an asynchronous dial to a connect that hangs ends
// with its ctx deadline, or with the connect timeout, calling no handler
// method; WithLoop picks the loop, and a loop of another group is refused.
func TestDialAsyncBounds(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		addr := ctHangingAddr(t)
		h := ctNewEvents(t)
		for _, tc := range []struct {
			name    string
			timeout time.Duration // ctx
			opts    []conn.Option
			want    error
		}{
			{"ctx-deadline", 100 * time.Millisecond, nil, context.DeadlineExceeded},
			{"connect-timeout", time.Minute, []conn.Option{conn.WithConnectTimeout(100 * time.Millisecond)}, os.ErrDeadlineExceeded},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
				defer cancel()
				start := time.Now()
				f := conn.DialAsync(ctx, g, "tcp", addr, h, tc.opts...)
				select {
				case <-f.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("DialAsync did not end")
				}
				c, err, _ := f.Result()
				if err == nil {
					c.Close()
					t.Skip("the connect did not hang (the kernel accepted it)")
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("DialAsync: %v, want %v", err, tc.want)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("took %v", d)
				}
			})
		}
		h.mu.Lock()
		opened, closes := h.opened, h.closes
		h.mu.Unlock()
		if opened != 0 || closes != 0 {
			t.Fatalf("failed dials called the handler: opened %d closes %d", opened, closes)
		}

		t.Run("host-name", func(t *testing.T) {
			// Resolved on a goroutine of its own, so also from a loop.
			srv := ctListen(t, "tcp4", "127.0.0.1:0", g, ctNewServerHandler(t, nil))
			_, port, _ := net.SplitHostPort(srv.Addr().String())
			res := make(chan error, 1)
			g.Loop(0).Execute(func() {
				conn.DialAsync(context.Background(), g, "tcp4", net.JoinHostPort("localhost", port), ctNewEvents(t)).
					OnDone(func(c *conn.Conn, err error) {
						if err == nil {
							c.Close()
						}
						res <- err
					})
			})
			select {
			case err := <-res:
				if err != nil {
					t.Fatalf("DialAsync to localhost: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("DialAsync to localhost did not end")
			}
		})

		t.Run("with-loop", func(t *testing.T) {
			srv := ctListen(t, "tcp", "127.0.0.1:0", g, ctNewServerHandler(t, nil))
			want := g.Loop(1)
			c, err := conn.Dial(context.Background(), g, "tcp", srv.Addr().String(), ctNewEvents(t), conn.WithLoop(want))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Loop() != want {
				t.Fatalf("connection on %v, want %v", c.Loop(), want)
			}
			other := ctGroup(t, b, 1)
			_, err = conn.Dial(context.Background(), g, "tcp", srv.Addr().String(), ctNewEvents(t), conn.WithLoop(other.Loop(0)))
			if !errors.Is(err, conn.ErrInvalidOption) {
				t.Fatalf("WithLoop of another group: %v, want ErrInvalidOption", err)
			}
		})
	})
}
