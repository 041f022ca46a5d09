package ring

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BufRing is a provided-buffer ring (IORING_REGISTER_PBUF_RING) with its
// buffers: entries buffers of bufSize bytes, buffer id i being the
// i-th. An SQE with SQEBufferSelect and BufIndex = Group() (see
// SQE.SetBufferGroup) lets the kernel pick a buffer; the CQE then carries
// CQEFBuffer and the id (CQE.BufferID), and the buffer belongs to the caller
// until it is given back with Recycle (or Add and Advance).
//
// The ring and the buffers live in one anonymous mapping off the Go heap,
// page aligned as the kernel requires; Close (or the Ring's Close)
// unregisters the group and unmaps it.
//
// Layout of the mapping:
//
//	[0, ringBytes)              entries × struct io_uring_buf (16 bytes);
//	                            the ring tail is the resv field of entry 0
//	[ringBytes, +entries×size)  the buffers, id i at ringBytes + i×bufSize
//
// A BufRing is not safe for concurrent use; it belongs to its Ring's owner.
type BufRing struct {
	r        *Ring
	mem      unsafe.Pointer
	memSize  uintptr
	ring     []BufRingEntry
	bufs     unsafe.Pointer // first buffer
	tailWord *uint32        // the 32-bit word holding entry 0's bid and the tail
	bufSize  uint32
	mask     uint16 // entries-1; entries is a power of two ≤ 32768
	tail     uint16 // tail as last published to the kernel
	bgid     uint16
	closed   bool

	// held marks the buffers the application holds (bit bid set): taken
	// from a completion and not yet given back. Recycle publishes only a
	// held buffer, so a buffer can never be in the ring twice, where the
	// kernel could hand it to two receives at once.
	held []uint64
	// slotOf is the ring position (the 16-bit index the tail counts in)
	// each buffer was last added at, so TakeBundle finds the entries that
	// followed a bundle's first buffer.
	slotOf []uint16
	// Misuse counts refused calls: Take of a buffer already held (the
	// kernel handed out a buffer it did not own) and Recycle of a buffer
	// not held (a double or stray give-back).
	misuse uint64
	// quarantined: Close unregisters the group but leaves the memory
	// mapped (see Quarantine).
	quarantined bool
}

// NewBufRing allocates entries buffers of bufSize bytes, registers them as
// buffer group bgid, and hands every buffer to the kernel. entries must be a
// power of two in [1, 32768] and bufSize in [1, 1<<30].
// Must be called by the goroutine that owns the ring.
func (r *Ring) NewBufRing(bgid uint16, entries uint32, bufSize uint32) (*BufRing, error) {
	return r.newBufRing(bgid, entries, bufSize, mmapAnon)
}

// NewBufRingLazy is NewBufRing for buffers much larger than what most
// receives write: their pages are not populated up front (NewBufRing's
// are) and never backed by huge pages, so a buffer's memory is resident
// only as far as the kernel has written into it. A page is backed on the
// first write and stays backed until Close.
func (r *Ring) NewBufRingLazy(bgid uint16, entries uint32, bufSize uint32) (*BufRing, error) {
	return r.newBufRing(bgid, entries, bufSize, mmapAnonLazy)
}

func (r *Ring) newBufRing(bgid uint16, entries uint32, bufSize uint32, mmap func(uintptr) (unsafe.Pointer, error)) (*BufRing, error) {
	if r.closed {
		return nil, ErrClosed
	}
	if entries == 0 || entries > MaxEntries || entries&(entries-1) != 0 {
		return nil, fmt.Errorf("ring: buffer ring entries %d not a power of two in [1, %d]", entries, MaxEntries)
	}
	if bufSize == 0 || bufSize > 1<<30 {
		return nil, fmt.Errorf("ring: buffer size %d outside [1, 1<<30]", bufSize)
	}
	page := uintptr(unix.Getpagesize())
	ringBytes := roundUp(uintptr(entries)*unsafe.Sizeof(BufRingEntry{}), page)
	total := roundUp(ringBytes+uintptr(entries)*uintptr(bufSize), page)
	mem, err := mmap(total)
	if err != nil {
		return nil, wrapSyscall("mmap buffer ring", err)
	}
	b := &BufRing{
		r:        r,
		mem:      mem,
		memSize:  total,
		ring:     unsafe.Slice((*BufRingEntry)(mem), entries),
		bufs:     unsafe.Add(mem, ringBytes),
		tailWord: (*uint32)(unsafe.Add(mem, unsafe.Offsetof(BufRingEntry{}.Bid))),
		bufSize:  bufSize,
		mask:     uint16(entries - 1),
		bgid:     bgid,
		held:     make([]uint64, (entries+63)/64),
		slotOf:   make([]uint16, entries),
	}
	reg := BufReg{RingAddr: uint64(uintptr(mem)), RingEntries: entries, Bgid: bgid}
	if _, err := r.register("PBUF_RING", registerPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		munmap(mem, total)
		return nil, err
	}
	for i := range entries {
		b.Add(uint16(i), int(i))
	}
	b.Advance(int(entries))
	r.bufRings = append(r.bufRings, b)
	return b, nil
}

// quarantinedMaps holds the addresses of quarantined buffer rings after
// their Close: never unmapped, for the life of the process.
var quarantinedMaps struct {
	sync.Mutex
	m []unsafe.Pointer
}

func roundUp(n, to uintptr) uintptr { return (n + to - 1) &^ (to - 1) }

// Group returns the buffer group id.
func (b *BufRing) Group() uint16 { return b.bgid }

// Entries returns the number of buffers.
func (b *BufRing) Entries() int { return int(b.mask) + 1 }

// BufSize returns the size of each buffer.
func (b *BufRing) BufSize() int { return int(b.bufSize) }

// Buf returns buffer bid, all BufSize bytes of it. The slice aliases the
// mapping: it must not be used after Close, nor after the buffer is given
// back to the kernel.
func (b *BufRing) Buf(bid uint16) []byte {
	if b.closed || bid > b.mask {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(b.bufs, uintptr(bid)*uintptr(b.bufSize))), b.bufSize)
}

// Take hands the buffer named by a completion to the caller, who must give
// it back with Recycle once done with the bytes. The buffer id always comes
// from the CQE's flags, whatever the result: a receive that fails after
// the kernel selected a buffer (res < 0 with CQEFBuffer, as some kernels
// post) still names its buffer, and that buffer, not another, is the one
// to give back.
//
// ok reports whether the CQE carries a buffer of this ring that the caller
// now holds; data holds the bytes received (nil unless res > 0). ok is
// false when the CQE carries no buffer, names an id outside this ring, or
// names a buffer the caller already holds (which the kernel cannot do with
// a correctly published ring; counted in Misuse).
func (b *BufRing) Take(c *CQE) (data []byte, bid uint16, ok bool) {
	if c.Flags&CQEFBuffer == 0 {
		return nil, 0, false
	}
	bid = uint16(c.Flags >> CQEBufferShift)
	buf := b.Buf(bid)
	if buf == nil {
		b.misuse++
		return nil, bid, false
	}
	w, bit := bid/64, uint64(1)<<(bid%64)
	if b.held[w]&bit != 0 {
		b.misuse++
		return nil, bid, false
	}
	b.held[w] |= bit
	if c.Res > 0 && int(c.Res) <= len(buf) {
		data = buf[:c.Res]
	}
	return data, bid, true
}

// Held reports whether buffer bid is held by the application (taken and
// not yet recycled).
func (b *BufRing) Held(bid uint16) bool {
	return !b.closed && bid <= b.mask && b.held[bid/64]&(uint64(1)<<(bid%64)) != 0
}

// Misuse returns how many Take and Recycle calls were refused because
// they named a buffer in the wrong hands.
func (b *BufRing) Misuse() uint64 { return b.misuse }

// Add writes buffer bid into the ring slot offset places past the published
// tail, handing it back to the kernel without Recycle's check (the caller
// must hold it). It is invisible to the kernel until Advance. Add several buffers
// with offsets 0, 1, … and publish them with one Advance.
func (b *BufRing) Add(bid uint16, offset int) {
	if b.closed || bid > b.mask {
		return
	}
	e := &b.ring[(b.tail+uint16(offset))&b.mask]
	// Field by field: entry 0's resv is the ring tail and must not be
	// overwritten with a plain store.
	e.Addr = uint64(uintptr(b.bufs) + uintptr(bid)*uintptr(b.bufSize))
	e.Len = b.bufSize
	e.Bid = bid
	b.slotOf[bid] = b.tail + uint16(offset)
	b.held[bid/64] &^= uint64(1) << (bid % 64)
}

// TakeBundle hands the buffers of a bundle receive's completion
// (RecvsendBundle) to the caller, as Take hands one: the CQE names the
// first buffer, the others are the ring entries that followed it, as many
// as the result fills at BufSize each (the kernel takes consecutive
// entries from the ring's head). It appends their ids, in order, to bids.
// ok is false, and nothing is taken, when the CQE names no buffer of this
// ring or any of those buffers is held already (counted in Misuse). The
// bytes are the first res of the buffers' concatenation: see Bundle.
func (b *BufRing) TakeBundle(c *CQE, bids []uint16) (_ []uint16, ok bool) {
	if c.Flags&CQEFBuffer == 0 || b.closed {
		return bids, false
	}
	first := uint16(c.Flags >> CQEBufferShift)
	if first > b.mask {
		b.misuse++
		return bids, false
	}
	n := 1
	if c.Res > 0 {
		n = (int(c.Res) + int(b.bufSize) - 1) / int(b.bufSize)
	}
	if n > b.Entries() {
		b.misuse++
		return bids, false
	}
	start := len(bids)
	pos := b.slotOf[first]
	for i := range n {
		bid := b.ring[(pos+uint16(i))&b.mask].Bid
		if i == 0 {
			bid = first
		}
		if b.Held(bid) {
			b.misuse++
			for _, t := range bids[start:] { // take none
				b.held[t/64] &^= uint64(1) << (t % 64)
			}
			return bids[:start], false
		}
		b.held[bid/64] |= uint64(1) << (bid % 64)
		bids = append(bids, bid)
	}
	return bids, true
}

// Bundle returns the bytes a bundle completion of n bytes left in bids
// (from TakeBundle): one slice when the buffers lie next to each other in
// memory (consecutive ids, as a freshly made or orderly recycled ring
// gives), else nil, and the caller reads them buffer by buffer with Buf.
func (b *BufRing) Bundle(bids []uint16, n int) []byte {
	if len(bids) == 0 || n <= 0 || b.closed {
		return nil
	}
	for i := 1; i < len(bids); i++ {
		if bids[i] != bids[0]+uint16(i) {
			return nil
		}
	}
	if n > len(bids)*int(b.bufSize) {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(b.bufs, uintptr(bids[0])*uintptr(b.bufSize))), n)
}

// Advance publishes n buffers added since the last Advance.
func (b *BufRing) Advance(n int) {
	if b.closed || n == 0 {
		return
	}
	b.tail += uint16(n)
	b.storeTail(b.tail)
}

// Recycle gives buffer bid, taken with Take, back to the kernel: Add(bid,
// 0) then Advance(1). It refuses (returning false, counted in Misuse) a
// buffer that is not held, so a double give-back can never publish a
// buffer twice.
func (b *BufRing) Recycle(bid uint16) bool {
	if !b.Held(bid) {
		b.misuse++
		return false
	}
	b.held[bid/64] &^= uint64(1) << (bid % 64)
	b.Add(bid, 0)
	b.Advance(1)
	return true
}

// storeTail publishes the 16-bit tail (io_uring_buf_ring.tail, which
// overlays bufs[0].resv) with release order. Go has no 16-bit atomics, so it
// stores the aligned 32-bit word made of bufs[0].bid and the tail. Both
// halves are ours: the kernel only reads that word, and bufs[0].bid is
// rewritten with the value it already holds.
func (b *BufRing) storeTail(tail uint16) {
	// liburing: io_uring_buf_ring_advance, io_uring_smp_store_release(&br->tail, ...):
	// the entries written by Add must be visible before the new tail.
	var w [4]byte
	bo := binary.NativeEndian
	bo.PutUint16(w[0:2], b.ring[0].Bid)
	bo.PutUint16(w[2:4], tail)
	atomic.StoreUint32(b.tailWord, bo.Uint32(w[:]))
}

// Quarantine keeps the buffers' memory mapped for the life of the
// process: Close (or the Ring's Close) will unregister the group but never
// unmap it, and Buf, Take and Recycle stop working on it then. Use it when
// a receive that may still write into these buffers was given up (its
// final completion never came): unmapping would let a later mapping reuse
// the addresses the kernel writes to. It returns the bytes kept.
func (b *BufRing) Quarantine() int {
	b.quarantined = true
	return int(b.memSize)
}

// Close unregisters the buffer group and unmaps its memory (unless it is
// quarantined). The kernel must have no op in flight that selects from this
// group. Idempotent. Must be called by the goroutine that owns the ring.
func (b *BufRing) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	reg := BufReg{Bgid: b.bgid}
	_, err := sysRegister(b.r.fd, unregisterPbufRing, unsafe.Pointer(&reg), 1)
	err = wrapSyscall("io_uring_register(UNREGISTER_PBUF_RING)", err)
	if b.quarantined {
		quarantinedMaps.Lock()
		quarantinedMaps.m = append(quarantinedMaps.m, b.mem)
		quarantinedMaps.Unlock()
	} else if uerr := munmap(b.mem, b.memSize); err == nil && uerr != nil {
		err = wrapSyscall("munmap buffer ring", uerr)
	}
	b.mem, b.bufs, b.ring = nil, nil, nil
	b.r.bufRings = slices.DeleteFunc(b.r.bufRings, func(x *BufRing) bool { return x == b })
	return err
}
