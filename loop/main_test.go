package loop_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// quietLogger drops the loops' info lines (rebuild reports) but keeps
// warnings and errors.
var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// backends lists the backends every acceptance test runs on.
var backends = []loop.Backend{loop.BackendUring, loop.BackendEpoll}

// forEachBackend runs f as a subtest per backend ("backend=uring",
// "backend=epoll"); the uring one is skipped where io_uring is refused.
func forEachBackend(t *testing.T, f func(t *testing.T, b loop.Backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run("backend="+b.String(), func(t *testing.T) {
			if b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			f(t, b)
		})
	}
}

// newGroup creates a group on backend b and shuts it down when the test
// ends (and checks that it terminates).
func newGroup(tb testing.TB, b loop.Backend, opts ...loop.Option) *loop.Group {
	tb.Helper()
	g, err := loop.NewGroup(append([]loop.Option{loop.WithBackend(b), loop.WithLogger(quietLogger)}, opts...)...)
	if err != nil {
		if b == loop.BackendUring && errors.Is(err, ring.ErrNotSupported) {
			tb.Skipf("io_uring unavailable: %v", err)
		}
		tb.Fatalf("NewGroup: %v", err)
	}
	tb.Cleanup(func() { shutdown(tb, g) })
	return g
}

// shutdown shuts g down without a quiet period and waits (bounded).
func shutdown(tb testing.TB, g *loop.Group) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		tb.Errorf("Shutdown: %v", err)
	}
}

// runOn runs f on l and waits for it.
func runOn(tb testing.TB, l *loop.Loop, f func()) {
	tb.Helper()
	done := make(chan struct{})
	if err := l.Execute(func() { defer close(done); f() }); err != nil {
		tb.Fatalf("Execute: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		tb.Fatalf("task on %v did not run within 10s", l)
	}
}

// waitFor polls cond every millisecond until it holds or d passes.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// completerFunc adapts a function to loop.Completer.
type completerFunc func(c *loop.Completion)

func (f completerFunc) Complete(c *loop.Completion) { f(c) }
