//go:build linux

package loop

import "fmt"

// The epoll driver's per-fd and per-op state lives in tables of fixed-size
// chunks, indexed by fd number and by op slot. A table grows by one chunk
// and never copies: with thousands of connections a slice doubling under
// them would hold up to twice the entries it needs and leave the old
// arrays behind as garbage, which the RSS of an idle server shows.

// waitLists are the epoll driver's per-fd FIFO lists of waiting ops (read
// side, write side) and the per-op entries that link them.
type waitLists struct {
	fds  fdTable   // per-fd lists, indexed by fd
	side sideTable // per-op entries, indexed by op slot
}

// track prepares o's entry.
func (w *waitLists) track(o *op) error {
	w.side.grow(o.slot)
	e := w.side.at(o.slot)
	if e.gen == o.gen && e.where != epIdle {
		return fmt.Errorf("loop: epoll: %v op in slot %d submitted twice", o.tag, o.slot)
	}
	*e = epollOp{gen: o.gen, next: noSlot, prev: noSlot}
	return nil
}

// enlist appends slot to fd's list where.
func (w *waitLists) enlist(fd int, where uint8, slot uint32) {
	l := &w.fds.at(fd).lists[where-1]
	e := w.side.at(slot)
	e.where, e.next, e.prev = where, noSlot, l.tail
	if l.tail == noSlot {
		l.head = slot
	} else {
		w.side.at(l.tail).next = slot
	}
	l.tail = slot
}

// unlist takes slot off its fd list.
func (w *waitLists) unlist(f *epollFd, slot uint32) {
	e := w.side.at(slot)
	l := &f.lists[e.where-1]
	if e.prev == noSlot {
		l.head = e.next
	} else {
		w.side.at(e.prev).next = e.next
	}
	if e.next == noSlot {
		l.tail = e.prev
	} else {
		w.side.at(e.next).prev = e.prev
	}
	e.where, e.next, e.prev = epIdle, noSlot, noSlot
}

// count counts the ops waiting on f.
func (w *waitLists) count(f *epollFd) int {
	n := 0
	for _, l := range f.lists {
		for s := l.head; s != noSlot; s = w.side.at(s).next {
			n++
		}
	}
	return n
}

// fdChunk is the number of fd entries per chunk (32 KiB).
const fdChunk = 1024

// fdTable holds an epollFd per fd number, made a chunk at a time.
type fdTable struct {
	chunks []*[fdChunk]epollFd
}

// len reports how many fd numbers the table covers.
func (t *fdTable) len() int { return len(t.chunks) * fdChunk }

// at returns fd's entry, which must exist (fd < len).
func (t *fdTable) at(fd int) *epollFd { return &t.chunks[fd/fdChunk][fd%fdChunk] }

// grow makes the table cover fd.
func (t *fdTable) grow(fd int) {
	for fd >= t.len() {
		c := new([fdChunk]epollFd)
		for i := range c {
			for j := range c[i].lists {
				c[i].lists[j] = epollWaitList{head: noSlot, tail: noSlot}
			}
		}
		t.chunks = append(t.chunks, c)
	}
}

// sideTable holds an epollOp per op slot, made a chunk of opChunk at a
// time, as the op table's own slabs are.
type sideTable struct {
	chunks []*[opChunk]epollOp
}

func (t *sideTable) len() int { return len(t.chunks) * opChunk }

// at returns slot's entry, which must exist (slot < len).
func (t *sideTable) at(slot uint32) *epollOp { return &t.chunks[slot/opChunk][slot%opChunk] }

// grow makes the table cover slot.
func (t *sideTable) grow(slot uint32) {
	for int(slot) >= t.len() {
		t.chunks = append(t.chunks, new([opChunk]epollOp))
	}
}
