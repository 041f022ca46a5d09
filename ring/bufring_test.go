//go:build linux

package ring_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/ring"
)

// TestBufRingTakeRecycle checks the buffer hand-over rules on synthetic
// CQEs: the id always comes from the flags (also when res < 0), a buffer
// can be taken once before it is recycled, and only a held buffer can be
// recycled, so no buffer is ever in the ring twice.
func TestBufRingTakeRecycle(t *testing.T) {
	r := newRing(t, 8, nil)
	br, err := r.NewBufRing(3, 8, 64)
	if err != nil {
		t.Skipf("no provided-buffer ring: %v", err)
	}
	cqe := func(res int32, bid uint16) *ring.CQE {
		return &ring.CQE{Res: res, Flags: ring.CQEFBuffer | uint32(bid)<<ring.CQEBufferShift}
	}
	if data, bid, ok := br.Take(cqe(-int32(unix.ECONNRESET), 5)); !ok || bid != 5 || data != nil {
		t.Fatalf("Take(failed receive, buffer 5) = %q, %d, %v; want nil, 5, true", data, bid, ok)
	}
	if !br.Held(5) || br.Held(0) {
		t.Fatal("Held: want buffer 5 held, buffer 0 not")
	}
	if _, _, ok := br.Take(cqe(10, 5)); ok {
		t.Fatal("a held buffer was taken twice")
	}
	if data, bid, ok := br.Take(cqe(10, 2)); !ok || bid != 2 || len(data) != 10 {
		t.Fatalf("Take(10 bytes, buffer 2) = %d bytes, %d, %v", len(data), bid, ok)
	}
	if _, _, ok := br.Take(&ring.CQE{Res: 10}); ok {
		t.Fatal("a CQE without CQEFBuffer yielded a buffer")
	}
	if _, _, ok := br.Take(cqe(1, 200)); ok {
		t.Fatal("an id outside the ring yielded a buffer")
	}
	if !br.Recycle(5) || br.Held(5) {
		t.Fatal("Recycle(5) of a held buffer refused")
	}
	if br.Recycle(5) || br.Recycle(0) {
		t.Fatal("Recycle of a buffer the kernel holds was accepted (it would be published twice)")
	}
	if got := br.Misuse(); got != 4 {
		t.Fatalf("Misuse() = %d, want 4 (double take, out-of-range id, two bad recycles)", got)
	}
	if !br.Recycle(2) {
		t.Fatal("Recycle(2) refused")
	}
}
