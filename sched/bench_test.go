package sched

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// BenchmarkQueue compares the MPSC queue with a buffered channel on the same
// workload: producers push b.N tasks in total through a buffer of
// benchBuffer tasks, one consumer runs them all. Both sides use non-blocking
// operations and yield when the buffer is full or empty, so the figures
// compare the queues, not parking against spinning.
func BenchmarkQueue(b *testing.B) {
	for _, producers := range []int{1, 4} {
		b.Run(fmt.Sprintf("impl=sched/producers=%d", producers), func(b *testing.B) {
			benchQueueSched(b, producers)
		})
		b.Run(fmt.Sprintf("impl=chan/producers=%d", producers), func(b *testing.B) {
			benchQueueChan(b, producers)
		})
	}
}

// share returns producer p's part of n tasks.
func share(n, producers, p int) int {
	k := n / producers
	if p == 0 {
		k += n % producers
	}
	return k
}

// benchBuffer is the capacity of both queues in BenchmarkQueue: the
// channel's buffer and the sched queue's bound. Both sides wait the same way:
// a producer finding the queue full, and the consumer finding it empty,
// yield with runtime.Gosched and try again; neither ever parks.
const benchBuffer = 1024

func benchQueueSched(b *testing.B, producers int) {
	b.ReportAllocs()
	q := NewQueue(benchBuffer)
	count := 0
	task := TaskFunc(func() { count++ })
	run := func(t Task) { t.Run() }
	var wg sync.WaitGroup
	b.ResetTimer()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range share(b.N, producers, p) {
				for q.Push(task) != nil {
					runtime.Gosched() // full
				}
			}
		}()
	}
	for count < b.N {
		if q.Drain(0, run) == 0 {
			runtime.Gosched() // empty
		}
	}
	wg.Wait()
}

func benchQueueChan(b *testing.B, producers int) {
	b.ReportAllocs()
	ch := make(chan func(), benchBuffer)
	count := 0
	task := func() { count++ }
	var wg sync.WaitGroup
	b.ResetTimer()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range share(b.N, producers, p) {
				for sent := false; !sent; {
					select {
					case ch <- task:
						sent = true
					default:
						runtime.Gosched() // full
					}
				}
			}
		}()
	}
	for count < b.N {
		// Like Drain(0): take everything queued, then yield if there was
		// nothing.
		n := 0
	drain:
		for {
			select {
			case f := <-ch:
				f()
				n++
			default:
				break drain
			}
		}
		if n == 0 {
			runtime.Gosched() // empty
		}
	}
	wg.Wait()
}

// BenchmarkTimer compares adding and cancelling a timer on the wheel with
// time.AfterFunc and Stop. Deadlines cycle over 1 ms to 17 min so every
// level of the wheel is used.
func BenchmarkTimer(b *testing.B) {
	fn := func() {}
	b.Run("impl=wheel", func(b *testing.B) {
		b.ReportAllocs()
		clock := NewManualClock(0)
		w, err := NewWheel(WheelConfig{Clock: clock})
		if err != nil {
			b.Fatal(err)
		}
		for i := range b.N {
			t, _ := w.NewTimer(benchDelay(i), fn)
			_ = w.Add(t)
			w.Stop(t)
		}
	})
	b.Run("impl=runtime", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			time.AfterFunc(time.Duration(benchDelay(i)), fn).Stop()
		}
	})
}

// benchDelay spreads deadlines over 1 ms .. ~17 min (a prime stride, masked
// rather than divided so the benchmark loop itself stays cheap).
func benchDelay(i int) int64 {
	return int64(time.Millisecond) * (1 + int64(i*7919)&(1<<20-1))
}

// BenchmarkWheelAdvance measures delivering and running one-shot timers: one
// timer per tick, advanced one tick at a time.
func BenchmarkWheelAdvance(b *testing.B) {
	b.ReportAllocs()
	clock := NewManualClock(0)
	w, _ := NewWheel(WheelConfig{Clock: clock})
	fn := func() {}
	run := func(t *Timer) bool { t.Run(); return true }
	const ahead = 4096 // timers kept pending, over four levels
	for i := range ahead {
		t, _ := w.NewTimer(int64(i+1)*int64(time.Millisecond), fn)
		_ = w.Add(t)
	}
	b.ResetTimer()
	for i := range b.N {
		t, _ := w.NewTimer(int64(i+ahead+1)*int64(time.Millisecond), fn)
		_ = w.Add(t)
		w.Advance(clock.Advance(time.Millisecond), run)
	}
}

// BenchmarkTimerMemory reports the heap held per pending timer with a
// million one-shot timers in a wheel; their function captures nothing, so
// the figure is the timer and the wheel's share alone.
func BenchmarkTimerMemory(b *testing.B) {
	for range b.N {
		b.ReportMetric(bytesPerTimer(b, 1_000_000), "B/timer")
	}
}

// bytesPerTimer returns the heap growth per timer after n timers, spread over
// every level, are added to a new wheel.
func bytesPerTimer(tb testing.TB, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w, err := NewWheel(WheelConfig{Clock: NewManualClock(0)})
	if err != nil {
		tb.Fatal(err)
	}
	fn := func() {}
	for i := range n {
		t, _ := w.NewTimer(benchDelay(i), fn)
		if err := w.Add(t); err != nil {
			tb.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if w.Len() != n {
		tb.Fatalf("wheel holds %d timers, want %d", w.Len(), n)
	}
	runtime.KeepAlive(w)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}
