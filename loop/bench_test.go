package loop_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

func benchBackends(b *testing.B, f func(b *testing.B, be loop.Backend)) {
	for _, be := range backends {
		b.Run("backend="+be.String(), func(b *testing.B) {
			if be == loop.BackendUring {
				testutil.SkipIfNoUring(b)
			}
			f(b, be)
		})
	}
}

// BenchmarkExecute: tasks queued by 1 or 4 producer goroutines on one loop,
// until every one ran.
func BenchmarkExecute(b *testing.B) {
	benchBackends(b, func(b *testing.B, be loop.Backend) {
		for _, producers := range []int{1, 4} {
			b.Run("producers="+itoa(producers), func(b *testing.B) {
				g := newGroup(b, be, loop.WithLoops(1))
				l := g.Loop(0)
				runOn(b, l, func() {})
				var ran atomic.Int64
				task := func() { ran.Add(1) }
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				per := b.N / producers
				for p := 0; p < producers; p++ {
					n := per
					if p == 0 {
						n += b.N % producers
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < n; i++ {
							for l.Execute(task) != nil {
								runtime.Gosched() // full
							}
						}
					}()
				}
				wg.Wait()
				for ran.Load() != int64(b.N) {
					runtime.Gosched() // let the loop have the P
				}
				b.StopTimer()
				s := l.Stats()
				b.ReportMetric(float64(s.WakeWrites)/float64(b.N), "wakes/op")
			})
		}
	})
}

// BenchmarkWakeup: one Execute from outside on an idle (waiting) loop, until
// the task ran: the wakeup round trip.
func BenchmarkWakeup(b *testing.B) {
	benchBackends(b, func(b *testing.B, be loop.Backend) {
		g := newGroup(b, be, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(b, l, func() {})
		ch := make(chan struct{}, 1)
		task := func() { ch <- struct{}{} }
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for !l.Waiting() {
				runtime.Gosched()
			}
			l.Execute(task)
			<-ch
		}
	})
}

// nopChain submits a NOP from its own completion until n completed.
type nopChain struct {
	l    *loop.Loop
	left int
	done chan struct{}
}

func (c *nopChain) Complete(*loop.Completion) {
	if c.left--; c.left <= 0 {
		close(c.done)
		return
	}
	if _, err := c.l.Nop(c); err != nil {
		panic(err)
	}
}

// BenchmarkOp: a NOP submitted and completed through the op table and the
// backend, on the loop (0 allocs/op).
func BenchmarkOp(b *testing.B) {
	benchBackends(b, func(b *testing.B, be loop.Backend) {
		g := newGroup(b, be, loop.WithLoops(1))
		l := g.Loop(0)
		warm := &nopChain{l: l, left: 1000, done: make(chan struct{})}
		runOn(b, l, func() { l.Nop(warm) })
		<-warm.done
		c := &nopChain{l: l, left: b.N, done: make(chan struct{})}
		b.ReportAllocs()
		b.ResetTimer()
		runOn(b, l, func() { l.Nop(c) })
		<-c.done
	})
}

// nopSink ignores completions.
type nopSink struct{}

func (nopSink) Complete(*loop.Completion) {}

// TestOpNoAllocs asserts the steady-state op round trip allocates nothing.
func TestOpNoAllocs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be loop.Backend) {
		g := newGroup(t, be, loop.WithLoops(1))
		l := g.Loop(0)
		warm := &nopChain{l: l, left: 1000, done: make(chan struct{})}
		runOn(t, l, func() { l.Nop(warm) })
		<-warm.done
		var allocs float64
		runOn(t, l, func() {
			c := nopSink{}
			allocs = testing.AllocsPerRun(1000, func() {
				id, err := l.Nop(c)
				if err != nil {
					t.Error(err)
				}
				l.IO().Cancel(id)
			})
		})
		if allocs != 0 {
			t.Fatalf("Nop submission allocates %v times", allocs)
		}
	})
}

// BenchmarkHandOff: a task on the loop readies a goroutine (a channel
// send), which then queues the next task: the round trip between a loop
// and a goroutine it wakes, with and without HandOffNextWait. With the
// kernel wait and every P held by the loop (-cpu 1) the goroutine otherwise
// waits for the runtime to retake the P.
func BenchmarkHandOff(b *testing.B) {
	benchBackends(b, func(b *testing.B, be loop.Backend) {
		for _, handOff := range []bool{false, true} {
			b.Run(fmt.Sprintf("handoff=%v", handOff), func(b *testing.B) {
				g := newGroup(b, be, loop.WithLoops(1))
				l := g.Loop(0)
				runOn(b, l, func() {})
				ch := make(chan struct{}, 1)
				task := func() {
					ch <- struct{}{}
					if handOff {
						l.HandOffNextWait()
					}
				}
				b.ResetTimer()
				for range b.N {
					if err := l.Execute(task); err != nil {
						b.Fatal(err)
					}
					<-ch
				}
			})
		}
	})
}

// BenchmarkCurrent measures Current while a loop is busy running a task
// (so the shortcut for every loop asleep does not apply): called off every
// loop (gettid and a missed lookup) and on the loop itself (gettid, the
// lookup and the second gettid that confirms it).
func BenchmarkCurrent(b *testing.B) {
	g := newGroup(b, loop.BackendEpoll, loop.WithLoops(2), loop.WithSharedThread(false))
	b.Run("off-loop", func(b *testing.B) {
		var stop atomic.Bool
		busy := make(chan struct{})
		if err := g.Loop(0).Execute(func() {
			close(busy)
			for !stop.Load() {
				runtime.Gosched()
			}
		}); err != nil {
			b.Fatal(err)
		}
		<-busy
		defer stop.Store(true)
		b.ResetTimer()
		for b.Loop() {
			if loop.Current() != nil {
				b.Fatal("Current off every loop named a loop")
			}
		}
	})
	b.Run("on-loop", func(b *testing.B) {
		l := g.Loop(1)
		runOn(b, l, func() {
			for b.Loop() {
				if loop.Current() != l {
					b.Fatal("Current on the loop did not name it")
				}
			}
		})
	})
}
