//go:build linux

package loop

// The epoll driver's per-fd and per-op state lives in tables of fixed-size
// chunks, indexed by fd number and by op slot. A table grows by one chunk
// and never copies: with thousands of connections a slice doubling under
// them would hold up to twice the entries it needs and leave the old
// arrays behind as garbage, which the RSS of an idle server shows.

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
