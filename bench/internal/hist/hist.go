// Package hist is a log-linear latency histogram in the style of
// HdrHistogram: values below 2^subBits are counted exactly, larger values in
// buckets whose width is 1/2^subBits of their power of two, so every recorded
// value is kept with a relative error under 1/128 (0.8 %). Recording is one
// bit-length computation and one increment, with no allocation; the counts
// live in a fixed array so a histogram can be reset, merged and copied by
// value.
package hist

import (
	"math"
	"math/bits"
)

const (
	subBits  = 7
	subCount = 1 << subBits // exact values 0..127, then 128 buckets per power of two
	maxShift = 40           // 2^(40+8) ns ≈ 78 hours: anything larger is clamped
	nBuckets = (maxShift + 2) * subCount
)

// Hist counts values (nanoseconds, by convention). The zero value is ready.
type Hist struct {
	counts [nBuckets]uint64
	n      uint64
	sum    uint64
	max    uint64
}

func index(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // v>>shift is in [128, 256)
	if shift > maxShift {
		return nBuckets - 1
	}
	return (shift+1)*subCount + int(v>>uint(shift)) - subCount
}

// lowest returns the smallest value that maps to bucket i.
func lowest(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i/subCount - 1
	return uint64(i%subCount+subCount) << uint(shift)
}

// highest returns the largest value that maps to bucket i.
func highest(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i/subCount - 1
	return lowest(i) + (uint64(1) << uint(shift)) - 1
}

// Record counts one value.
func (h *Hist) Record(v uint64) {
	h.counts[index(v)]++
	h.n++
	h.sum += v
	if v > h.max {
		h.max = v
	}
}

// Reset forgets every value.
func (h *Hist) Reset() { *h = Hist{} }

// Merge adds o's counts to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of recorded values.
func (h *Hist) Count() uint64 { return h.n }

// Max is the largest recorded value.
func (h *Hist) Max() uint64 { return h.max }

// Mean is the arithmetic mean of the recorded values (0 when empty).
func (h *Hist) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return float64(h.sum) / float64(h.n)
}

// Quantile returns the value at quantile q (0 < q ≤ 1): the upper edge of
// the bucket holding the ceil(q·n)-th smallest value, never above Max.
func (h *Hist) Quantile(q float64) uint64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := highest(i)
			if v > h.max {
				v = h.max
			}
			return v
		}
	}
	return h.max
}
