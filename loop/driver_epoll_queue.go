//go:build linux

package loop

// The epoll driver's queue of completions waiting for poll. It is owned by
// the loop goroutine and grows by doubling, so a steady state allocates
// nothing.

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
