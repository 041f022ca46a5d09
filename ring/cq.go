package ring

import (
	"sync/atomic"
	"unsafe"
)

// cqRing is the completion side. The kernel owns tail (it posts CQEs and
// then advances tail with a store-release); we own head (we release slots
// back to the kernel by advancing it).
type cqRing struct {
	head     *uint32 // user-written; published with store-release
	tail     *uint32 // kernel-written; read with load-acquire
	overflow *uint32 // CQEs the kernel had to drop
	flags    *uint32 // IORING_CQ_*
	cqes     []CQE
	mask     uint32
	entries  uint32
}

func (cq *cqRing) init(mem unsafe.Pointer, off *CQRingOffsets) {
	cq.head = (*uint32)(unsafe.Add(mem, off.Head))
	cq.tail = (*uint32)(unsafe.Add(mem, off.Tail))
	cq.overflow = (*uint32)(unsafe.Add(mem, off.Overflow))
	cq.flags = (*uint32)(unsafe.Add(mem, off.Flags))
	cq.mask = *(*uint32)(unsafe.Add(mem, off.RingMask))
	cq.entries = *(*uint32)(unsafe.Add(mem, off.RingEntries))
	cq.cqes = unsafe.Slice((*CQE)(unsafe.Add(mem, off.CQEs)), cq.entries)
}

func (cq *cqRing) kill(dead *[2]uint32) {
	cq.head, cq.tail, cq.overflow, cq.flags = &dead[0], &dead[0], &dead[0], &dead[0]
	cq.cqes = nil
	cq.mask, cq.entries = 0, 0
}

// CQReady returns how many CQEs are posted and not yet consumed. It does
// not flush the kernel's overflow list; PeekCQE and PeekBatch do.
// Must be called by the goroutine that owns the ring.
func (r *Ring) CQReady() uint32 {
	// liburing: io_uring_cq_ready, io_uring_smp_load_acquire(cq->ktail).
	return atomic.LoadUint32(r.cq.tail) - *r.cq.head
}

// CQAdvance releases n CQEs, returned by PeekCQE or PeekBatch, back to the
// kernel. Must be called by the goroutine that owns the ring.
func (r *Ring) CQAdvance(n uint32) {
	if n == 0 {
		return
	}
	// liburing: io_uring_cq_advance, io_uring_smp_store_release(cq->khead, ...):
	// our reads of the CQEs must complete before the kernel may reuse the slots.
	// We are the only writer of head, so the plain read is exact.
	atomic.StoreUint32(r.cq.head, *r.cq.head+n)
}

// CQESeen releases the CQE returned by PeekCQE or WaitCQETimeout.
func (r *Ring) CQESeen() { r.CQAdvance(1) }

// Overflow returns the number of CQEs the kernel dropped (cq_ring->overflow).
// A CQE the CQ has no room for goes to the kernel's overflow list
// (FeatNoDrop, SQCQOverflow) and reaches the ring on the next enter with
// EnterGetEvents, which PeekCQE, PeekBatch and the waits issue by
// themselves; it is dropped only when that list cannot grow.
func (r *Ring) Overflow() uint32 { return atomic.LoadUint32(r.cq.overflow) }

// CQOverflowPending reports whether the kernel holds completions the CQ
// had no room for on its overflow list (IORING_SQ_CQ_OVERFLOW); the next
// enter with GetEvents, or a Peek that finds the CQ empty, moves them in. Safe for concurrent use with everything but Close.
func (r *Ring) CQOverflowPending() bool { return r.sqFlags()&SQCQOverflow != 0 }

// cqNeedsFlush reports whether CQEs wait in the kernel: on the overflow list
// (SQCQOverflow) or as deferred task work (SQTaskrun, set with
// SetupTaskrunFlag). Either is moved to the ring by an enter with GETEVENTS.
func (r *Ring) cqNeedsFlush() bool {
	return r.sqFlags()&(SQCQOverflow|SQTaskrun) != 0
}

// flushCQ asks the kernel to move overflowed and deferred completions into
// the CQ, without waiting. It submits nothing: published SQEs are left to
// the next Submit, so a peek never has side effects on the SQ.
func (r *Ring) flushCQ() error {
	for {
		_, err := r.enter(0, 0, EnterGetEvents, nil, 0)
		if err != errEINTR {
			return err
		}
	}
}

// PeekCQE returns the oldest CQE without waiting, or false when none is
// ready. The CQE is in the ring: read it, then call CQESeen (or CQAdvance)
// before the next Peek or Wait call. When the CQ is empty but the kernel
// holds overflowed or deferred completions, PeekCQE flushes them first.
//
// With SetupDeferTaskrun, completions are posted only while the owner is in
// io_uring_enter with GETEVENTS (SubmitAndWait and the timed waits); add
// SetupTaskrunFlag so that PeekCQE and PeekBatch notice pending ones.
// Must be called by the goroutine that owns the ring.
func (r *Ring) PeekCQE() (*CQE, bool) {
	for retried := false; ; retried = true {
		head := *r.cq.head
		// liburing: __io_uring_peek_cqe, io_uring_smp_load_acquire(cq->ktail).
		tail := atomic.LoadUint32(r.cq.tail)
		if head != tail {
			return &r.cq.cqes[head&r.cq.mask], true
		}
		if retried || !r.cqNeedsFlush() || r.flushCQ() != nil {
			return nil, false
		}
	}
}

// PeekBatch copies up to len(dst) ready CQEs into dst, oldest first, and
// returns how many it copied, without waiting and without consuming them:
// call CQAdvance(n) when done with them. When the CQ is empty but the kernel
// holds overflowed or deferred completions, PeekBatch flushes them first, so
// repeated PeekBatch/CQAdvance rounds reap every CQE exactly once.
// Must be called by the goroutine that owns the ring.
func (r *Ring) PeekBatch(dst []CQE) int {
	if len(dst) == 0 {
		return 0
	}
	for retried := false; ; retried = true {
		head := *r.cq.head
		// liburing: io_uring_peek_batch_cqe, io_uring_smp_load_acquire(cq->ktail).
		tail := atomic.LoadUint32(r.cq.tail)
		n := 0
		for head+uint32(n) != tail && n < len(dst) {
			dst[n] = r.cq.cqes[(head+uint32(n))&r.cq.mask]
			n++
		}
		if n > 0 || retried || !r.cqNeedsFlush() || r.flushCQ() != nil {
			return n
		}
	}
}
