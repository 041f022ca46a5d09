package loop

import (
	"runtime"
	"time"
)

// yieldInterval is how often the loop goroutine hands its P back to the Go
// scheduler with runtime.Gosched (below the runtime's 10 ms forced-preemption
// slice). A loop that keeps its scheduling tick for 10 ms is force-preempted,
// often inside its wait, which keeps sysmon at its shortest sleep: every
// longer wait then has its P retaken, at the cost of extra thread wakeups.
// Yielding first keeps the tick moving
// (docs/loop.md, "The loop and the Go scheduler").
const yieldInterval = 5 * time.Millisecond

// maybeYield yields the P if the last yield is more than yieldInterval ago:
// at most 200 times a second. On a locked thread a yield hands the P to
// another thread and back (docs/decisions.md, "Yield interval").
func (l *Loop) maybeYield(now int64) {
	if now-l.lastYield < int64(yieldInterval) && now >= l.lastYield {
		return
	}
	l.lastYield = now
	gosched()
}

// gosched is runtime.Gosched; a test replaces it to count yields.
var gosched = runtime.Gosched

// sharedYieldAfter is how many completions a shared-thread loop delivers
// over the turns since it last waited before it yields the P: the size of a
// P's local run queue. A loop that keeps finding completions turns again
// at once, readying goroutine after goroutine (past that many, they
// overflow to the global run queue), and once it parks it runs again only
// after every one of them has run: the netpoller is asked when the P has
// nothing left. The replies they queue, and the requests that arrive
// meanwhile, then wait a whole round of handlers. A yield instead puts the
// loop in the global queue, which the scheduler looks at every 61
// goroutines, so it sends and receives again within the round (at 1,024
// connections this took the HTTP adapter's p99 from 1.3× package net's to
// below it; docs/netconn.md).
const sharedYieldAfter = 256

// yieldThread yields the P from a shared-thread loop, letting go of its
// thread for the yield as it does before a wait: locked, the yield would
// hand the P to another thread and back.
func (l *Loop) yieldThread(now int64) {
	l.lastYield = now
	l.thread.park()
	gosched()
	l.thread.resume()
}
