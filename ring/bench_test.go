//go:build linux

package ring_test

import (
	"testing"

	"golang.org/x/sys/unix"

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

// BenchmarkSendFixedFile measures what a registered file (IOSQE_FIXED_FILE,
// a direct descriptor's index) saves a SEND against a plain fd: one op is
// a batch of 32 SENDs of 64 B on a TCP socket, submitted and reaped with
// one io_uring_enter, then the peer drained with one recv(2), the same in
// both. The difference per SEND is the file lookup and reference the
// kernel takes for a plain fd and not for a registered one.
func BenchmarkSendFixedFile(b *testing.B) {
	testutil.SkipIfNoUring(b)
	for _, fixed := range []bool{false, true} {
		b.Run(map[bool]string{false: "fd", true: "fixed"}[fixed], func(b *testing.B) {
			const batch = 32
			r, err := ring.New(batch, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			client, server := testutil.TCPPair(b)
			fd := client
			if fixed {
				if err := r.RegisterFiles([]int32{int32(client)}); err != nil {
					b.Fatal(err)
				}
				fd = 0
			}
			msg := make([]byte, 64)
			sink := make([]byte, 64*batch)
			var cqes [batch]ring.CQE
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for range batch {
					sqe, err := r.GetSQE()
					if err != nil {
						b.Fatal(err)
					}
					sqe.PrepSend(fd, msg, 0)
					if fixed {
						sqe.Flags |= ring.SQEFixedFile
					}
				}
				if _, err := r.SubmitAndWait(batch); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < batch; {
					n := r.PeekBatch(cqes[:])
					for i := range n {
						if cqes[i].Res != int32(len(msg)) {
							b.Fatalf("send: %+v", cqes[i])
						}
					}
					r.CQAdvance(uint32(n))
					got += n
				}
				for drained := 0; drained < len(sink); {
					n, err := unix.Read(server, sink[drained:])
					if err != nil {
						b.Fatal(err)
					}
					drained += n
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/send")
		})
	}
}
