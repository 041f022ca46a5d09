package sched

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the test binary if the tests leave goroutines behind. The
// package starts none itself, so after the tests' own goroutines have
// finished the count must return to where it started.
func TestMain(m *testing.M) {
	before := countGoroutines()
	code := m.Run()
	if code == 0 {
		if err := checkGoroutines(before); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// countGoroutines counts goroutines, leaving out the one os/signal starts
// for the fuzzing engine's interrupt handling, which lives until exit.
func countGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "os/signal.loop") {
			n++
		}
	}
	return n
}

func checkGoroutines(want int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := countGoroutines()
		if n <= want {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("sched: %d goroutines left behind (started with %d):\n%s", n-want, want, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNoGoroutines checks that no type of the package starts a goroutine:
// creating and exercising each one leaves the goroutine count unchanged.
func TestNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	q := NewQueue(4)
	_ = q.Push(TaskFunc(func() {}))
	q.Drain(0, func(t Task) { t.Run() })
	w, _ := NewWheel(WheelConfig{Clock: NewManualClock(0)})
	tm, _ := w.NewTimer(1, func() {})
	_ = w.Add(tm)
	f := tm.Future()
	f.OnDone(func(struct{}, error) {})
	_ = f.Done()
	w.Advance(int64(time.Millisecond), func(t *Timer) bool { t.Run(); return true })
	ctx, cancel := contextWithTimeout(time.Millisecond)
	_, _ = NewFuture[int]().Wait(ctx)
	cancel()
	_ = SystemClock().Now()
	if n := runtime.NumGoroutine(); n > before { // fewer: an earlier test's goroutine just ended
		t.Fatalf("goroutines: %d before, %d after", before, n)
	}
}
