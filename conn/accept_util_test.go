package conn_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
)

// Helpers of the acceptance tests (accept_*_test.go). Their names start
// with acc so they never collide with the package's other test helpers.

// accFull reports whether RINGLOOP_FULL=1 asks for the full-size runs.
func accFull() bool { return os.Getenv("RINGLOOP_FULL") == "1" }

// accSize returns full, or scaled under -race unless RINGLOOP_FULL=1.
func accSize(full, race int) int {
	if accRace && !accFull() {
		return race
	}
	return full
}

// accLogger keeps the loops' warnings and errors but drops info lines.
var accLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// accBackends are the backends every acceptance test runs on.
var accBackends = []loop.Backend{loop.BackendUring, loop.BackendEpoll}

// accForEachBackend runs f as the subtests backend=uring and backend=epoll;
// the uring one is skipped, with the reason, where io_uring is refused.
func accForEachBackend(t *testing.T, f func(t *testing.T, b loop.Backend)) {
	t.Helper()
	for _, b := range accBackends {
		t.Run("backend="+b.String(), func(t *testing.T) {
			if b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			f(t, b)
		})
	}
}

// accGroup creates a group on backend b, shut down (bounded) when tb ends.
func accGroup(tb testing.TB, b loop.Backend, opts ...loop.Option) *loop.Group {
	tb.Helper()
	g, err := loop.NewGroup(append([]loop.Option{loop.WithBackend(b), loop.WithLogger(accLogger)}, opts...)...)
	if err != nil {
		if b == loop.BackendUring && errors.Is(err, ring.ErrNotSupported) {
			tb.Skipf("io_uring unavailable: %v", err)
		}
		tb.Fatalf("NewGroup(%v): %v", b, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			tb.Errorf("group Shutdown: %v", err)
		}
	})
	return g
}

// accListen starts a TCP server on 127.0.0.1:0, shut down (bounded) when tb
// ends, before the group's own cleanup.
func accListen(tb testing.TB, g *loop.Group, h conn.Handler, opts ...conn.Option) *conn.Server {
	tb.Helper()
	srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h, opts...)
	if err != nil {
		tb.Fatalf("Listen: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Errorf("server Shutdown: %v", err)
		}
	})
	return srv
}

// accEcho writes back whatever it receives.
type accEcho struct{ conn.NopHandler }

func (accEcho) OnData(c *conn.Conn, data []byte) { c.Write(data) }

// accWaitFor polls cond every millisecond until it holds or d passes.
func accWaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	testutil.WaitFor(tb, d, what, cond)
}

// accHelperEnv names the helper mode of a re-executed test binary
// (the os/exec TestHelperProcess pattern): the test that sees it set runs
// the helper instead of itself and exits.
const accHelperEnv = "RINGLOOP_ACCEPT_HELPER"

// connListenForHelper starts the echo server of a helper process (no
// testing.TB there) on 127.0.0.1:0.
func connListenForHelper(g *loop.Group) (*conn.Server, error) {
	return conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", accEcho{})
}
