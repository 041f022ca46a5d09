package loop_test

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// TestIORatio floods a loop with tasks while a receive completes on every
// poll, on an injected clock: each task advances it 100 ns and each
// completion 1 ms, so the measured task time / I/O time (Stats.TaskNanos /
// Stats.IONanos) must follow (100-ioRatio)/ioRatio.
func TestIORatio(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		for _, ratio := range []int{25, 50, 75} {
			t.Run("ratio="+itoa(ratio), func(t *testing.T) {
				clk := sched.NewManualClock(int64(time.Hour))
				g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk), loop.WithIORatio(ratio))
				l := g.Loop(0)
				a, peer := testutil.SocketPair(t)
				blob := make([]byte, 64<<10)
				if _, err := unix.Write(peer, blob); err != nil {
					t.Fatal(err)
				}
				var stop atomic.Bool
				var recvs atomic.Int64
				buf := make([]byte, 16)
				var recv loop.Completer
				recv = completerFunc(func(c *loop.Completion) {
					clk.Advance(time.Millisecond)
					recvs.Add(1)
					if c.Res > 0 && !stop.Load() {
						if _, err := l.IO().Recv(a, buf, 0, recv); err != nil {
							t.Error(err)
						}
					}
				})
				var task func()
				task = func() {
					clk.Advance(100 * time.Nanosecond)
					if !stop.Load() {
						l.Execute(task)
					}
				}
				var s0 loop.Stats
				runOn(t, l, func() {
					for i := 0; i < 10000; i++ {
						l.Execute(task)
					}
					if _, err := l.IO().Recv(a, buf, 0, recv); err != nil {
						t.Error(err)
					}
					s0 = l.Stats()
				})
				waitFor(t, 20*time.Second, "I/O", func() bool { return recvs.Load() >= 100 })
				s1 := l.Stats()
				stop.Store(true)
				io, task2 := float64(s1.IONanos-s0.IONanos), float64(s1.TaskNanos-s0.TaskNanos)
				got, want := task2/io, float64(100-ratio)/float64(ratio)
				t.Logf("ioRatio %d: task/io = %.3f (want %.3f), %d completions, %d tasks, %d turns",
					ratio, got, want, s1.Completions-s0.Completions, s1.Tasks-s0.Tasks, s1.Turns-s0.Turns)
				if math.Abs(got-want)/want > 0.20 {
					t.Fatalf("task/io time = %.3f, want %.3f ±20%%", got, want)
				}
			})
		}
	})
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	s := ""
	for ; v > 0; v /= 10 {
		s = string(rune('0'+v%10)) + s
	}
	return s
}

// blockedTurn queues, on a loop held by a blocking task, n counting tasks
// and reports how many of them ran in the blocked task's turn (a tail task
// queued by the blocker runs at the end of that turn).
func blockedTurn(t *testing.T, l *loop.Loop, n int) (inTurn int64, order bool) {
	var ran atomic.Int64
	var last atomic.Int64
	last.Store(-1)
	ordered := atomic.Bool{}
	ordered.Store(true)
	release := make(chan struct{})
	blocked := make(chan struct{})
	turnDone := make(chan int64, 1)
	l.Execute(func() {
		l.ExecuteAfterTurn(func() { turnDone <- ran.Load() })
		close(blocked)
		<-release
	})
	<-blocked
	for i := 0; i < n; i++ {
		i := int64(i)
		if err := l.Execute(func() {
			if last.Load() != i-1 {
				ordered.Store(false)
			}
			last.Store(i)
			ran.Add(1)
		}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	inTurn = <-turnDone
	waitFor(t, 20*time.Second, "all tasks", func() bool { return ran.Load() == int64(n) })
	return inTurn, ordered.Load()
}

func TestOneTurnRuns64TasksAtRatio50(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk))
		inTurn, ordered := blockedTurn(t, g.Loop(0), 10000)
		// The blocker is the first of the turn's 64.
		if inTurn != 63 || !ordered {
			t.Fatalf("one turn ran %d queued tasks after the blocker (want 63: 64 with it); in order %v", inTurn, ordered)
		}
	})
}

func TestIORatio100DrainsAll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1), loop.WithIORatio(100))
		inTurn, ordered := blockedTurn(t, g.Loop(0), 10000)
		if inTurn != 10000 || !ordered {
			t.Fatalf("one turn at ioRatio 100 ran %d of 10000 tasks (in order %v)", inTurn, ordered)
		}
	})
}

// TestIONotStarved: a read completes while a million tasks are queued.
func TestIONotStarved(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		a, peer := testutil.SocketPair(t)
		const n = 1000000
		var ran atomic.Int64
		got := make(chan int, 1)
		buf := make([]byte, 8)
		runOn(t, l, func() {
			if _, err := l.IO().Recv(a, buf, 0, completerFunc(func(c *loop.Completion) {
				got <- l.Stats().PendingTasks
			})); err != nil {
				t.Error(err)
			}
		})
		release := make(chan struct{})
		l.Execute(func() { <-release })
		f := func() { ran.Add(1) }
		for i := 0; i < n; i++ {
			l.Execute(f)
		}
		unix.Write(peer, []byte("ping"))
		close(release)
		pending := <-got
		t.Logf("recv completed with %d tasks still queued", pending)
		if pending == 0 {
			t.Fatal("the read waited for the task queue to drain")
		}
		waitFor(t, 60*time.Second, "the tasks", func() bool { return ran.Load() == n })
	})
}

// At ioRatio 100 with a task queue of one, periodic timers shorter than
// their own run are due again on every pass; the task phase must still end
// and give I/O its turn (it once looped forever, and a Server.Close waiting
// for its accept's cancel hung).
func TestIORatio100TinyPeriodsYieldToIO(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1), loop.WithIORatio(100), loop.WithMaxPendingTasks(1))
		l := g.Loop(0)
		var timers []interface{ Stop() bool }
		runOn(t, l, func() { // on the loop: the one-task queue takes no hand-off
			for range 8 {
				tm, err := l.ScheduleAtFixedRate(time.Nanosecond, time.Nanosecond, func() {})
				if err != nil {
					t.Error(err)
					return
				}
				timers = append(timers, tm)
			}
		})
		defer func() {
			for _, tm := range timers {
				tm.Stop()
			}
		}()
		for i := range 20 {
			done := make(chan int32, 1)
			err := l.Execute(sched.TaskFunc(func() {
				if _, err := l.Nop(completerFunc(func(c *loop.Completion) { done <- c.Res })); err != nil {
					done <- -1
				}
			}))
			if err != nil {
				continue // the one-task queue is full: try again
			}
			select {
			case res := <-done:
				if res != 0 {
					t.Fatalf("nop %d: %d", i, res)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("nop %d never completed: the task phase never gave I/O its turn", i)
			}
		}
	})
}
