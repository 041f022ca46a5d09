package ring

import (
	"sync/atomic"
	"unsafe"
)

// sqRing is the submission side. The kernel owns head (it advances it as it
// consumes entries); we own tail. Between them, sqeHead..sqeTail are entries
// handed out by GetSQE and not yet published:
//
//	kernel head        sqeHead (= published tail)     sqeTail
//	    |  consumed by    |   prepared by the caller,    |  free
//	    |  the kernel     |   published by flush         |
//
// The SQ index array (when the ring has one) is filled with the identity
// once at setup, so slot i of the array always names SQE i and the hot path
// never writes it (SetupNoSQArray, Linux 6.6, removes the array altogether).
type sqRing struct {
	head    *uint32 // kernel-written; read with load-acquire
	tail    *uint32 // user-written; published with store-release
	flags   *uint32 // IORING_SQ_*: kernel-written
	sqes    []SQE
	mask    uint32
	entries uint32
	sqeHead uint32 // first entry not yet published to the kernel
	sqeTail uint32 // next entry GetSQE hands out
}

func (sq *sqRing) init(mem unsafe.Pointer, off *SQRingOffsets, sqeMem unsafe.Pointer, hasArray bool) {
	sq.head = (*uint32)(unsafe.Add(mem, off.Head))
	sq.tail = (*uint32)(unsafe.Add(mem, off.Tail))
	sq.flags = (*uint32)(unsafe.Add(mem, off.Flags))
	sq.mask = *(*uint32)(unsafe.Add(mem, off.RingMask))
	sq.entries = *(*uint32)(unsafe.Add(mem, off.RingEntries))
	sq.sqes = unsafe.Slice((*SQE)(sqeMem), sq.entries)
	if hasArray {
		array := unsafe.Slice((*uint32)(unsafe.Add(mem, off.Array)), sq.entries)
		for i := range array {
			array[i] = uint32(i)
		}
	}
	sq.sqeHead = *sq.tail
	sq.sqeTail = sq.sqeHead
}

// kill points the ring at dead, a zeroed pair of words in the Ring, so that
// GetSQE reports the ring full (and then closed) after Close.
func (sq *sqRing) kill(dead *[2]uint32) {
	sq.head, sq.tail, sq.flags = &dead[0], &dead[1], &dead[0]
	sq.sqes = nil
	sq.mask, sq.entries, sq.sqeHead, sq.sqeTail = 0, 0, 0, 0
}

// GetSQE returns the next free SQE, zeroed, or ErrSQFull when every slot is
// waiting for the kernel (Submit, then retry), or ErrClosed after Close. It
// never panics and never enters the kernel. Set UserData and fill the entry
// with a Prep method; it is submitted by the next Submit.
//
// The pointer stays valid until that Submit; do not keep it after.
// Must be called by the goroutine that owns the ring.
func (r *Ring) GetSQE() (*SQE, error) {
	sq := &r.sq
	// liburing: _io_uring_get_sqe, io_uring_smp_load_acquire(sq->khead) —
	// the kernel (or its SQPOLL thread) releases slots by advancing head.
	head := atomic.LoadUint32(sq.head)
	tail := sq.sqeTail
	if tail-head >= sq.entries {
		return nil, r.sqFullErr()
	}
	sq.sqeTail = tail + 1
	e := &sq.sqes[tail&sq.mask]
	*e = SQE{}
	return e, nil
}

func (r *Ring) sqFullErr() error {
	if r.closed {
		return ErrClosed
	}
	return ErrSQFull
}

// flushSQ publishes the prepared SQEs to the kernel and returns how many
// entries are waiting to be consumed.
func (r *Ring) flushSQ() uint32 {
	sq := &r.sq
	tail := sq.sqeTail
	if sq.sqeHead != tail {
		if r.counts != nil {
			r.countSQEs(sq.sqeHead, tail)
		}
		sq.sqeHead = tail
		// liburing: __io_uring_flush_sq, io_uring_smp_store_release(sq->ktail, tail):
		// the SQE contents written above must be visible before the new tail.
		atomic.StoreUint32(sq.tail, tail)
	}
	// liburing: __io_uring_flush_sq reads khead with load-acquire (for SQPOLL).
	return tail - atomic.LoadUint32(sq.head)
}

// sqFlags loads the SQ ring flags word (IORING_SQ_*), written by the kernel.
func (r *Ring) sqFlags() uint32 {
	// liburing: IO_URING_READ_ONCE(*ring->sq.kflags); an atomic load is
	// at least as strong.
	return atomic.LoadUint32(r.sq.flags)
}
