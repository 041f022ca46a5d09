package loop_test

import (
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Idle is false before the loop starts and while it runs a task, seen from the task and from
// another goroutine, and true once the loop waits with nothing to do, on
// both backends and in both thread modes.
func TestLoopIdle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be loop.Backend) {
		for _, shared := range []bool{false, true} {
			g := newGroup(t, be, loop.WithLoops(1), loop.WithSharedThread(shared))
			l := g.Loop(0)
			if l.Idle() {
				t.Errorf("shared=%v: Idle before the loop started = true", shared)
			}
			if err := l.Execute(func() {}); err != nil { // starts it
				t.Fatal(err)
			}
			testutil.WaitFor(t, 10*time.Second, "the loop to wait", l.Idle)
			inTask := make(chan bool, 1)
			release := make(chan struct{})
			if err := l.Execute(func() { inTask <- l.Idle(); <-release }); err != nil {
				t.Fatal(err)
			}
			if <-inTask {
				t.Errorf("shared=%v: Idle in a task on the loop = true", shared)
			}
			if l.Idle() {
				t.Errorf("shared=%v: Idle while a task runs = true", shared)
			}
			close(release)
			testutil.WaitFor(t, 10*time.Second, "the loop to wait again", l.Idle)
		}
	})
}
