package conn

import (
	"sync"
	"sync/atomic"

	"github.com/ringloop/ringloop/loop"
)

// Receives starved of provided buffers.
//
// A multishot receive takes provided buffers for as long as its socket
// has data, so when many connections each hold tens of KiB unread (bulk
// transfers, deep pipelines) the first few receives the kernel runs empty
// the loop's buffer ring and every other armed receive ends with -ENOBUFS.
// Re-arming all of those at once only repeats it: each re-armed receive
// finds data, the first few take the buffers again and the rest fail
// again, one SQE and one CQE each, turn after turn. Measured with one loop
// and its default 256 buffers at 1,024 connections × 64 KiB in flight:
// about a million ENOBUFS completions a second, three SQEs per 4 KiB
// echoed, and 40 % of the server's CPU in io_uring bookkeeping.
//
// So a connection whose receive ends with ENOBUFS waits in its loop's
// starved queue instead, and at the end of each turn (the buffers its
// completions used are back in the ring by then) the queue re-arms the
// oldest waiters, as many as the ring can serve: one per 16 buffers (a
// 64 KiB burst in the default 4 KiB buffers), at least one. Nothing is
// lost while a connection waits: its bytes stay in the socket, and TCP's
// window holds the sender back.

// starvedPerBuffers is how many provided buffers one re-armed receive is
// budgeted to take.
const starvedPerBuffers = 16

// starvedQueue is one loop's connections waiting to re-arm their receive.
// Used only on its loop.
type starvedQueue struct {
	l      *loop.Loop
	conns  []*Conn
	head   int
	budget int  // receives re-armed per turn
	queued bool // run is pending as a tail task
	runFn  func()
}

// starvedQueues maps each loop with starved receives to its queue; a
// loop's entry goes with its shutdown.
var starvedQueues sync.Map // *loop.Loop → *starvedQueue

// starvedTotal counts receives parked in a starved queue, for tests.
var starvedTotal atomic.Int64

// starvedFor returns l's starved queue. Must be called on l.
func starvedFor(l *loop.Loop) *starvedQueue {
	if q, ok := starvedQueues.Load(l); ok {
		return q.(*starvedQueue)
	}
	q := &starvedQueue{l: l, budget: max(1, int(l.Features().BufCount)/starvedPerBuffers)}
	q.runFn = q.run
	starvedQueues.Store(l, q)
	if _, err := l.AddShutdownHook(func() { starvedQueues.Delete(l) }); err != nil {
		// Shutting down already: the queue still serves this call.
		starvedQueues.Delete(l)
	}
	return q
}

// starve parks c, whose receive ended with ENOBUFS, until its loop's
// queue re-arms it. Must be called on c's loop.
func (c *Conn) starve() {
	q := starvedFor(c.l)
	starvedTotal.Add(1)
	q.conns = append(q.conns, c)
	q.schedule()
}

// schedule makes run the loop's next tail task. A loop that refuses it is
// terminating: every waiter is re-armed at once (armRecv skips closed
// connections).
func (q *starvedQueue) schedule() {
	if q.queued || q.head == len(q.conns) {
		return
	}
	q.queued = true
	if q.l.ExecuteAfterTurn(q.runFn) != nil {
		q.queued = false
		q.rearm(len(q.conns) - q.head)
	}
}

// run re-arms one turn's budget of waiters and schedules itself again for
// the rest.
func (q *starvedQueue) run() {
	q.queued = false
	q.rearm(q.budget)
	q.schedule()
}

// rearm re-arms up to n waiters, oldest first.
func (q *starvedQueue) rearm(n int) {
	for ; n > 0 && q.head < len(q.conns); n-- {
		c := q.conns[q.head]
		q.conns[q.head] = nil
		q.head++
		c.armRecv()
	}
	switch {
	case q.head == len(q.conns):
		q.conns, q.head = q.conns[:0], 0
	case q.head > len(q.conns)/2:
		k := copy(q.conns, q.conns[q.head:])
		clear(q.conns[k:])
		q.conns, q.head = q.conns[:k], 0
	}
}
