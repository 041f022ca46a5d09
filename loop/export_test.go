package loop

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/ringloop/ringloop/ring"
	"github.com/ringloop/ringloop/sched"
)

// Test seams for the external loop_test package.

// MakeUringUnavailable makes every io_uring driver construction fail with
// err until restore is called.
func MakeUringUnavailable(err error) (restore func()) {
	old := newUring
	newUring = func(driverConfig) (driver, error) { return nil, err }
	return func() { newUring = old }
}

// FailDriverAt makes the k-th driver construction (0-based, counting both
// backends) fail with err until restore is called.
func FailDriverAt(k int, err error) (restore func()) {
	oldU, oldE := newUring, newEpoll
	n := 0
	wrap := func(f func(driverConfig) (driver, error)) func(driverConfig) (driver, error) {
		return func(c driverConfig) (driver, error) {
			i := n
			n++
			if i == k {
				return nil, err
			}
			return f(c)
		}
	}
	newUring, newEpoll = wrap(oldU), wrap(oldE)
	return func() { newUring, newEpoll = oldU, oldE }
}

// InjectStall makes the loop's next n polls return at once with nothing,
// as a stalled ring would (driver.injectStall), and ends the wait the loop
// may be in now (an ordinary wakeup), so the stall starts at once instead of
// after that wait's timer or op completes.
func (l *Loop) InjectStall(n int) {
	l.drv.injectStall(n)
	l.waker.wake()
}

// Wake ends the loop's wait if it has published one, without giving it
// work: after a test moves the loop's injected clock, the loop reads it.
func (l *Loop) Wake() { l.waker.wake() }

// Waiting reports whether the loop has published a wait deadline (it is
// blocked in, or about to enter, a wait).
func (l *Loop) Waiting() bool { return l.waker.nextWakeup.Load() != awake }

// WaitDeadline returns the clock instant the loop's published wait ends
// at, or -1 while it has published none.
func (l *Loop) WaitDeadline() int64 { return l.waker.nextWakeup.Load() }

// Tid returns the loop thread's id, 0 before start and after termination.
func (l *Loop) Tid() int { return int(l.thread.id.Load()) }

// SetChooserCounter sets the round-robin counter of Next.
func (g *Group) SetChooserCounter(v uint64) { g.chooser.counter.Store(v) }

// ChooserUsesMask reports whether Next uses the power-of-two mask.
func (g *Group) ChooserUsesMask() bool { return g.chooser.mask != 0 || g.chooser.loops == 1 }

var _ = errors.New

// CountYields makes the loops call f (after yielding) each time they yield
// their P (yield.go), until restore is called. Set it before any loop starts.
func CountYields(f func()) (restore func()) {
	gosched = func() { runtime.Gosched(); f() }
	return func() { gosched = runtime.Gosched }
}

// The settings only tests set (testknobs.go), as options for the loop
// package's own tests.

// WithClock replaces the clock that drives timers, the ioRatio budget and
// the shutdown quiet period.
func WithClock(clk sched.Clock) Option { return func(c *config) { c.clock = clk } }

// WithTick sets the timer wheel's resolution.
func WithTick(d time.Duration) Option { return func(c *config) { c.tick = d } }

// WithMaxOps caps each loop's op table exactly.
func WithMaxOps(n uint32) Option { return func(c *config) { c.maxOps = n } }

// WithDrainTimeout bounds the drain of a terminating loop.
func WithDrainTimeout(d time.Duration) Option { return func(c *config) { c.drainTimeout = d } }

// WithKernel sets the kernel profile, as RINGLOOP=kernel= does.
func WithKernel(version string) Option { return func(c *config) { c.kernel = version } }

// ParseEnv parses a RINGLOOP value: the shared thread default, the kernel
// profile and the problems NewGroup reports.
func ParseEnv(v string) (shared bool, kernel string, problems []string) {
	s := parseEnv(v)
	return s.shared, s.kernel, s.problems
}

// ParkedOps returns the receives parked for buffers, oldest first. Must
// be called on the loop goroutine.
func (l *Loop) ParkedOps() []OpID {
	var ids []OpID
	l.io.parked.each(func(o *op) {
		if o.state == opParked {
			ids = append(ids, OpID(o.userData()))
		}
	})
	return ids
}

// LiveOps describes the loop's live ops (tag and state). Must be called on
// the loop goroutine.
func (l *Loop) LiveOps() []string {
	var out []string
	l.io.ops.each(func(o *op) {
		out = append(out, fmt.Sprintf("%v fd %d state %d multishot %v", o.tag, o.fd, o.state, o.multishot))
	})
	return out
}

// HideKernelFeatures makes the uring drivers made until restore is called
// find a kernel without receive bundles or a length on multishot receives,
// as named.
func HideKernelFeatures(bundle, multishotLen bool) (restore func()) {
	old := hiddenFeatures
	hiddenFeatures.bundle, hiddenFeatures.multishotLen = bundle, multishotLen
	return func() { hiddenFeatures = old }
}

// CountSubmissions makes the uring drivers made until restore is called
// count what their rings submit (Loop.Submissions).
func CountSubmissions() (restore func()) {
	old := countSubmissions
	countSubmissions = true
	return func() { countSubmissions = old }
}

// Submissions returns what l's rings submitted (CountSubmissions), summed
// over its rebuilds; zero counts on epoll. Must be called on the loop
// goroutine.
func (l *Loop) Submissions() ring.SubmitCounts {
	var c ring.SubmitCounts
	if d, ok := l.drv.(*uringDriver); ok {
		c.Add(d.closedSubmissions)
		if d.r != nil {
			c.Add(d.r.Submissions())
		}
	}
	return c
}

// LoseCancel marks op id as being canceled without asking the backend to
// stop it, as if its cancel had been lost on the way. Must be called on the
// loop goroutine.
func (l *Loop) LoseCancel(id OpID) {
	if o := l.io.ops.lookup(uint64(id)); o != nil && o.state == opInFlight {
		o.state = opCanceling
	}
}

// Nop starts an op that completes with Res 0 at the next poll: a round trip
// through the op table and the backend. Must be called on the loop goroutine.
func (l *Loop) Nop(c Completer) (OpID, error) {
	o, err := l.io.newOp(tagNop, 0, c)
	if err != nil {
		return 0, err
	}
	return l.io.startOp(o)
}

// OpsInFlight returns the number of ops not yet at their final completion.
// Must be called on the loop goroutine.
func (l *Loop) OpsInFlight() int {
	l.assertLoop()
	return l.io.ops.inFlight
}

// LimitsMultishotTotal reports whether l's multishot receives end after a
// total (a rotated receive is then a multishot one limited to one bundle).
func LimitsMultishotTotal(l *Loop) bool {
	d, ok := l.drv.(*uringDriver)
	return ok && d.multishotTotal > 0
}

// BeforeWait makes the loops call f after they chose to wait and before
// they publish its deadline, until restore is called. Set it before any
// loop starts.
func BeforeWait(f func()) (restore func()) {
	beforeWait = f
	return func() { beforeWait = nil }
}
