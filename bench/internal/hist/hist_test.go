package hist

import (
	"math/rand"
	"sort"
	"testing"
)

func TestBucketEdges(t *testing.T) {
	for i := 0; i < nBuckets-1; i++ {
		if index(lowest(i)) != i || index(highest(i)) != i {
			t.Fatalf("bucket %d: lowest %d → %d, highest %d → %d", i, lowest(i), index(lowest(i)), highest(i), index(highest(i)))
		}
		if highest(i)+1 != lowest(i+1) {
			t.Fatalf("gap after bucket %d", i)
		}
	}
}

func TestQuantileAccuracy(t *testing.T) {
	var h Hist
	r := rand.New(rand.NewSource(1))
	vals := make([]uint64, 100000)
	for i := range vals {
		vals[i] = uint64(r.ExpFloat64() * 50000)
		h.Record(vals[i])
	}
	sort.Slice(vals, func(a, b int) bool { return vals[a] < vals[b] })
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if got < want || float64(got-want) > float64(want)/100+1 {
			t.Errorf("q%.3f: got %d want %d", q, got, want)
		}
	}
	if h.Count() != uint64(len(vals)) || h.Max() != vals[len(vals)-1] {
		t.Errorf("count %d max %d", h.Count(), h.Max())
	}
}

func TestRecordAllocs(t *testing.T) {
	var h Hist
	if n := testing.AllocsPerRun(1000, func() { h.Record(123456) }); n != 0 {
		t.Fatalf("Record allocates %v", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Hist
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		h.Record(uint64(i) * 977)
	}
}
