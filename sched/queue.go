package sched

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// cacheLine separates the producers' words of a Queue from the consumer's,
// so that producers appending do not keep invalidating the consumer's line.
// 64 bytes is the line size of amd64 and of most arm64 cores.
const cacheLine = 64

// drainPublishEvery bounds how many tasks the consumer of an unbounded
// queue takes before it publishes its progress (read by Len only). A
// bounded queue publishes every task it takes, before running it.
const drainPublishEvery = 64

// chunkLen is the number of tasks per queue chunk: 256 interface values, a
// 4 KiB array, so that growing the queue never copies and a chunk is cheap to
// keep for reuse.
const chunkLen = 256

// maxSpareChunks bounds the chunks a queue keeps for reuse after a burst;
// beyond it, emptied chunks are left to the garbage collector.
const maxSpareChunks = 4

// A Queue is an unbounded or bounded multi-producer, single-consumer FIFO of
// tasks: the task queue of an event loop.
//
// Any goroutine may [Queue.Push]; exactly one goroutine at a time, the
// consumer, may [Queue.Pop] or [Queue.Drain]. Tasks pushed by one goroutine
// come out in the order it pushed them; tasks from different goroutines are
// ordered by the moment each acquired the producers' lock.
//
// Protocol: producers fill a chain of fixed-size chunks; the consumer takes
// the whole chain at once and runs it privately.
//
//	producers ─append under mu─► head chunk ─► … ─► tail chunk
//	consumer  ◄─ takes head…tail under mu, leaves a fresh chunk, once per batch
//
// The rules:
//
//   - A producer holds mu for one slot write (and, when bounded, one check of
//     pushed - consumed against the limit); when the tail chunk is full it
//     links a spare or new chunk. Growth never copies.
//   - The consumer runs tasks from the chain it took without any lock or
//     atomic per task. When the chain is used up and the ready flag says a
//     task is pending, it locks mu once, takes the pending chain, returns
//     the chunks it emptied to the spare list, and unlocks: one lock per
//     batch, however many tasks it holds. The flag is set by the push that
//     makes the pending chain non-empty, so an idle consumer polls one
//     read-mostly word instead of the producers' lock.
//   - Up to maxSpareChunks emptied chunks are reused, so a queue in steady
//     state allocates nothing.
//   - consumed counts tasks taken by the consumer. A bounded queue publishes
//     it as each task is taken, before the task runs, and the bound is
//     checked against it: the queue accepts a task whenever fewer than limit
//     tasks are not yet taken, so a task that is running (or blocked) does
//     not hold a slot. An unbounded queue publishes it every
//     drainPublishEvery tasks and at the end of each Pop or Drain, for Len.
//   - mu is a spin lock that yields (see spinLock): a producer preempted
//     while holding it delays the other producers, never loses a task.
//   - With a clock ([Queue.SetClock]) the push that makes the pending chain
//     non-empty records when it was made (queuedAt): one clock read per
//     batch, not per task, read before the lock is taken when the queue
//     looks empty. The consumer counts the batches it takes and keeps the
//     stamps of the first two until [Queue.BatchesTaken] asks for them:
//     when the oldest task of each was queued, for the loop's queue-delay
//     histogram.
type Queue struct {
	limit uint64 // maximum pushed - consumed; 0 means unbounded; immutable
	clock Clock  // stamps batches (SetClock); nil: no stamps; set before use

	_        [cacheLine]byte
	mu       spinLock
	head     *taskChunk  // first pending chunk; under mu
	tail     *taskChunk  // chunk producers append to; under mu
	spare    *taskChunk  // emptied chunks for reuse, linked by next; under mu
	nspare   int         // chunks on spare; under mu
	pushed   uint64      // tasks accepted since creation; under mu
	seen     uint64      // consumed as last loaded by a producer, <= consumed; under mu
	queuedAt int64       // clock reading of the push that made head non-empty; under mu
	ready    atomic.Bool // head holds a task; written under mu, read without it

	_        [cacheLine]byte
	consumed atomic.Uint64 // tasks taken, as last published by the consumer; read by producers

	_        [cacheLine]byte // keeps the consumer's per-task writes off consumed's line
	taken    uint64          // tasks taken; consumer only
	cur      *taskChunk      // chunk being consumed, first of the taken chain; consumer only
	next     int             // index of the next task in cur; consumer only
	emptied  *taskChunk      // consumed chunks to hand back at the next swap; consumer only
	nemptied int             // chunks on emptied, at most maxSpareChunks; consumer only
	batches  int             // batches taken since BatchesTaken last asked; consumer only
	stamps   [2]int64        // queuedAt of the first two of them; consumer only
}

// taskChunk is one link of the chain. n only grows while producers append
// and is reset when the chunk is reused.
type taskChunk struct {
	tasks [chunkLen]Task
	n     int
	next  *taskChunk
}

// NewQueue returns an empty queue holding at most limit tasks not yet taken
// by the consumer; a limit <= 0 means unbounded (Netty's default
// maxPendingTasks). Safe for concurrent use.
func NewQueue(limit int) *Queue {
	q := &Queue{}
	if limit > 0 {
		q.limit = uint64(limit)
	}
	q.head = &taskChunk{}
	q.tail = q.head
	return q
}

// SetClock makes q stamp each batch of tasks with the time its first task
// was pushed, read from c, for [Queue.BatchesTaken]. A batch is every task
// pushed between two takes of the consumer, so that costs one clock read per
// batch, not per task. It must be called before the queue is first used and
// not after; without it (or with a nil c) the queue reads no clock.
func (q *Queue) SetClock(c Clock) { q.clock = c }

// Push appends t. It returns [ErrNilTask] for a nil task and [ErrQueueFull]
// when the queue is bounded and full; either way nothing is queued, and every
// task accepted earlier stays queued. Push never waits for the consumer and
// allocates only when no spare chunk is left. On a queue with a clock
// ([Queue.SetClock]) the push that starts a batch reads it. Safe for
// concurrent use.
func (q *Queue) Push(t Task) error {
	if isNil(t) {
		return ErrNilTask
	}
	if q.clock != nil && !q.ready.Load() {
		// Most likely the first task of a batch: read the clock before
		// the lock, not while holding it. A producer that then finds it
		// is not first has wasted one read; one that waited for the
		// lock meanwhile stamps its batch with when its Push began.
		return q.push(t, q.clock.Now(), true)
	}
	return q.push(t, 0, false)
}

// PushAt is Push for a caller that has just read the queue's clock: now,
// that reading, stamps the batch if t starts one, and the queue reads no
// clock itself. The consumer queuing its own work (an event loop moving
// due timers, with the instant it advanced its wheel to) uses it. On a
// queue without a clock now is ignored. Safe for concurrent use.
func (q *Queue) PushAt(t Task, now int64) error {
	if isNil(t) {
		return ErrNilTask
	}
	return q.push(t, now, true)
}

// push appends t, stamping a new batch with now when stamped, else with a
// clock read of its own.
func (q *Queue) push(t Task, now int64, stamped bool) error {
	q.mu.Lock()
	if q.limit != 0 && q.pushed-q.seen >= q.limit {
		// Full as far as this producer knew: look at the consumer's
		// progress (only now, so the consumer's line is not pulled over
		// on every push).
		q.seen = q.consumed.Load()
		if q.pushed-q.seen >= q.limit {
			q.mu.Unlock()
			return ErrQueueFull
		}
	}
	c := q.tail
	if c.n == chunkLen {
		c = q.spare
		if c != nil {
			q.spare, c.next = c.next, nil
			q.nspare--
		} else {
			c = &taskChunk{}
		}
		q.tail.next = c
		q.tail = c
	}
	if q.head.n == 0 {
		q.ready.Store(true) // once per batch, not per task
		if q.clock != nil {
			if !stamped {
				// The queue looked non-empty before the lock, but the
				// consumer took the batch meanwhile.
				now = q.clock.Now()
			}
			q.queuedAt = now
		}
	}
	c.tasks[c.n] = t
	c.n++
	q.pushed++
	q.mu.Unlock()
	return nil
}

// refill takes the pending chain and reports whether it holds a task.
// Consumer only, with cur used up.
func (q *Queue) refill() bool {
	if !q.ready.Load() {
		return false // nothing pending: do not contend with producers
	}
	q.mu.Lock()
	chain := q.head
	fresh := q.spare
	if fresh != nil {
		q.spare, fresh.next = fresh.next, nil
		q.nspare--
	}
	for c := q.emptied; c != nil && q.nspare < maxSpareChunks; {
		next := c.next
		c.next, q.spare = q.spare, c
		q.nspare++
		c = next
	}
	if fresh == nil {
		fresh = &taskChunk{} // rare: spares exhausted by a burst
	}
	q.head, q.tail = fresh, fresh
	q.ready.Store(false)
	at := q.queuedAt
	q.mu.Unlock()
	q.emptied, q.nemptied = nil, 0
	q.cur, q.next = chain, 0
	if q.clock != nil {
		if q.batches < len(q.stamps) {
			q.stamps[q.batches] = at
		}
		q.batches++
	}
	return true
}

// BatchesTaken reports the batches of tasks the consumer took since the
// previous call, and forgets them: how many, and when the first two were
// queued. A batch is every task pushed between two takes of the consumer;
// the consumer takes it whole, when it has run out of the previous one,
// and its time is the queue clock's reading as its first (oldest) task was
// pushed. first is the oldest task taken since the previous call; second,
// when n > 1, the oldest of those queued after the consumer took first's
// batch. On a queue without a clock ([Queue.SetClock]) n is 0. It reads no
// clock and takes no lock. Must be called on the consumer goroutine.
func (q *Queue) BatchesTaken() (n int, first, second int64) {
	n, first, second = q.batches, q.stamps[0], q.stamps[1]
	q.batches = 0
	return n, first, second
}

// take removes the next task, or returns nil if none is queued. It clears
// each slot it reads so a finished task is not kept alive. Consumer only.
func (q *Queue) take() Task {
	for {
		if c := q.cur; c != nil {
			if q.next < c.n {
				t := c.tasks[q.next]
				c.tasks[q.next] = nil
				q.next++
				q.taken++
				return t
			}
			q.cur, q.next = c.next, 0
			c.n, c.next = 0, nil
			if q.nemptied < maxSpareChunks {
				c.next, q.emptied = q.emptied, c
				q.nemptied++
			}
			continue
		}
		if !q.refill() {
			return nil
		}
	}
}

// Pop removes and returns the oldest task, or nil if there is none. It
// publishes the freed space at once. Must be called on the consumer
// goroutine.
func (q *Queue) Pop() Task {
	t := q.take()
	if t != nil {
		q.consumed.Store(q.taken)
	}
	return t
}

// Drain removes up to max tasks (every task, including those pushed while it
// runs, if max <= 0) and passes each to fn in queue order. It returns how
// many it removed. Drain takes the producers' lock once per batch of pushed
// tasks, never per task. On a bounded queue each task's slot is free for
// producers before fn sees the task; an unbounded queue publishes its
// progress (for Len) once per 64 tasks and at the end.
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
		if q.limit != 0 || n%drainPublishEvery == 0 {
			q.consumed.Store(q.taken)
		}
		fn(t)
	}
	if n > 0 {
		q.consumed.Store(q.taken)
	}
	return n
}

// Len returns the number of tasks accepted and not yet taken by the
// consumer, as of the consumer's last publication. Safe for concurrent use.
func (q *Queue) Len() int {
	done := q.consumed.Load() // first, so pushed read later is at least done
	q.mu.Lock()
	n := q.pushed - done
	q.mu.Unlock()
	return int(n)
}

// Limit returns the queue's bound, or 0 if it is unbounded. Safe for
// concurrent use.
func (q *Queue) Limit() int { return int(q.limit) }

// spinLock is the producers' lock. Its critical sections are a few
// instructions long (one slot write), so a waiter first retries and yields
// its processor a few times rather than parking on a futex as sync.Mutex
// soon does under contention: parking and waking cost far more than the
// section it protects. If the holder stays away longer (its thread was
// descheduled by the kernel), the waiter parks in the mutex instead of
// burning the processor the holder needs.
type spinLock struct {
	mu sync.Mutex
}

// lockYields is how many times a waiter yields before it parks.
const lockYields = 16

func (l *spinLock) Lock() {
	for range lockYields {
		if l.mu.TryLock() {
			return
		}
		runtime.Gosched()
	}
	l.mu.Lock()
}

func (l *spinLock) Unlock() { l.mu.Unlock() }
