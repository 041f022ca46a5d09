package loop

import (
	"math"
	"testing"
	"time"
)

// Bucket i of a Histogram holds durations below 2^i µs and, past bucket
// 0, at least 2^(i-1) µs; the last bucket holds everything from 2^22 µs.
func TestHistogramBucket(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 0},
		{0, 0},
		{999 * time.Nanosecond, 0},
		{time.Microsecond, 1},
		{2*time.Microsecond - 1, 1},
		{2 * time.Microsecond, 2},
		{3 * time.Microsecond, 2},
		{4 * time.Microsecond, 3},
		{time.Millisecond, 10}, // 1000 µs: 512 ≤ 1000 < 1024
		{16384*time.Microsecond - 1, 14},
		{16384 * time.Microsecond, 15},
		{20 * time.Millisecond, 15},
		{time.Second, 20}, // 2^19 µs ≤ 1 s < 2^20 µs
		{(1<<22)*time.Microsecond - 1, 22},
		{(1 << 22) * time.Microsecond, 23},
		{time.Hour, 23},
		{math.MaxInt64, 23},
	} {
		if got := histogramBucket(int64(c.d)); got != c.want {
			t.Errorf("bucket of %v = %d, want %d", c.d, got, c.want)
		}
	}
	// Every bucket's bounds agree with HistogramBounds.
	b := HistogramBounds()
	for i := range HistogramBuckets - 1 {
		if got := histogramBucket(int64(b[i]) - 1); got != i {
			t.Errorf("bucket of bound %d minus 1ns (%v) = %d", i, b[i]-1, got)
		}
		if got := histogramBucket(int64(b[i])); got != i+1 {
			t.Errorf("bucket of bound %d (%v) = %d, want %d", i, b[i], got, i+1)
		}
	}
	if b[0] != time.Microsecond || b[22] != 4194304*time.Microsecond || b[23] != math.MaxInt64 {
		t.Errorf("bounds %v", b)
	}
}

// observe fills the buckets, Count and Sum, and allocates nothing.
func TestHistogramObserve(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{500 * time.Nanosecond, 3 * time.Microsecond, 3 * time.Microsecond, 20 * time.Millisecond, -5} {
		h.observe(int64(d))
	}
	var s Histogram
	h.snapshot(&s)
	want := Histogram{Count: 5, Sum: 500*time.Nanosecond + 6*time.Microsecond + 20*time.Millisecond}
	want.Counts[0], want.Counts[2], want.Counts[15] = 2, 2, 1
	if s != want {
		t.Fatalf("snapshot %+v, want %+v", s, want)
	}
	if n := testing.AllocsPerRun(1000, func() { h.observe(12345) }); n != 0 {
		t.Fatalf("observe allocates %v times", n)
	}
}

// Stats.add sums histograms bucket by bucket, as it sums counters.
func TestStatsAddSumsHistograms(t *testing.T) {
	var a, b Stats
	a.Turns, b.Turns = 1, 2
	a.TaskTime.Counts[3], b.TaskTime.Counts[3], b.TaskTime.Counts[7] = 1, 2, 4
	a.TaskTime.Count, b.TaskTime.Count = 1, 6
	a.TaskTime.Sum, b.TaskTime.Sum = time.Second, 2*time.Second
	b.QueueDelay.Counts[0], b.QueueDelay.Count = 9, 9
	var total Stats
	total.add(&a)
	total.add(&b)
	if total.Turns != 3 {
		t.Errorf("Turns %d", total.Turns)
	}
	tt := total.TaskTime
	if tt.Counts[3] != 3 || tt.Counts[7] != 4 || tt.Count != 7 || tt.Sum != 3*time.Second {
		t.Errorf("TaskTime %+v", tt)
	}
	if total.QueueDelay.Counts[0] != 9 || total.QueueDelay.Count != 9 {
		t.Errorf("QueueDelay %+v", total.QueueDelay)
	}
}

// queueWait takes the longest wait the phase's clock readings bound: a
// batch queued before the phase waited until its start, one queued during
// it at most until its end.
func TestQueueWait(t *testing.T) {
	for _, c := range []struct {
		name                 string
		start, end           int64
		n                    int
		first, second, wantW int64
	}{
		{"one batch queued before", 100, 200, 1, 40, 0, 60},
		{"one batch queued during", 100, 200, 1, 150, 0, 50},
		{"second batch waited longer", 100, 200, 2, 95, 110, 90},
		{"first batch waited longer", 100, 200, 3, 10, 190, 90},
		{"clock behind the stamp", 100, 100, 1, 120, 0, 0},
	} {
		if got := queueWait(c.start, c.end, c.n, c.first, c.second); got != c.wantW {
			t.Errorf("%s: queueWait = %d, want %d", c.name, got, c.wantW)
		}
	}
}
