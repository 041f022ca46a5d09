package conn

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// NetConn and NetPacketConn deadlines are checked by one queue per loop: a
// min-heap of (instant, connection, direction) entries, with one timer on
// the loop's wheel armed for the earliest (a timer and closure per
// deadline would cost more for the whole life of an idle connection whose
// server keeps a read deadline). Entries are never removed early: a
// deadline moved later or cleared leaves its entry to come due, and the
// owner's state (fire) says whether anything expired; a check that finds
// the deadline moved later queues itself again, so pushing a deadline
// forward on every request queues about one check per deadline period.

// A deadline is one direction's deadline, guarded by its owner's mutex.
// Instants are nanoseconds on the monotonic clock since started.
type deadline struct {
	at      int64 // the deadline, if set
	armedAt int64 // when the earliest pending check comes due; 0: none is pending (a pending instant is > 0)
}

// netDeadlineChecks counts the checks deadlines queued, for tests.
var netDeadlineChecks atomic.Int64

// started is the origin of deadline instants, and a time every
// deadline before which has passed without reading the clock (net/http
// sets such deadlines to interrupt a Read).
var started = time.Now()

// sinceStarted returns t as an instant.
func sinceStarted(t time.Time) int64 { return int64(t.Sub(started)) }

// A deadliner is what a deadline check calls: a NetConn or a NetPacketConn.
type deadliner interface {
	fire(dir int, at int64)
}

// A deadlineCheck asks for owner's deadline in direction dir to be checked
// at at.
type deadlineCheck struct {
	at    int64
	owner deadliner
	dir   uint8
}

// deadlineHeap is a min-heap of entries on at.
type deadlineHeap []deadlineCheck

func (h *deadlineHeap) push(e deadlineCheck) {
	*h = append(*h, e)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].at <= a[i].at {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *deadlineHeap) pop() deadlineCheck {
	a := *h
	e := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a[last] = deadlineCheck{} // let the connection go
	a = a[:last]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < len(a) && a[l].at < a[m].at {
			m = l
		}
		if r < len(a) && a[r].at < a[m].at {
			m = r
		}
		if m == i {
			break
		}
		a[m], a[i] = a[i], a[m]
		i = m
	}
	*h = a
	return e
}

// A deadlineQueue holds one loop's pending deadline checks. Safe for
// concurrent use: deadlines are set on any goroutine.
type deadlineQueue struct {
	l *loop.Loop

	mu      sync.Mutex
	heap    deadlineHeap
	timerAt int64 // the instant the latest timer was armed for; 0: none pending
}

// add queues a check of nc's deadline dir at at (a future instant, so > 0).
// Caller holds nc.mu.
func (q *deadlineQueue) add(nc deadliner, dir int, at int64) {
	q.mu.Lock()
	q.heap.push(deadlineCheck{at: at, owner: nc, dir: uint8(dir)})
	arm := q.timerAt == 0 || at < q.timerAt
	if arm {
		q.timerAt = at
	}
	q.mu.Unlock()
	if arm {
		q.arm(at)
	}
}

// arm schedules a run of expire at at.
func (q *deadlineQueue) arm(at int64) {
	f := func() { q.expire(at) }
	wait := time.Duration(at - sinceStarted(time.Now()))
	if _, err := q.l.Schedule(wait, f); err != nil {
		// The loop shut down: the runtime's timer instead.
		time.AfterFunc(wait, f)
	}
}

// expire runs when the timer armed for at fires: it takes every entry due
// and checks its deadline, and arms the timer for the next entry if no
// timer is pending.
func (q *deadlineQueue) expire(at int64) {
	now := sinceStarted(time.Now())
	var buf [16]deadlineCheck
	due := buf[:0]
	q.mu.Lock()
	if q.timerAt == at {
		q.timerAt = 0
	}
	for len(q.heap) > 0 && q.heap[0].at <= now {
		due = append(due, q.heap.pop())
	}
	next := int64(0)
	if len(q.heap) > 0 && q.timerAt == 0 {
		next = q.heap[0].at
		q.timerAt = next
	}
	if cap(q.heap) > 64 && len(q.heap) < cap(q.heap)/4 {
		q.heap = append(deadlineHeap(nil), q.heap...) // give the memory back after a mass close
	}
	q.mu.Unlock()
	if next != 0 {
		q.arm(next)
	}
	for _, e := range due {
		e.owner.fire(int(e.dir), e.at)
	}
}

// deadlinesOf returns l's deadline queue.
func deadlinesOf(l *loop.Loop) *deadlineQueue { return &registryFor(l).deadlines }

// deadlines are the read and write deadlines of a NetConn or a
// NetPacketConn, guarded by their owner's mutex.
type deadlines struct {
	byDir  [2]deadline // by direction (dirRead, dirWrite)
	set    [2]bool     // a deadline is set
	passed [2]bool     // it passed: blocked and later calls fail
}

// setLocked records deadline t (zero: none) for dir and reports whether it
// has passed already. A future one gets a check on l's deadline queue for
// owner when queue is set (a direction whose calls never block needs none:
// they look at the deadline themselves, passedLocked).
func (s *deadlines) setLocked(l *loop.Loop, owner deadliner, dir int, t time.Time, queue bool) (passed bool) {
	d := &s.byDir[dir]
	set := !t.IsZero()
	if set {
		d.at = sinceStarted(t)
		passed = t.Before(started) || d.at <= sinceStarted(time.Now())
		if !passed && queue {
			s.armLocked(l, owner, dir)
		}
	}
	s.set[dir], s.passed[dir] = set, passed
	return passed
}

// armLocked makes sure a check of dir comes due no later than its
// deadline, which is in the future (so > 0).
func (s *deadlines) armLocked(l *loop.Loop, owner deadliner, dir int) {
	d := &s.byDir[dir]
	if d.armedAt != 0 && d.at >= d.armedAt {
		return
	}
	d.armedAt = d.at
	netDeadlineChecks.Add(1)
	deadlinesOf(l).add(owner, dir, d.at)
}

// fireLocked handles a check of dir queued for at, and reports whether the
// deadline expired with it (closed: the owner is closed; nothing expires).
// A deadline moved later queues its check again.
func (s *deadlines) fireLocked(l *loop.Loop, owner deadliner, dir int, at int64, closed bool) (expired bool) {
	d := &s.byDir[dir]
	if d.armedAt == at {
		d.armedAt = 0
	}
	switch {
	case !s.set[dir] || s.passed[dir] || closed:
	case d.at <= sinceStarted(time.Now()):
		s.passed[dir] = true
		return true
	default:
		s.armLocked(l, owner, dir)
	}
	return false
}

// passedLocked reports whether dir's deadline has passed, looking at the
// clock for a direction without queued checks.
func (s *deadlines) passedLocked(dir int) bool {
	return s.passed[dir] || s.set[dir] && s.byDir[dir].at <= sinceStarted(time.Now())
}
