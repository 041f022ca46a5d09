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
	"github.com/ringloop/ringloop/sched"
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
	testutil.WaitFor(tb, d, what, cond)
}

// turnPasses waits until l has finished a whole turn that began after the
// call, waking it from its waits. That turn read the clock after the
// call: timers due by then were moved to the task queue (and the first
// of them ran), and, while shutting down, the quiet period, the timeout
// and the holds were checked. It fails if l terminates first.
func turnPasses(tb testing.TB, l *loop.Loop) {
	tb.Helper()
	k := l.Stats().Turns
	waitFor(tb, 10*time.Second, "a turn of "+l.String(), func() bool {
		if l.State() == loop.StateTerminated {
			tb.Fatalf("%v terminated while a turn was awaited", l)
		}
		l.Wake()
		return l.Stats().Turns >= k+2
	})
}

// advance moves clk, l's clock, by d and waits until l has run every
// timer due by then and every task queued before.
func advance(tb testing.TB, clk *sched.ManualClock, l *loop.Loop, d time.Duration) {
	tb.Helper()
	clk.Advance(d)
	turnPasses(tb, l)
	runOn(tb, l, func() {}) // behind the timers the turn moved
}

// waitAsleep waits until l sleeps in its backend's wait, so the ops it
// started before are in the kernel (on a shared thread, whose id changes,
// until it has published its wait deadline).
func waitAsleep(tb testing.TB, l *loop.Loop) {
	tb.Helper()
	waitFor(tb, 10*time.Second, "the loop to wait", l.Waiting)
	if !l.Features().SharedThread {
		testutil.WaitBlocked(tb, l.Tid(), 10*time.Second)
	}
}

// completerFunc adapts a function to loop.Completer.
type completerFunc func(c *loop.Completion)

func (f completerFunc) Complete(c *loop.Completion) { f(c) }
