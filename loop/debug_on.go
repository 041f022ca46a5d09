//go:build uringdebug

package loop

// debugChecks turns invariant breaks into panics a test can see: stale
// completions, and loop-only methods called off the loop goroutine.
const debugChecks = true

// assertLoop panics unless the caller runs on the loop goroutine (its
// locked OS thread).
func (l *Loop) assertLoop() {
	if tid := l.thread.id.Load(); tid == 0 || gettid() != tid {
		panic("loop: " + l.name + ": loop-only method called off the loop goroutine")
	}
}
