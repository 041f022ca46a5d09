package loop

// opChunk is the number of records per slab chunk. Chunks are allocated
// once and never moved, so an address inside a record stays valid while the
// kernel holds it.
const opChunk = 256

// noSlot terminates free lists.
const noSlot = ^uint32(0)

// opTable is a loop's slab of op records. It is owned by the loop goroutine.
type opTable struct {
	chunks   [][]op
	free     uint32 // head of the free list, noSlot when empty
	inFlight int    // records not free
	maxSlots uint32 // hard cap on records (0: 1<<32-1)
}

func newOpTable(maxSlots uint32) *opTable {
	return &opTable{free: noSlot, maxSlots: maxSlots}
}

// at returns the record at slot i, which must exist.
func (t *opTable) at(i uint32) *op {
	return &t.chunks[i/opChunk][i%opChunk]
}

// len reports how many slots exist.
func (t *opTable) len() uint32 { return uint32(len(t.chunks)) * opChunk }

// alloc takes a free record, growing the table by one chunk when none is
// free. It returns nil when the table is at its cap.
func (t *opTable) alloc(tag opTag) *op {
	if t.free == noSlot {
		if !t.grow() {
			return nil
		}
	}
	o := t.at(t.free)
	t.free = o.next
	o.next = noSlot
	o.tag = tag
	o.state = opQueued
	t.inFlight++
	return o
}

func (t *opTable) grow() bool {
	base := t.len()
	n := uint32(opChunk) // slots of the new chunk put in use
	if t.maxSlots != 0 {
		if base >= t.maxSlots {
			return false
		}
		n = min(n, t.maxSlots-base) // a cap that is no multiple of the chunk: a partial last chunk
	}
	c := make([]op, opChunk)
	for i := range c {
		c[i].slot = base + uint32(i)
		c[i].gen = 1
		c[i].next = noSlot
	}
	for i := range n {
		if i+1 < n {
			c[i].next = base + i + 1
		} else {
			c[i].next = t.free
		}
	}
	t.chunks = append(t.chunks, c)
	t.free = base
	return true
}

// lookup returns the live record a user_data names, or nil if the
// completion is stale (slot out of range, record free, or generation
// mismatch).
func (t *opTable) lookup(ud uint64) *op {
	tag, gen, slot := unpackUserData(ud)
	if slot >= t.len() {
		return nil
	}
	o := t.at(slot)
	if o.state == opFree || o.state == opRetired || o.gen != gen || o.tag != tag {
		return nil
	}
	return o
}

// release frees a record after its final completion: references are
// dropped, the generation advances, and the slot returns to the free list.
func (t *opTable) release(o *op) {
	o.reset()
	o.gen = nextGen(o.gen)
	o.state = opFree
	o.next = t.free
	t.free = o.slot
	t.inFlight--
}

// retire takes a record out of use for good after its op was given up
// without a final completion: it keeps every reference (the memory is in
// quarantine, quarantine.go), its generation advances so a late completion
// is stale, and its slot never returns to the free list.
func (t *opTable) retire(o *op) {
	o.gen = nextGen(o.gen)
	o.state = opRetired
	o.next = noSlot
	t.inFlight--
}

// each calls f for every live record.
func (t *opTable) each(f func(o *op)) {
	for _, c := range t.chunks {
		for i := range c {
			if c[i].state != opFree && c[i].state != opRetired {
				f(&c[i])
			}
		}
	}
}
