package testutil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// WaitFor polls cond every millisecond until it holds, and fails tb if it
// does not within d; what names the awaited condition in the failure. It
// waits for an event, so d is a bound for a machine that is slow, not a
// time the test depends on: give it seconds.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Eventually(d, cond) {
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Eventually polls cond every millisecond until it holds (true) or d
// passes (false), for callers that report a failure themselves.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// WaitParked waits until at least n goroutines are blocked (in any state
// but running or runnable) with a frame whose function name contains frame
// on their stack, such as "(*UDPConn).ReadFrom", and fails tb if they are
// not within d. It tells a call that waits from one not yet made.
func WaitParked(tb testing.TB, d time.Duration, frame string, n int) {
	tb.Helper()
	WaitFor(tb, d, fmt.Sprintf("%d goroutines blocked in %s", n, frame), func() bool {
		return Parked(frame) >= n
	})
}

// Parked counts the goroutines blocked (in any state but running or
// runnable) with a frame whose function name contains frame on their stack.
func Parked(frame string) int {
	n := 0
	for _, g := range strings.Split(string(AllStacks()), "\n\n") {
		head, stack, _ := strings.Cut(g, "\n")
		_, state, ok := strings.Cut(head, " [")
		if !ok || strings.HasPrefix(state, "running") || strings.HasPrefix(state, "runnable") {
			continue
		}
		for _, line := range strings.Split(stack, "\n") {
			if !strings.HasPrefix(line, "\t") && strings.Contains(line, frame) {
				n++
				break
			}
		}
	}
	return n
}
