package loop_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// TestHugeDelays: delays too long to add to the clock saturate to "never":
// on a clock the test moves a hundred years, a timer of math.MaxInt64 does
// not fire, a fixed-rate timer with such an initial delay does not run,
// and the loop does not spin on them (it sleeps its whole idle wait, as an
// idle loop does).
func TestHugeDelays(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk))
		l := g.Loop(0)
		runOn(t, l, func() {})
		var runs atomic.Int64
		f := func() { runs.Add(1) }
		for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, 200 * 365 * 24 * time.Hour} {
			if _, err := l.Schedule(d, f); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ScheduleAtFixedRate(d, time.Second, f); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ScheduleAtFixedRate(time.Millisecond, d, f); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ScheduleWithFixedDelay(d, d, f); err != nil {
				t.Fatal(err)
			}
		}
		// The fixed-rate timers with a 1 ms first run run once each (3),
		// then wait their huge period.
		advance(t, clk, l, time.Millisecond)
		advance(t, clk, l, 100*365*24*time.Hour)
		if n := runs.Load(); n != 3 {
			t.Fatalf("huge delays: %d runs in 100 years, want 3 (the 1 ms first runs)", n)
		}
		dl := int64(-1)
		for dl == -1 { // -1: it woke up between the two looks
			waitAsleep(t, l)
			dl = l.WaitDeadline()
		}
		if d := time.Duration(dl - clk.Now()); d != sched.IdleWait {
			t.Fatalf("the loop waits %v with only far timers pending, want the idle wait %v", d, sched.IdleWait)
		}
	})
}

// TestScheduleOnLoopNeverRefused: with the task queue full
// (WithMaxPendingTasks), a timer scheduled on the loop itself is still
// accepted and runs (Netty's in-loop schedule never refuses).
func TestScheduleOnLoopNeverRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1), loop.WithMaxPendingTasks(4))
		l := g.Loop(0)
		fired := make(chan struct{})
		var schedErr, fullErr error
		runOn(t, l, func() {
			for range 100 {
				if err := l.Execute(func() {}); err != nil {
					fullErr = err
					break
				}
			}
			_, schedErr = l.Schedule(time.Millisecond, func() { close(fired) })
		})
		if !errors.Is(fullErr, loop.ErrQueueFull) {
			t.Fatalf("the queue never filled: %v", fullErr)
		}
		if schedErr != nil {
			t.Fatalf("Schedule on the loop with its queue full: %v", schedErr)
		}
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatal("the timer never ran")
		}
	})
}

// TestLoopsKeepProcessName: a loop never renames the process (the main
// thread's name, which ps and pidof show), even when its goroutine locks
// the main thread.
func TestLoopsKeepProcessName(t *testing.T) {
	before, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		for range 5 {
			g := newGroup(t, b, loop.WithLoops(4), loop.WithName("renamer"))
			for _, l := range g.Loops() {
				runOn(t, l, func() {})
			}
			g.Shutdown(context.Background())
		}
	})
	after, _ := os.ReadFile("/proc/self/comm")
	if string(after) != string(before) {
		t.Fatalf("the process was renamed from %q to %q", before, after)
	}
}

// TestOptionBounds: a buffer ring too large to allocate is refused up
// front, and WithMaxOps caps the op table exactly (a cap below the table's
// chunk of 256 left no op at all).
func TestOptionBounds(t *testing.T) {
	if _, err := loop.NewGroup(loop.WithBufferRing(32768, 1<<20)); !errors.Is(err, loop.ErrInvalidOption) {
		t.Fatalf("a 32 GiB buffer ring: %v, want ErrInvalidOption", err)
	}
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1), loop.WithMaxOps(3))
		l := g.Loop(0)
		var errs []error
		runOn(t, l, func() {
			var fds [2]int
			if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
				errs = append(errs, err)
				return
			}
			defer unix.Close(fds[0])
			defer unix.Close(fds[1])
			buf := make([]byte, 1)
			started := 0
			var ids []loop.OpID
			for range 5 {
				id, err := l.IO().Recv(fds[0], buf, 0, completerFunc(func(*loop.Completion) {}))
				if err != nil {
					errs = append(errs, err)
					continue
				}
				started++
				ids = append(ids, id)
			}
			for _, id := range ids {
				l.IO().Cancel(id)
			}
			if started == 0 {
				t.Errorf("WithMaxOps(3) allowed no op")
			}
			if started > 3 {
				t.Errorf("WithMaxOps(3) allowed %d ops", started)
			}
		})
		if len(errs) == 0 {
			t.Fatal("no op was refused past the cap")
		}
	})
}

// TestGoexitInTaskTerminatesLoop: runtime.Goexit in a task (t.FailNow in a
// handler does it) no longer leaves a dead loop that looks alive: the loop
// terminates, later Executes are refused, queued work and hooks run, and
// the group's shutdown completes.
func TestGoexitInTaskTerminatesLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(2), loop.WithLogger(slog.New(slog.DiscardHandler)))
		l := g.Loop(0)
		hookRan := make(chan struct{})
		if _, err := l.AddShutdownHook(func() { close(hookRan) }); err != nil {
			t.Fatal(err)
		}
		if err := l.Execute(func() { runtime.Goexit() }); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the loop did not terminate after Goexit")
		}
		select {
		case <-hookRan:
		case <-time.After(time.Second):
			t.Fatal("the shutdown hook did not run")
		}
		if err := l.Execute(func() {}); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("Execute after the loop died: %v, want ErrRejected", err)
		}
		runOn(t, g.Loop(1), func() {}) // the other loop still serves
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Fatalf("Group.Shutdown: %v", err)
		}
	})
}
