package loop_test

import (
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// TestCurrent checks that Current names the calling loop from its tasks and
// timers while the group's other loops sleep in their waits, and nil off
// every loop, on locked and shared threads: Current answers without a system call
// while every loop of the process sleeps, and that shortcut must never hide
// a loop that is running.
func TestCurrent(t *testing.T) {
	modes := []struct {
		name string
		opts []loop.Option
	}{
		{"locked", []loop.Option{loop.WithSharedThread(false)}},
		{"shared", []loop.Option{loop.WithSharedThread(true)}},
	}
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		for _, m := range modes {
			t.Run(m.name, func(t *testing.T) {
				g := newGroup(t, b, append([]loop.Option{loop.WithLoops(2)}, m.opts...)...)
				for round := 0; round < 20; round++ {
					// Let both loops fall asleep, so the shortcut applies
					// off the loops.
					for _, l := range g.Loops() {
						if l.State() == loop.StateStarted {
							waitAsleep(t, l)
						}
					}
					if l := loop.Current(); l != nil {
						t.Fatalf("round %d: Current off every loop = %v", round, l)
					}
					for i := 0; i < 2; i++ {
						l := g.Loop(i)
						got := make(chan *loop.Loop, 2)
						if err := l.Execute(func() { got <- loop.Current() }); err != nil {
							t.Fatal(err)
						}
						if _, err := l.Schedule(time.Microsecond, func() { got <- loop.Current() }); err != nil {
							t.Fatal(err)
						}
						for k := 0; k < 2; k++ {
							select {
							case c := <-got:
								if c != l {
									t.Fatalf("round %d: Current on loop %d = %v", round, i, c)
								}
							case <-time.After(5 * time.Second):
								t.Fatal("task did not run")
							}
						}
					}
				}
			})
		}
	})
}
