//go:build linux

package loop

import "golang.org/x/sys/unix"

// The epoll driver's bookkeeping structures: the queue of completions
// waiting for poll, the receive-buffer pool that stands in for io_uring's
// provided-buffer ring. Both are
// owned by the loop goroutine and grow by doubling, so a steady state
// allocates nothing.

// epollCQE is a completion waiting to be delivered by poll. Completions are
// never delivered from inside submit or cancel, only from poll, so a
// Completer can never be re-entered by the op it is starting.
type epollCQE struct {
	ud    uint64
	res   int32
	flags uint32
	buf   int32 // receive-pool buffer holding res bytes, or -1
}

// epollQueue is a FIFO ring of pending completions.
type epollQueue struct {
	q    []epollCQE
	head int
	n    int
}

func (q *epollQueue) push(c epollCQE) {
	if q.n == len(q.q) {
		size := 2 * len(q.q)
		if size == 0 {
			size = 64
		}
		nq := make([]epollCQE, size)
		for i := 0; i < q.n; i++ {
			nq[i] = q.q[(q.head+i)%len(q.q)]
		}
		q.q, q.head = nq, 0
	}
	q.q[(q.head+q.n)%len(q.q)] = c
	q.n++
}

func (q *epollQueue) pop() epollCQE {
	c := q.q[q.head]
	q.head = (q.head + 1) % len(q.q)
	q.n--
	return c
}

// epollBufPool is a loop's receive-buffer pool: count buffers of size bytes in
// one slab, handed out by index. It plays the provided-buffer ring's part:
// a multishot receive reads into a free buffer, the completion carries the
// buffer until the Completer returns, and the buffer is then free again.
// The slab is allocated on the first provided receive, so loops that never
// use one do not pay for it.
type epollBufPool struct {
	mem    []byte
	mapped bool // mem is an anonymous mapping (release unmaps it)
	size   int
	count  int
	free   []int32 // stack of free buffer indices
}

// get returns a free buffer index and its bytes, or -1 when none is free.
func (p *epollBufPool) get() (int32, []byte) {
	if p.mem == nil {
		// Mapped, not made: the pages stay untouched (out of the RSS)
		// until a receive first lands in them, and the stack of free
		// buffers hands the same few back while traffic is light.
		mem, err := unix.Mmap(-1, 0, p.count*p.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			mem = make([]byte, p.count*p.size)
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
func (p *epollBufPool) bytes(i int32, n int) []byte {
	off := int(i) * p.size
	return p.mem[off : off+n : off+n]
}

func (p *epollBufPool) put(i int32) { p.free = append(p.free, i) }

// release drops the buffers (the driver is closed: no receive runs any
// more, and no Completer holds a buffer past its call).
func (p *epollBufPool) release() {
	if p.mapped {
		_ = unix.Munmap(p.mem)
	}
	*p = epollBufPool{}
}
