//go:build linux && giouring

package ring_test

import (
	"testing"

	"github.com/pawelgaczynski/giouring"

	"github.com/ringloop/ringloop/internal/testutil"
)

// The giouring peer of BenchmarkNop, doing the same work through its API:
// GetSQE + PrepareNop ×32, SubmitAndWait(32), PeekBatchCQE, CQAdvance.
// Build with -ldflags=-checklinkname=0 (giouring links to syscall.munmap).

func init() {
	nopImpls = append(nopImpls, struct {
		name string
		fn   func(b *testing.B)
	}{"giouring", benchNopGiouring})
}

func benchNopGiouring(b *testing.B) {
	testutil.SkipIfNoUring(b)
	r, err := giouring.CreateRing(nopBatchSize)
	if err != nil {
		b.Fatal(err)
	}
	defer r.QueueExit()
	cqes := make([]*giouring.CompletionQueueEvent, nopBatchSize)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := 0; i < nopBatchSize; i++ {
			sqe := r.GetSQE()
			if sqe == nil {
				b.Fatal("giouring: SQ full")
			}
			sqe.PrepareNop()
			sqe.UserData = uint64(i)
		}
		if _, err := r.SubmitAndWait(nopBatchSize); err != nil {
			b.Fatal(err)
		}
		for got := uint32(0); got < nopBatchSize; {
			n := r.PeekBatchCQE(cqes[got:])
			r.CQAdvance(n)
			got += n
		}
	}
}
