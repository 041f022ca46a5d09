//go:build !uringdebug

package loop

// debugChecks is false in normal builds: stale completions are counted,
// not fatal, and loop affinity is not checked (see debug_on.go).
const debugChecks = false

func (l *Loop) assertLoop() {}
