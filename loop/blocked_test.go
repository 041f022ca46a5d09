package loop_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// recordLog is a slog.Handler that keeps every record, for tests that
// check what a loop logs.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

// records returns the records logged so far with message msg, in order,
// each as its attributes by key.
func (h *recordLog) records(msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		m := map[string]slog.Value{"level": slog.StringValue(r.Level.String())}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Resolve(); return true })
		out = append(out, m)
	}
	return out
}

// watchdogs counts the goroutines running a group's blocked-loop
// watchdog, by the line naming their creator (a goroutine that has not run
// yet shows only a wrapper frame).
func watchdogs() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("created by github.com/ringloop/ringloop/loop.(*Group).startWatchdog"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A task that blocks its loop for 500 ms is reported once, at Warn, with
// the loop's name, what it runs, how long so far, the threshold and the
// loop goroutine's stack (which shows the task), then reported unblocked
// when it returns, and counted in Stats.BlockedEpisodes.
func TestBlockedLoopReported(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		log := &recordLog{}
		g := newGroup(t, b, loop.WithLoops(1), loop.WithLogger(slog.New(log)))
		l := g.Loop(0)
		runOn(t, l, func() {})
		const block = 500 * time.Millisecond
		runOn(t, l, func() { time.Sleep(block) })
		waitFor(t, 2*time.Second, "the unblocked record", func() bool { return len(log.records("loop: unblocked")) > 0 })

		blocked := log.records("loop: blocked")
		if len(blocked) != 1 {
			t.Fatalf("%d blocked records, want 1: %v", len(blocked), blocked)
		}
		r := blocked[0]
		if r["level"].String() != "WARN" || r["loop"].String() != l.String() || r["running"].String() != "task" {
			t.Errorf("blocked record: level %v, loop %v, running %v; want WARN, %v, task", r["level"], r["loop"], r["running"], l)
		}
		if d := r["blocked"].Duration(); d < loop.DefaultBlockedThreshold || d >= block+100*time.Millisecond {
			t.Errorf("blocked %v, want [%v, %v)", d, loop.DefaultBlockedThreshold, block+100*time.Millisecond)
		}
		if th := r["threshold"].Duration(); th != loop.DefaultBlockedThreshold {
			t.Errorf("threshold %v, want %v", th, loop.DefaultBlockedThreshold)
		}
		stack := r["stack"].String()
		if !strings.HasPrefix(stack, "goroutine ") || !strings.Contains(stack, "loop_test.TestBlockedLoopReported") ||
			strings.Contains(stack, "watchBlocked") || strings.Contains(stack, "\n\n") {
			t.Errorf("stack is not the blocked loop goroutine's alone:\n%s", stack)
		}

		unblocked := log.records("loop: unblocked")
		if len(unblocked) != 1 {
			t.Fatalf("%d unblocked records, want 1: %v", len(unblocked), unblocked)
		}
		u := unblocked[0]
		if u["level"].String() != "WARN" || u["loop"].String() != l.String() || u["blocked"].Duration() < r["blocked"].Duration() {
			t.Errorf("unblocked record %v, after blocked %v", u, r["blocked"])
		}
		if n := l.Stats().BlockedEpisodes; n != 1 {
			t.Errorf("BlockedEpisodes = %d, want 1", n)
		}
		if n := g.Stats().Total.BlockedEpisodes; n != 1 {
			t.Errorf("group total BlockedEpisodes = %d, want 1", n)
		}
	})
}

// A loop idle in its wait for longer than the threshold is not blocked:
// nothing is logged or counted.
func TestBlockedIdleLoopNotReported(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		t.Parallel() // one second each
		log := &recordLog{}
		g := newGroup(t, b, loop.WithLoops(1), loop.WithLogger(slog.New(log)))
		l := g.Loop(0)
		runOn(t, l, func() {})
		time.Sleep(time.Second)
		if r := log.records("loop: blocked"); len(r) != 0 {
			t.Errorf("idle loop reported blocked: %v", r)
		}
		if n := l.Stats().BlockedEpisodes; n != 0 {
			t.Errorf("BlockedEpisodes = %d, want 0", n)
		}
	})
}

// WithBlockedThreshold(0) turns the detector off: no watchdog goroutine,
// and a loop blocked far longer than the default threshold is not
// reported. A negative threshold is refused.
func TestBlockedThresholdZero(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		// Watchdogs of groups shut down by earlier tests may take a
		// moment to end.
		waitFor(t, 5*time.Second, "no watchdog", func() bool { return watchdogs() == 0 })
		log := &recordLog{}
		g := newGroup(t, b, loop.WithLoops(1), loop.WithLogger(slog.New(log)), loop.WithBlockedThreshold(0))
		l := g.Loop(0)
		runOn(t, l, func() { time.Sleep(400 * time.Millisecond) })
		if n := watchdogs(); n != 0 {
			t.Errorf("%d watchdog goroutines with the detector off", n)
		}
		if r := log.records("loop: blocked"); len(r) != 0 {
			t.Errorf("blocked loop reported with the detector off: %v", r)
		}
		if n := l.Stats().BlockedEpisodes; n != 0 {
			t.Errorf("BlockedEpisodes = %d, want 0", n)
		}

		// The same with the default: one watchdog, started with the loop.
		on := newGroup(t, b, loop.WithLoops(2))
		if n := watchdogs(); n != 0 {
			t.Errorf("%d watchdog goroutines before any loop started", n)
		}
		runOn(t, on.Loop(0), func() {})
		runOn(t, on.Loop(1), func() {})
		if n := watchdogs(); n != 1 {
			t.Errorf("%d watchdog goroutines for a started group, want 1", n)
		}
		shutdown(t, on)
		waitFor(t, 5*time.Second, "the watchdog to end with its group", func() bool { return watchdogs() == 0 })
	})
	if _, err := loop.NewGroup(loop.WithBlockedThreshold(-time.Millisecond)); !errors.Is(err, loop.ErrInvalidOption) {
		t.Errorf("NewGroup(WithBlockedThreshold(-1ms)) = %v, want an invalid option error", err)
	}
}
