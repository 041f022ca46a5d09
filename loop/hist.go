package loop

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// HistogramBuckets is the number of buckets of a Histogram.
const HistogramBuckets = 24

// A Histogram is a distribution of durations over fixed power-of-two
// buckets: bucket 0 counts durations under 1 µs, bucket i (0 < i < 23)
// those from 2^(i-1) µs up to, not including, 2^i µs, and the last bucket,
// 23, those of 2^22 µs (about 4.19 s) and more. HistogramBounds returns the
// upper bounds. The buckets are the same for every histogram, so histograms
// add up bucket by bucket (GroupStats.Total sums those of its loops).
//
// A loop fills its histograms (Stats.TurnTime, IOTime, TaskTime,
// QueueDelay) on its goroutine, with a few atomic additions and no
// allocation per observation; Stats copies them. A copy taken while the
// loop runs is not atomic as a whole: Count, Sum and the buckets may
// disagree by the observation being made (Count never exceeds the sum of
// Counts).
type Histogram struct {
	// Counts[i] is the number of durations in bucket i (not cumulative).
	Counts [HistogramBuckets]uint64
	// Count is the number of durations observed.
	Count uint64
	// Sum is their total.
	Sum time.Duration
}

// histogramBounds are the buckets' upper bounds (exclusive); the last
// bucket has none.
var histogramBounds = func() (b [HistogramBuckets]time.Duration) {
	for i := range HistogramBuckets - 1 {
		b[i] = time.Microsecond << i
	}
	b[HistogramBuckets-1] = math.MaxInt64
	return b
}()

// HistogramBounds returns the upper bound (exclusive) of each bucket of a
// Histogram: 1 µs, 2 µs, 4 µs, … 2^22 µs (about 4.19 s), and
// math.MaxInt64 for the last bucket, which has no bound. Bucket i holds
// the durations from bound i-1 (0 for bucket 0) up to bound i. Safe for
// concurrent use.
func HistogramBounds() [HistogramBuckets]time.Duration { return histogramBounds }

// Quantile returns the upper bound of the bucket that holds the q-th
// quantile of the durations counted (q in [0, 1]; 0.5 is the median, 0.99
// the 99th percentile): the true value is below it and, for a bucket past
// the first, at least half of it. It returns math.MaxInt64 when that
// bucket is the last (2^22 µs and more), and 0 for an empty histogram. It
// ranks by Counts, not Count, so a copy taken while the loop runs is still
// consistent.
func (h *Histogram) Quantile(q float64) time.Duration {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	if !(q > 0) { // also NaN
		q = 0
	}
	rank := uint64(math.Ceil(min(q, 1) * float64(n)))
	rank = max(rank, 1)
	var cum uint64
	for i, c := range h.Counts {
		cum += c
		if cum >= rank {
			return histogramBounds[i]
		}
	}
	return histogramBounds[HistogramBuckets-1]
}

// add adds o's counts into h.
func (h *Histogram) add(o *Histogram) {
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

// histogramBucket returns the bucket of a duration of d nanoseconds: the
// bit length of its whole microseconds (0 µs → 0, 1 µs → 1, 2–3 µs → 2,
// …), capped at the last bucket.
func histogramBucket(d int64) int {
	if d <= 0 {
		return 0
	}
	return min(bits.Len64(uint64(d)/1000), HistogramBuckets-1)
}

// histogram is the live form of a Histogram: one writer, the loop
// goroutine; readers anywhere.
type histogram struct {
	counts [HistogramBuckets]atomic.Uint64
	count  atomic.Uint64
	sum    atomic.Int64
}

// observe counts a duration of d nanoseconds (a negative one as 0). It
// allocates nothing and reads no clock. Loop goroutine only.
func (h *histogram) observe(d int64) {
	d = max(d, 0)
	h.counts[histogramBucket(d)].Add(1)
	h.sum.Add(d)
	h.count.Add(1)
}

// snapshot copies h into out: Count first, then the buckets, so that a
// copy taken during an observation never counts more than its buckets
// hold.
func (h *histogram) snapshot(out *Histogram) {
	out.Count = h.count.Load()
	out.Sum = time.Duration(h.sum.Load())
	for i := range h.counts {
		out.Counts[i] = h.counts[i].Load()
	}
}
