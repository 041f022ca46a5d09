package loop_test

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// TestHugeDelays: delays too long to add to the clock saturate to "never":
// a timer of math.MaxInt64 does not fire, a fixed-rate timer with such an
// initial delay does not run, and the loop does not spin on them (its
// turns stay those of an idle loop).
func TestHugeDelays(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {})
		var runs atomic.Int64
		f := func() { runs.Add(1) }
		for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, 200 * 365 * 24 * time.Hour} {
			if _, err := l.Schedule(d, f); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ScheduleAtFixedRate(d, time.Second, f); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ScheduleAtFixedRate(time.Millisecond, d, f); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ScheduleWithFixedDelay(d, d, f); err != nil {
				t.Fatal(err)
			}
		}
		turns := l.Stats().Turns
		time.Sleep(300 * time.Millisecond)
		// The fixed-rate timers with a 1 ms first run run once each (3),
		// then wait their huge period.
		if n := runs.Load(); n != 3 {
			t.Fatalf("huge delays: %d runs in 300ms, want 3 (the 1 ms first runs)", n)
		}
		if d := l.Stats().Turns - turns; d > 20 {
			t.Fatalf("the loop turned %d times in 300ms with only far timers pending", d)
		}
	})
}
