package sched

import "sync/atomic"

// chunkLen is the number of slots per queue chunk. 1024 slots of 24 bytes make
// a 24 KiB chunk: large enough that a chunk boundary (one allocation, one CAS)
// is rare on the hot path, small enough that an idle queue costs little.
const chunkLen = 1024

// cacheLine separates the producer-side and consumer-side words of a Queue so
// that producers claiming positions do not keep invalidating the consumer's
// line. 64 bytes is the line size of amd64 and of most arm64 cores.
const cacheLine = 64

// A Queue is an unbounded or bounded multi-producer, single-consumer FIFO of
// tasks: the task queue of an event loop.
//
// Any goroutine may [Queue.Push]; exactly one goroutine at a time, the
// consumer, may [Queue.Pop] or [Queue.Drain]. Tasks pushed by one goroutine
// come out in the order it pushed them; tasks from different goroutines are
// ordered by the moment each claimed its position.
//
// Protocol. The queue is an endless array of positions cut into chunks of
// chunkLen slots linked in position order:
//
//	headChunk                                 tailChunk (a hint)
//	    │                                          │
//	    ▼                                          ▼
//	[ chunk base 0 ] ──next──► [ chunk base 1024 ] ──next──► nil
//	  consumed ▲ head                claimed ▲ tail
//
// The rules that keep it correct without a lock:
//
//   - A producer claims position p by incrementing tail (a CAS against the
//     limit when the queue is bounded), finds the chunk holding p by walking
//     next pointers from the tailChunk it loaded before claiming (so
//     tailChunk.base <= p), links a new chunk when next is nil (the loser of
//     that CAS drops its chunk), then writes the task and sets the slot's
//     full flag. The flag's atomic store publishes the task.
//   - The consumer reads slots from head in order. A slot whose flag is still
//     clear was claimed but not yet written: the consumer stops there, even if
//     later slots are full, so a producer's order is never broken. The
//     producer wakes the loop after Push returns, so the loop never sleeps on
//     a task it could not see.
//   - Chunks are never reused: a producer may hold a stale chunk pointer for
//     as long as it likes, and the garbage collector frees a chunk once the
//     consumer and every producer have moved past it. Allocation is thus one
//     24 KiB chunk per 1024 pushes, nothing per push.
//   - consumed is the head published for producers: the bound check reads
//     tail - consumed, and the consumer stores it once per batch, not per task.
type Queue struct {
	limit uint64 // maximum tail - consumed; 0 means unbounded; immutable

	_         [cacheLine]byte
	tail      atomic.Uint64         // next position to claim
	tailChunk atomic.Pointer[chunk] // some chunk with base <= tail; only moves forward

	_         [cacheLine]byte
	consumed  atomic.Uint64 // head as last published by the consumer
	head      uint64        // next position to consume; consumer only
	headChunk *chunk        // chunk holding head (or ending at it); consumer only
}

// chunk is one segment of the queue: the slots for positions
// [base, base+chunkLen).
type chunk struct {
	base  uint64
	next  atomic.Pointer[chunk]
	slots [chunkLen]slot
}

// slot holds one task. full goes 0 → 1 exactly once, after task is written;
// the consumer reads task only after seeing full == 1 and then clears task so
// the chunk does not keep a finished closure alive.
type slot struct {
	task Task
	full atomic.Uint32
}

// NewQueue returns an empty queue holding at most limit unconsumed tasks; a
// limit <= 0 means unbounded (Netty's default maxPendingTasks). Safe for
// concurrent use.
func NewQueue(limit int) *Queue {
	q := &Queue{}
	if limit > 0 {
		q.limit = uint64(limit)
	}
	c := &chunk{}
	q.tailChunk.Store(c)
	q.headChunk = c
	return q
}

// Push appends t. It returns [ErrNilTask] for a nil task and [ErrQueueFull]
// when the queue is bounded and full; either way nothing is queued, and every
// task accepted earlier stays queued. Push never blocks and allocates only
// when it opens a new chunk. Safe for concurrent use.
func (q *Queue) Push(t Task) error {
	if isNil(t) {
		return ErrNilTask
	}
	// Load the chunk hint before claiming: the hint never passes tail, so the
	// chunk loaded here starts at or before the position claimed below.
	c := q.tailChunk.Load()
	var p uint64
	if q.limit == 0 {
		p = q.tail.Add(1) - 1
	} else {
		for {
			// consumed first: tail read later is then at least consumed.
			done := q.consumed.Load()
			p = q.tail.Load()
			if p-done >= q.limit {
				return ErrQueueFull
			}
			if q.tail.CompareAndSwap(p, p+1) {
				break
			}
		}
	}
	for p >= c.base+chunkLen {
		c = q.nextChunk(c)
	}
	s := &c.slots[p-c.base]
	s.task = t
	s.full.Store(1)
	return nil
}

// nextChunk returns the chunk after c, linking a new one if there is none
// yet, and moves the tail hint from c to it.
func (q *Queue) nextChunk(c *chunk) *chunk {
	n := c.next.Load()
	if n == nil {
		n = &chunk{base: c.base + chunkLen}
		if !c.next.CompareAndSwap(nil, n) {
			n = c.next.Load()
		}
	}
	q.tailChunk.CompareAndSwap(c, n)
	return n
}

// Pop removes and returns the oldest visible task, or nil if there is none.
// It publishes the freed space at once. Must be called on the consumer
// goroutine.
func (q *Queue) Pop() Task {
	t := q.take()
	if t != nil {
		q.consumed.Store(q.head)
	}
	return t
}

// take removes the task at head if it is visible, without publishing the
// new head to producers. Consumer only.
func (q *Queue) take() Task {
	c := q.headChunk
	i := q.head - c.base
	if i == chunkLen {
		n := c.next.Load()
		if n == nil {
			return nil
		}
		q.headChunk, c, i = n, n, 0
	}
	s := &c.slots[i]
	if s.full.Load() == 0 {
		return nil
	}
	t := s.task
	s.task = nil
	q.head++
	return t
}

// drainPublishEvery bounds how many tasks Drain runs before it publishes the
// freed space, so producers of a bounded queue are not refused for a whole
// long batch.
const drainPublishEvery = 64

// Drain removes up to max visible tasks (every visible task, including those
// pushed while it runs, if max <= 0) and passes each to fn in queue order. It
// returns how many it removed. Drain takes no lock and publishes the freed
// space once per 64 tasks and at the end.
//
// fn must not panic; pass the task to [Run] inside fn to contain panics. A
// task is removed before fn sees it, so it is never handed out twice.
// Must be called on the consumer goroutine.
func (q *Queue) Drain(max int, fn func(Task)) int {
	n := 0
	for max <= 0 || n < max {
		t := q.take()
		if t == nil {
			break
		}
		n++
		if n%drainPublishEvery == 0 {
			q.consumed.Store(q.head)
		}
		fn(t)
	}
	if n > 0 {
		q.consumed.Store(q.head)
	}
	return n
}

// Len returns the number of tasks claimed by producers and not yet removed by
// the consumer. It counts tasks whose Push is still in progress, so Drain may
// see fewer. Safe for concurrent use.
func (q *Queue) Len() int {
	done := q.consumed.Load() // first, so the later tail is at least done
	return int(q.tail.Load() - done)
}

// Limit returns the queue's bound, or 0 if it is unbounded. Safe for
// concurrent use.
func (q *Queue) Limit() int { return int(q.limit) }
