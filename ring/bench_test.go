//go:build linux

package ring_test

import (
	"testing"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// nopBatchSize is the number of NOPs submitted and reaped per benchmark op.
const nopBatchSize = 32

// nopImpls are the bindings BenchmarkNop compares; bench_giouring_test.go
// adds giouring under the giouring build tag.
var nopImpls = []struct {
	name string
	fn   func(b *testing.B)
}{
	{"ringloop", benchNopRingloop},
}

// BenchmarkNop measures one batch of 32 NOPs: 32 GetSQE + PrepNop, one
// io_uring_enter that submits them and waits for 32 completions, and a
// batched peek and advance of the 32 CQEs. Both implementations use a
// 32-entry SQ with the default CQ (64) and no setup flags.
func BenchmarkNop(b *testing.B) {
	for _, impl := range nopImpls {
		b.Run("impl="+impl.name, impl.fn)
	}
}

func benchNopRingloop(b *testing.B) {
	testutil.SkipIfNoUring(b)
	r, err := ring.New(nopBatchSize, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var cqes [nopBatchSize]ring.CQE
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		nopBatch(r, cqes[:])
	}
}

// BenchmarkRingNop is one NOP round trip (submit, wait, reap).
func BenchmarkRingNop(b *testing.B) {
	testutil.SkipIfNoUring(b)
	r, err := ring.New(4, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var cqes [1]ring.CQE
	b.ReportAllocs()
	for b.Loop() {
		nopBatch(r, cqes[:])
	}
}
