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
