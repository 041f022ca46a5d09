package loop_test

import (
	"math"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// Quantile returns the upper bound of the bucket holding the q-th
// quantile, ranking by the buckets.
func TestHistogramQuantile(t *testing.T) {
	var h loop.Histogram
	if q := h.Quantile(0.5); q != 0 {
		t.Fatalf("Quantile of an empty histogram = %v", q)
	}
	// 90 durations in [1 µs, 2 µs), 9 in [16.384 ms, 32.768 ms), 1 of
	// an hour.
	h.Counts[1], h.Counts[15], h.Counts[23] = 90, 9, 1
	h.Count = 100
	b := loop.HistogramBounds()
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{math.NaN(), 2 * time.Microsecond},
		{-1, 2 * time.Microsecond},
		{0, 2 * time.Microsecond},
		{0.5, 2 * time.Microsecond},
		{0.9, 2 * time.Microsecond},
		{0.91, b[15]},
		{0.99, b[15]},
		{0.995, math.MaxInt64},
		{1, math.MaxInt64},
		{2, math.MaxInt64},
	} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if b[15] != 32768*time.Microsecond {
		t.Errorf("bound 15 = %v", b[15])
	}
}

// countFrom returns how many durations of h are in buckets whose lower
// bound is at least d.
func countFrom(h loop.Histogram, d time.Duration) uint64 {
	b := loop.HistogramBounds()
	var n uint64
	for i := 1; i < loop.HistogramBuckets; i++ {
		if b[i-1] >= d {
			n += h.Counts[i]
		}
	}
	return n
}

// A task that sleeps 20 ms shows in TaskTime and TurnTime, in a bucket of
// 16 ms or more, and the group's total holds the same.
func TestHistogramTaskTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() { time.Sleep(20 * time.Millisecond) })
		// The task's turn ends after the task signals: wait for its
		// samples.
		waitFor(t, 5*time.Second, "the turn's samples", func() bool {
			s := l.Stats()
			return countFrom(s.TaskTime, 16*time.Millisecond) > 0 && countFrom(s.TurnTime, 16*time.Millisecond) > 0
		})
		s := l.Stats()
		if s.TaskTime.Sum < 20*time.Millisecond || s.TurnTime.Sum < 20*time.Millisecond {
			t.Errorf("sums: TaskTime %v, TurnTime %v; want at least 20ms", s.TaskTime.Sum, s.TurnTime.Sum)
		}
		if q := s.TaskTime.Quantile(1); q < 20*time.Millisecond {
			t.Errorf("TaskTime max bucket bound %v, want at least 20ms", q)
		}
		total := g.Stats().Total
		if countFrom(total.TaskTime, 16*time.Millisecond) == 0 || total.TaskTime.Count < s.TaskTime.Count {
			t.Errorf("group total TaskTime %+v, loop's %+v", total.TaskTime, s.TaskTime)
		}
	})
}

// A task queued while the loop is blocked in another task waits in the
// queue until that task returns: QueueDelay records the wait.
func TestHistogramQueueDelay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {}) // started, and its first samples taken
		started, queued, ran := make(chan struct{}), make(chan struct{}), make(chan struct{})
		if err := l.Execute(func() {
			close(started)
			<-queued
			time.Sleep(30 * time.Millisecond)
		}); err != nil {
			t.Fatal(err)
		}
		<-started
		// Queued while the loop runs the task above, which then holds it
		// for 30 ms more.
		if err := l.Execute(func() { close(ran) }); err != nil {
			t.Fatal(err)
		}
		close(queued)
		<-ran
		waitFor(t, 5*time.Second, "the QueueDelay sample", func() bool {
			return countFrom(l.Stats().QueueDelay, 16*time.Millisecond) > 0
		})
		s := l.Stats().QueueDelay
		if q := s.Quantile(1); q < 30*time.Millisecond {
			t.Errorf("QueueDelay max bucket bound %v, want at least 30ms (%+v)", q, s)
		}
		t.Logf("QueueDelay: %d samples, sum %v", s.Count, s.Sum)
	})
}
