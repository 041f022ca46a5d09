package loop_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// TestLoopYieldsItsP checks that a loop that is never idle (a task that
// re-queues itself, so every turn polls without waiting) still yields its P
// about every 5 ms, and that an idle loop does not yield more often than it
// wakes up. A loop that never yields keeps the Go runtime's sysmon at its
// 20 µs cadence (see yield.go).
func TestLoopYieldsItsP(t *testing.T) {
	var yields atomic.Int64
	restore := loop.CountYields(func() { yields.Add(1) })
	defer restore()
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Next()

		// Busy: 200 ms of back-to-back turns.
		var stop atomic.Bool
		var tasks atomic.Int64
		var spin func()
		spin = func() {
			tasks.Add(1)
			if !stop.Load() {
				l.Execute(spin)
			}
		}
		start := yields.Load()
		if err := l.Execute(spin); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		stop.Store(true)
		busy := yields.Load() - start
		t.Logf("busy 200 ms: %d yields over %d tasks", busy, tasks.Load())
		// About 40 at one per 5 ms; a loaded machine takes the loop's
		// thread away for whole time slices (9 were seen while other
		// test binaries ran on both cores), so the bound only tells a
		// loop that yields from one that never does.
		if busy < 3 || busy > 80 {
			t.Errorf("busy loop yielded %d times in 200 ms, want about 40", busy)
		}

		// Idle: no task, no I/O, no timer but the loop's own; it sleeps
		// up to 1 s per wait, so it yields at most once per wakeup.
		time.Sleep(50 * time.Millisecond)
		start = yields.Load()
		time.Sleep(300 * time.Millisecond)
		if idle := yields.Load() - start; idle > 2 {
			t.Errorf("idle loop yielded %d times in 300 ms, want at most 2", idle)
		}
	})
}
