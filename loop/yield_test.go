package loop_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
)

// TestLoopYieldsItsP checks that a loop that is never idle (a task that
// re-queues itself, so every turn polls without waiting) still yields its P
// every 5 ms, and that an idle loop does not yield more often than it wakes
// up. A loop that never yields keeps the Go runtime's sysmon at its 20 µs
// cadence (see yield.go). The busy loop runs on a clock its tasks move, 10
// µs each; the idle one on the real clock, since what it measures is the
// length of the kernel waits.
func TestLoopYieldsItsP(t *testing.T) {
	var yields atomic.Int64
	restore := loop.CountYields(func() { yields.Add(1) })
	defer restore()
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		l := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk)).Next()
		runOn(t, l, func() {})

		// Busy: 200 ms of the loop's clock in back-to-back turns.
		const busyFor, taskTime = 200 * time.Millisecond, 10 * time.Microsecond
		var tasks atomic.Int64
		done := make(chan struct{})
		var spin func()
		begin := clk.Now()
		spin = func() {
			tasks.Add(1)
			clk.Advance(taskTime)
			if clk.Now()-begin < int64(busyFor) {
				l.Execute(spin)
			} else {
				close(done)
			}
		}
		start := yields.Load()
		if err := l.Execute(spin); err != nil {
			t.Fatal(err)
		}
		<-done
		runOn(t, l, func() {}) // the last busy turn has ended
		busy := yields.Load() - start
		t.Logf("busy 200 ms: %d yields over %d tasks", busy, tasks.Load())
		// One yield at the end of the first turn that starts 5 ms after
		// the last one; a turn runs at most 64 tasks (640 µs of this
		// clock), so 35 to 40 yields, give or take the turns at the ends.
		if busy < 34 || busy > 42 {
			t.Errorf("busy loop yielded %d times in 200 ms, want about 40", busy)
		}

		// Idle: no task, no I/O, no timer but the loop's own; it sleeps
		// up to 1 s per wait, so it yields at most once per wakeup.
		l = newGroup(t, b, loop.WithLoops(1)).Next()
		runOn(t, l, func() {})
		waitAsleep(t, l)
		start = yields.Load()
		time.Sleep(300 * time.Millisecond)
		if idle := yields.Load() - start; idle > 2 {
			t.Errorf("idle loop yielded %d times in 300 ms, want at most 2", idle)
		}
	})
}

// TestSharedLoopYieldsAfterBurst checks that a shared-thread loop whose
// turn delivered more completions than a P's local run queue holds yields
// before its next turn, letting go of its thread for the yield (no goroutine
// counts as the loop's meanwhile), and that a smaller turn does not. A
// locked loop never yields for that. The clock stands still, so the
// every-5-ms yield never comes into it.
func TestSharedLoopYieldsAfterBurst(t *testing.T) {
	var yields atomic.Int64
	var claimed atomic.Pointer[loop.Loop]
	restore := loop.CountYields(func() {
		yields.Add(1)
		claimed.Store(loop.Current())
	})
	defer restore()
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		for _, shared := range []bool{true, false} {
			clk := sched.NewManualClock(int64(time.Hour))
			l := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk), loop.WithSharedThread(shared)).Next()
			// settle returns once the loop's current turn has ended: the
			// poll that delivers a completion started in it comes after.
			settle := func() {
				next := make(chan struct{})
				runOn(t, l, func() {
					if _, err := l.Nop(completerFunc(func(*loop.Completion) { close(next) })); err != nil {
						t.Error(err)
						close(next)
					}
				})
				<-next
			}
			// Past the first turn's every-5-ms yield (its last yield is
			// at time 0).
			settle()
			for _, n := range []int{100, 600} {
				var done sync.WaitGroup
				done.Add(n)
				nop := completerFunc(func(*loop.Completion) { done.Done() })
				claimed.Store(l)
				start := yields.Load()
				runOn(t, l, func() {
					for range n {
						if _, err := l.Nop(nop); err != nil {
							t.Error(err)
							done.Done()
						}
					}
				})
				done.Wait()
				settle() // past the turn that delivered them (and yielded)
				got := yields.Load() - start
				switch {
				case shared && n > 256 && (got == 0 || claimed.Load() != nil):
					t.Errorf("%v, shared, %d completions in a turn: %d yields, loop during the yield %p (want at least one, without the thread)", b, n, got, claimed.Load())
				case (!shared || n <= 256) && got != 0:
					t.Errorf("%v, shared %v, %d completions in a turn: %d yields, want none", b, shared, n, got)
				}
			}
		}
	})
}
