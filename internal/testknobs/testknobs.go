// Package testknobs holds the loop settings only tests set: a clock, a
// timer tick, an op-table cap, a drain deadline and a kernel profile. They
// are not options of package loop (no program needs them), but tests of
// other packages of the module do. Package loop fills these variables at
// init with constructors whose results are loop.Option values, as in
//
//	testknobs.Clock(clk).(loop.Option)
//
// They are nil in a program that does not import package loop.
package testknobs

import (
	"time"

	"github.com/ringloop/ringloop/sched"
)

var (
	// Clock replaces the monotonic clock that drives timers, the ioRatio
	// budget and the shutdown quiet period (nil: sched.SystemClock()).
	Clock func(clk sched.Clock) any
	// Tick sets the timer wheel's resolution (0: 1 ms; negative values
	// and values above one second are rejected).
	Tick func(d time.Duration) any
	// MaxOps caps each loop's op table (ops in flight at once) exactly; 0
	// means no cap beyond 2^32-1.
	MaxOps func(n uint32) any
	// DrainTimeout bounds how long a terminating loop waits for the final
	// completions of the ops it canceled (0: 5 s; negative values are
	// rejected). Ops still in flight then are orphaned.
	DrainTimeout func(d time.Duration) any
	// Kernel runs the io_uring backend as on Linux release version, as
	// RINGLOOP=kernel=<version> does ("": the running kernel); a
	// malformed version is rejected.
	Kernel func(version string) any
)
