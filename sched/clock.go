package sched

import (
	"sync/atomic"
	"time"
)

// A Clock reads monotonic time as nanoseconds since an arbitrary origin fixed
// for the clock's life. Instants in this package (timer deadlines, the now
// passed to [Wheel.Advance]) are values of a Clock. Differences between two
// readings are elapsed time; the values never go backwards and are never
// affected by wall-clock changes.
type Clock interface {
	// Now returns the current instant in nanoseconds. It must be safe for
	// concurrent use.
	Now() int64
}

// processStart is the origin of [SystemClock]: package initialisation. It
// carries Go's monotonic reading, so time.Since never sees wall-clock steps.
var processStart = time.Now()

// systemClock reads the monotonic clock relative to processStart.
type systemClock struct{}

func (systemClock) Now() int64 { return int64(time.Since(processStart)) }

// SystemClock returns the process-wide monotonic clock: nanoseconds since the
// package was initialised, so its readings start near zero. Safe for
// concurrent use.
func SystemClock() Clock { return systemClock{} }

// A ManualClock is a [Clock] that moves only when told to, for deterministic
// tests: timers fire exactly when the test advances the clock past them. The
// zero value reads 0. Safe for concurrent use.
type ManualClock struct {
	now atomic.Int64
}

// NewManualClock returns a manual clock reading start. Safe for concurrent use.
func NewManualClock(start int64) *ManualClock {
	c := &ManualClock{}
	c.now.Store(start)
	return c
}

// Now returns the clock's current reading. Safe for concurrent use.
func (c *ManualClock) Now() int64 { return c.now.Load() }

// Advance moves the clock forward by d and returns the new reading. A
// negative d is treated as zero: a monotonic clock never goes backwards.
// Safe for concurrent use.
func (c *ManualClock) Advance(d time.Duration) int64 {
	if d < 0 {
		d = 0
	}
	return c.now.Add(int64(d))
}

// Set moves the clock to t if t is later than the current reading, and
// returns the reading after the call. Safe for concurrent use.
func (c *ManualClock) Set(t int64) int64 {
	for {
		cur := c.now.Load()
		if t <= cur {
			return cur
		}
		if c.now.CompareAndSwap(cur, t) {
			return t
		}
	}
}
