package loop

import (
	"runtime"
	"time"
)

// yieldInterval is how often the loop goroutine hands its P back to the Go
// scheduler with runtime.Gosched (hard-coded; below the runtime's 10 ms
// forced-preemption slice).
//
// Why: the Go runtime's sysmon thread watches every P. A goroutine that
// keeps the same scheduling tick for 10 ms is force-preempted, and if it is
// in a system call at that moment (the loop usually is: waiting in
// io_uring_enter or epoll_wait) its P is taken from it at once. Each such
// retake resets sysmon's back-off to its shortest sleep (20 µs), and at that
// cadence sysmon also catches and retakes every ordinary wait longer than
// two of its ticks whenever no other P is idle (GOMAXPROCS equal to the
// number of busy loops, e.g. 1). The retake wakes another thread to look for
// work, so each loop sleep then costs two or three extra thread wakeups on
// the loop's CPU. A loop that never yields hits the forced preemption every
// 10 ms and so never lets sysmon back off; yielding first keeps the tick
// moving, sysmon stays at its long sleeps, and waits end without a retake.
// Measured in docs/loop.md, "The loop and the Go scheduler".
const yieldInterval = 5 * time.Millisecond

// maybeYield yields the P if the last yield is more than yieldInterval ago.
// On a locked thread a yield costs a hand-off of the P to another thread and
// back: tens of microseconds, at most 200 times a second.
func (l *Loop) maybeYield(now int64) {
	if now-l.lastYield < int64(yieldInterval) && now >= l.lastYield {
		return
	}
	l.lastYield = now
	gosched()
}

// gosched is runtime.Gosched; a test replaces it to count yields.
var gosched = runtime.Gosched
