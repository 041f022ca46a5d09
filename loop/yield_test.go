package loop_test

import (
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
