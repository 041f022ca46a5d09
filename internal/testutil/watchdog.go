package testutil

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// Watchdog fails tb and ends the test binary, after writing every
// goroutine's stack to stderr, if the test is still running when d elapses
// (cf. tokio-uring's completion_overflow test). A test blocked in a system
// call cannot be failed politely, so the watchdog panics from its own
// goroutine, which stops the process with a non-zero status. tb.Cleanup
// disarms it.
func Watchdog(tb testing.TB, d time.Duration) {
	tb.Helper()
	name := tb.Name()
	t := time.AfterFunc(d, func() {
		fmt.Fprintf(os.Stderr, "watchdog: %s still running after %v; goroutines:\n%s\n",
			name, d, AllStacks())
		tb.Errorf("watchdog: %s exceeded %v", name, d)
		panic("watchdog: " + name + " exceeded " + d.String())
	})
	tb.Cleanup(func() { t.Stop() })
}

// AllStacks returns the stacks of every goroutine, as runtime.Stack.
func AllStacks() []byte {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}
