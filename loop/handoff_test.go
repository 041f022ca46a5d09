package loop_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// A loop asked to hand its P off before each wait keeps running tasks and
// waking on time, with one P and with more, whether the request comes from
// the loop or from another goroutine.
func TestHandOffNextWait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be loop.Backend) {
		for _, procs := range []int{1, 2} {
			prev := runtime.GOMAXPROCS(procs)
			t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
			g := newGroup(t, be, loop.WithLoops(1))
			l := g.Loop(0)
			l.HandOffNextWait() // off the loop: applies to the next wait, harmlessly
			ch := make(chan struct{}, 1)
			task := func() {
				ch <- struct{}{}
				l.HandOffNextWait()
			}
			deadline := time.After(20 * time.Second)
			for i := range 2000 {
				if err := l.Execute(task); err != nil {
					t.Fatal(err)
				}
				select {
				case <-ch:
				case <-deadline:
					t.Fatalf("GOMAXPROCS=%d: round trip %d did not complete", procs, i)
				}
			}
			// A timer still fires while the loop hands its P off.
			fired := make(chan struct{})
			if _, err := l.Schedule(5*time.Millisecond, func() { l.HandOffNextWait(); close(fired) }); err != nil {
				t.Fatal(err)
			}
			select {
			case <-fired:
			case <-time.After(5 * time.Second):
				t.Fatal("the timer did not fire")
			}
		}
	})
}
