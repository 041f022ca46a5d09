package loop_test

import (
	"sync"
	"sync/atomic"
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

// TestCurrentOffLoopWhileLoopsStart checks that Current never names a loop
// to a goroutine that is not that loop's while loops start and end around
// it. A caller reads its thread id, and the Go scheduler may move it to
// another thread before it looks the id up; a loop starting meanwhile on
// the thread it left (the thread is free, and the goroutine that starts a
// loop hands its own thread to the new loop goroutine as it waits for the
// start) would answer the lookup. Probes call Current in a tight loop,
// so the scheduler preempts them at arbitrary points, while starters start
// and shut down single-loop groups; every answer must be nil.
func TestCurrentOffLoopWhileLoopsStart(t *testing.T) {
	starts := 120
	if testing.Short() {
		starts = 60
	}
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		const starters, probes = 2, 4
		var (
			stop     atomic.Bool
			wrong    atomic.Int64
			firstBad atomic.Pointer[loop.Loop]
			pwg, swg sync.WaitGroup
		)
		for range probes {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				for !stop.Load() {
					if l := loop.Current(); l != nil {
						wrong.Add(1)
						firstBad.CompareAndSwap(nil, l)
						stop.Store(true)
					}
				}
			}()
		}
		for range starters {
			swg.Add(1)
			go func() {
				defer swg.Done()
				for i := 0; i < starts/starters && !stop.Load(); i++ {
					g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLogger(quietLogger),
						loop.WithLoops(1), loop.WithSharedThread(false))
					if err != nil {
						t.Errorf("NewGroup: %v", err)
						stop.Store(true)
						return
					}
					ran := make(chan struct{})
					if err := g.Loop(0).Execute(func() { close(ran) }); err != nil {
						t.Errorf("Execute: %v", err)
					} else {
						<-ran
					}
					shutdown(t, g)
				}
			}()
		}
		swg.Wait()
		stop.Store(true)
		pwg.Wait()
		if n := wrong.Load(); n > 0 {
			t.Errorf("Current named a loop to a goroutine off every loop %d times (first: %v)", n, firstBad.Load())
		}
	})
}
