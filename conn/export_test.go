package conn

import "github.com/ringloop/ringloop/loop"

// Test seams.

// InboundCap returns the capacity of c's inbound buffer (0 when none was
// ever needed), read on c's loop.
func InboundCap(c *Conn) int {
	res := make(chan int, 1)
	if c.l.Execute(func() {
		if c.kept == nil {
			res <- 0
			return
		}
		res <- cap(c.kept.buf)
	}) != nil {
		return -1
	}
	return <-res
}

// NetBuffered returns how many received bytes nc holds for Read.
func NetBuffered(nc *NetConn) int {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.received.n
}

// NetDeadlineChecks returns how many checks the deadlines of every NetConn
// have queued so far.
func NetDeadlineChecks() int { return int(netDeadlineChecks.Load()) }

// DeadlineQueueLen returns the deadline checks pending on l.
func DeadlineQueueLen(l *loop.Loop) int {
	q := deadlinesOf(l)
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.heap)
}

// KeptOnLoop returns the bytes the connections of l keep and how many
// connections keep some, read on l.
func KeptOnLoop(l *loop.Loop) (kept, keepers int) {
	res := make(chan [2]int, 1)
	if l.Execute(func() {
		r := registryFor(l)
		res <- [2]int{r.keptTotal(), r.keepers}
	}) != nil {
		return -1, -1
	}
	v := <-res
	return v[0], v[1]
}

// KeptStallAge is how long a connection holding 64 KiB without progress
// takes to stall.
const KeptStallAge = keptStallAge

// OverloadedLoop reports whether l is past twice its buffer budget.
func OverloadedLoop(l *loop.Loop) bool { return registryFor(l).overloaded.Load() }

// BudgetPausedOnLoop returns how many connections of l the loop's budget
// of kept bytes has paused, read on l.
func BudgetPausedOnLoop(l *loop.Loop) int {
	res := make(chan int, 1)
	if l.Execute(func() { res <- int(registryFor(l).budgetPaused.Load()) }) != nil {
		return -1
	}
	return <-res
}

// NetWaiters returns how many goroutines are blocked in nc's Read or
// Write.
func NetWaiters(nc *NetConn) int { return int(nc.waiters.Load()) }

// NetPacketWaiters returns how many goroutines are blocked in np's reads
// or writes.
func NetPacketWaiters(np *NetPacketConn) int { return int(np.waiters.Load()) }
