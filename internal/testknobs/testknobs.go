// Package testknobs holds the loop settings only tests set: a clock, a
// timer tick, an op-table cap, a drain deadline and a kernel profile, and
// the ring rebuild tests ask for. They are not part of package loop's API
// (no program needs them), but tests of other packages of the module do.
// Package loop fills these variables at init: the settings with
// constructors whose results are loop.Option values, as in
//
//	testknobs.Clock(clk).(loop.Option)
//
// and the rebuilds with functions taking a *loop.Loop or a *loop.Group. They
// are nil in a program that does not import package loop.
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

	// RebuildRing makes loop l (a *loop.Loop) replace its ring (or epoll
	// instance) and migrate every live op to the new one, as the
	// stalled-ring detector does. The work runs on the loop goroutine, as
	// a task; RebuildRing returns once it is queued, with an error
	// wrapping loop.ErrRejected if the loop takes no more tasks. Safe for
	// concurrent use.
	RebuildRing func(l any) error
	// RebuildRings does what RebuildRing does for every loop of group g
	// (a *loop.Group) and returns the first error.
	RebuildRings func(g any) error
)
