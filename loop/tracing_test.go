package loop_test

import (
	"bytes"
	"runtime/trace"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// traceHas reports whether the execution trace data holds s in its string
// table. The module has no trace parser (golang.org/x/exp/trace is not a
// dependency, and go tool trace is not run by tests), so this reads the
// format directly: since Go 1.22 a trace stores each string once, as its
// length (a uvarint, one byte below 128) followed by its bytes, and region
// and task names are such strings. Matching the length byte too keeps a
// short name such as "io" from matching inside a longer string.
func traceHas(data []byte, s string) bool {
	return bytes.Contains(data, append([]byte{byte(len(s))}, s...))
}

// takeTrace runs f under runtime/trace and returns the trace.
func takeTrace(t *testing.T, f func()) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skipf("runtime/trace: %v (a trace is already being taken)", err)
	}
	f()
	trace.Stop()
	return buf.Bytes()
}

// With runtime/trace on, each turn is a region "ringloop.turn" with
// sub-regions "wait", "io" and "tasks", in a task named after the loop; a
// trace taken with no loop running has none of them.
func TestTraceRegions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		quiet := takeTrace(t, func() { time.Sleep(20 * time.Millisecond) })
		if traceHas(quiet, "ringloop.turn") {
			t.Fatal("a trace with no loop running has a ringloop.turn region")
		}

		g := newGroup(t, b, loop.WithLoops(1), loop.WithName("tracedloop"))
		l := g.Loop(0)
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		runOn(t, l, func() {}) // started before the trace: its task is made when a turn sees tracing on
		data := takeTrace(t, func() {
			for range 10 {
				runOn(t, l, func() { time.Sleep(time.Millisecond) })
			}
			// A completion, for the io region: a receive of what the
			// peer sends.
			got := make(chan int32, 1)
			buf := make([]byte, 8)
			runOn(t, l, func() {
				if _, err := l.IO().Recv(fds[0], buf, 0, completerFunc(func(c *loop.Completion) { got <- c.Res })); err != nil {
					t.Errorf("Recv: %v", err)
					got <- -1
				}
			})
			unix.Write(fds[1], []byte("hi"))
			if res := <-got; res != 2 {
				t.Errorf("Recv result %d, want 2", res)
			}
			runOn(t, l, func() {})
		})
		for _, s := range []string{"ringloop.turn", "wait", "io", "tasks", l.String()} {
			if !traceHas(data, s) {
				t.Errorf("trace of %d bytes lacks %q", len(data), s)
			}
		}
	})
}
