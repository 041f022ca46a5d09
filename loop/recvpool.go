//go:build linux

package loop

import "golang.org/x/sys/unix"

// recvPool is a loop's receive-buffer pool: count buffers of size bytes in
// one slab, handed out by index. It plays the provided-buffer ring's part:
// a multishot receive reads into a free buffer, the completion carries the
// buffer until the Completer returns, and the buffer is then free again.
// The slab is allocated on the first provided receive, so loops that never
// use one do not pay for it.
type recvPool struct {
	mem    []byte
	mapped bool // mem is an anonymous mapping (release unmaps it)
	lazy   bool // never backed by huge pages: a buffer's pages are backed as far as receives write (datagram buffers)
	size   int
	count  int
	free   []int32 // stack of free buffer indices
}

// get returns a free buffer index and its bytes, or -1 when none is free.
func (p *recvPool) get() (int32, []byte) {
	if p.mem == nil {
		// Mapped, not made: the pages stay untouched (out of the RSS)
		// until a receive first lands in them, and the stack of free
		// buffers hands the same few back while traffic is light.
		mem, err := unix.Mmap(-1, 0, p.count*p.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			mem = make([]byte, p.count*p.size)
		} else if p.lazy {
			// Advice only: a kernel without transparent huge pages
			// refuses it.
			_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
		}
		p.mem, p.mapped = mem, err == nil
		p.free = make([]int32, p.count)
		for i := range p.free {
			p.free[i] = int32(p.count - 1 - i) // buffer 0 on top
		}
	}
	if len(p.free) == 0 {
		return -1, nil
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return i, p.bytes(i, p.size)
}

// bytes returns the first n bytes of buffer i, capped so a Completer cannot
// append into the next buffer.
func (p *recvPool) bytes(i int32, n int) []byte {
	off := int(i) * p.size
	return p.mem[off : off+n : off+n]
}

func (p *recvPool) put(i int32) { p.free = append(p.free, i) }

// exhausted reports whether every buffer is taken (a pool not yet mapped
// has them all free).
func (p *recvPool) exhausted() bool { return p.mem != nil && len(p.free) == 0 }

// release drops the buffers (the driver is closed: no receive runs any
// more, and no Completer holds a buffer past its call).
func (p *recvPool) release() {
	if p.mapped {
		_ = unix.Munmap(p.mem)
	}
	*p = recvPool{}
}
