package conn_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// ctWaitGuard runs waits on a loop that must be refused, and lets them go
// if they block instead: after trip, the wait in progress and every later
// one is released (its future completed) so the loop runs on and the test
// fails instead of hanging.
type ctWaitGuard struct {
	mu      sync.Mutex
	tripped bool
	release func() // of the wait in progress
	results chan ctWaitResult
}

type ctWaitResult struct {
	what string
	err  error
}

func ctNewWaitGuard() *ctWaitGuard { return &ctWaitGuard{results: make(chan ctWaitResult, 16)} }

// wait runs w, reporting its error as what; release completes what w
// waits for.
func (g *ctWaitGuard) wait(what string, release func(), w func() error) {
	g.mu.Lock()
	g.release = release
	tripped := g.tripped
	g.mu.Unlock()
	if tripped {
		release()
	}
	g.results <- ctWaitResult{what, w()}
}

// trip releases the wait in progress and every later one.
func (g *ctWaitGuard) trip() {
	g.mu.Lock()
	g.tripped = true
	r := g.release
	g.mu.Unlock()
	if r != nil {
		r()
	}
}

// collect receives n results, tripping the guard if one takes over 5 s.
func (g *ctWaitGuard) collect(tb testing.TB, n int) map[string]error {
	tb.Helper()
	got := map[string]error{}
	for len(got) < n {
		select {
		case r := <-g.results:
			got[r.what] = r.err
		case <-time.After(5 * time.Second):
			g.trip()
			tb.Fatalf("a wait on the loop blocked (results so far: %v)", got)
		}
	}
	return got
}

var errCtReleased = errors.New("released by the test's watchdog")

// TestFutureWaitInCallbacks: in a handler's callbacks, Wait for a pending
// future that the callback's own loop completes (a dial's, the
// connection's close future, a timer's) returns an error wrapping
// loop.ErrInLoop at once, even with context.Background(); Wait for a
// complete one (in an OnDone listener) returns its result there. Off the
// loop the same futures are waited for.
func TestFutureWaitInCallbacks(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		guard := ctNewWaitGuard()
		var addr atomic.Value // the server's address, set before any connection
		var openedOnce atomic.Bool
		h := ctNewServerHandler(t, func(e *ctEvents) {
			e.onOpen = func(c *conn.Conn) {
				if !openedOnce.CompareAndSwap(false, true) {
					return
				}
				cf := c.CloseFuture()
				guard.wait("CloseFuture().Wait in OnOpen", func() { cf.Complete(struct{}{}, errCtReleased) }, func() error {
					ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
					defer cancel()
					_, err := cf.Wait(ctx)
					return err
				})
			}
			e.onData = func(c *conn.Conn, _ []byte) {
				f := conn.DialAsync(context.Background(), g, "tcp", addr.Load().(string), ctNewEvents(t))
				guard.wait("DialAsync(...).Wait in OnData", func() { f.Complete(nil, errCtReleased) }, func() error {
					_, err := f.Wait(context.Background())
					return err
				})
				cf := c.CloseFuture()
				guard.wait("CloseFuture().Wait in OnData", func() { cf.Complete(struct{}{}, errCtReleased) }, func() error {
					_, err := cf.Wait(context.Background())
					return err
				})
				tm, err := c.Loop().Schedule(time.Hour, func() {})
				if err != nil {
					t.Error(err)
					return
				}
				guard.wait("a timer's Future().Wait in OnData", func() { tm.Stop() }, func() error {
					_, err := tm.Future().Wait(context.Background())
					return err
				})
				tm.Stop()
				// Complete futures give their results on the loop.
				f.OnDone(func(dc *conn.Conn, err error) {
					guard.wait("Wait for a complete dial future", func() {}, func() error {
						wc, werr := f.Wait(context.Background())
						if werr == nil && (wc != dc || err != nil) {
							return errors.New("Wait and OnDone disagree")
						}
						return werr
					})
					if dc == nil {
						return
					}
					dcf := dc.CloseFuture()
					dcf.OnDone(func(struct{}, error) {
						guard.wait("Wait for a complete close future", func() {}, func() error {
							_, err := dcf.Wait(context.Background())
							return err
						})
					})
					dc.Close()
				})
			}
		})
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		addr.Store(srv.Addr().String())
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		got := guard.collect(t, 6)
		for what, err := range got {
			want := loop.ErrInLoop
			if what == "Wait for a complete dial future" || what == "Wait for a complete close future" {
				want = nil
			}
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", what, err, want)
			}
		}

		// Off the loop the same futures are waited for.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dc, err := conn.DialAsync(ctx, g, "tcp", srv.Addr().String(), ctNewEvents(t)).Wait(ctx)
		if err != nil {
			t.Fatalf("DialAsync(...).Wait off the loop: %v", err)
		}
		dcf := dc.CloseFuture()
		dc.Close()
		if _, err := dcf.Wait(ctx); err != nil {
			t.Fatalf("CloseFuture().Wait off the loop: %v", err)
		}
		tm, err := g.Loop(0).Schedule(10*time.Millisecond, func() {})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tm.Future().Wait(ctx); err != nil {
			t.Fatalf("a timer's Future().Wait off the loop: %v", err)
		}
	})
}
