package loop

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/ring"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// A Group is a fixed set of event loops (Netty's EventLoopGroup). Work is
// spread over them with Next, a round robin. Creating a group opens each
// loop's backend (so setup errors surface from NewGroup) but starts no
// goroutine: a loop starts on first use.
type Group struct {
	id      uint64
	name    string // "<name>-<id>"
	cfg     *config
	loops   []*Loop
	chooser *chooser
	live    atomic.Int64 // loops not yet terminated
	done    chan struct{}

	watching atomic.Bool // the blocked-loop watchdog was started (blocked.go)
}

// groupIDs numbers groups from 1, process-wide (Netty's poolId).
var groupIDs atomic.Uint64

// NewGroup creates a group of event loops. Invalid options are reported as
// errors wrapping ErrInvalidOption. If a loop's backend cannot be created,
// the loops already built are shut down and the error, with its errno, is
// returned. Safe for concurrent use.
func NewGroup(opts ...Option) (*Group, error) {
	c := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, invalidOption("option %d is nil", i)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	reportEnv(c.logger, c.envProblems)
	id := groupIDs.Add(1)
	g := &Group{
		id:   id,
		name: fmt.Sprintf("%s-%d", c.name, id),
		cfg:  &c,
		done: make(chan struct{}),
	}
	g.loops = make([]*Loop, 0, c.loops)
	sel := backendSelector{backend: c.backend}
	for i := 0; i < c.loops; i++ {
		dcfg := driverConfig{
			ops:         newOpTable(c.maxOps),
			name:        loopName(g, i),
			ringEntries: c.ringEntries,
			bufCount:    c.bufCount,
			bufSize:     c.bufSize,
			dgramCount:  c.dgramBufCount,
			dgramSize:   c.dgramBufSize,
			logger:      c.logger,
			shared:      c.sharedThread,
			kernel:      c.profile,
			park:        &parkHooks{},
		}
		drv, err := sel.create(dcfg)
		if err == nil {
			var l *Loop
			if l, err = newLoop(g, i, drv, sel.reason, dcfg.ops); err == nil {
				if dcfg.shared {
					dcfg.park.park, dcfg.park.resume = l.thread.park, l.thread.resume
				}
				g.loops = append(g.loops, l)
				continue
			}
			drv.close()
		}
		g.abort()
		return nil, fmt.Errorf("loop: create %s: %w", dcfg.name, err)
	}
	if sel.reason != "" {
		attrs := []any{"group", g.name, "reason", sel.reason}
		if !c.profile.IsZero() {
			attrs = append(attrs, "kernel_profile", c.profile.String())
		}
		c.logger.Warn("loop: io_uring unavailable; using epoll", attrs...)
	}
	g.live.Store(int64(len(g.loops)))
	g.chooser = newChooser(len(g.loops))
	trackGroup(g)
	return g, nil
}

// abort terminates the loops built so far (none has started).
func (g *Group) abort() {
	g.live.Store(int64(len(g.loops)))
	for _, l := range g.loops {
		l.shutdown.begin(0, 0)
	}
	for _, l := range g.loops {
		<-l.done
	}
}

// backendSelector creates drivers for a group's loops: the first loop
// decides, for BackendAuto, between io_uring and the epoll fallback, and the
// other loops follow, so a group never mixes backends.
type backendSelector struct {
	backend Backend // requested; becomes BackendUring or BackendEpoll after the first loop
	reason  string  // why auto fell back to epoll
}

func (s *backendSelector) create(cfg driverConfig) (driver, error) {
	switch s.backend {
	case BackendUring:
		return newUring(cfg)
	case BackendEpoll:
		return newEpoll(cfg)
	}
	d, err := newUring(cfg)
	if err == nil {
		s.backend = BackendUring
		return d, nil
	}
	if !uringUnusable(err) {
		return nil, err
	}
	s.backend = BackendEpoll
	s.reason = err.Error()
	return newEpoll(cfg)
}

// uringUnusable reports whether err means io_uring cannot work here, so
// BackendAuto should fall back to epoll: not supported or missing features
// (ring.ErrNotSupported), ENOSYS (no io_uring, or hidden by seccomp), EPERM
// (seccomp, kernel.io_uring_disabled) or ENOMEM (RLIMIT_MEMLOCK on kernels
// before 5.12).
func uringUnusable(err error) bool {
	return errors.Is(err, ring.ErrNotSupported) || errors.Is(err, unix.ENOSYS) ||
		errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOMEM)
}

// loopTerminated is called once per loop; the last one closes done.
func (g *Group) loopTerminated() {
	if g.live.Add(-1) == 0 {
		untrackGroup(g)
		close(g.done)
	}
}

// String returns the group's name, "<name>-<id>". Safe for concurrent use.
func (g *Group) String() string { return g.name }

// Next returns the next loop in round-robin order: power-of-two groups use
// a masked counter, others a modulo. Safe for concurrent use.
func (g *Group) Next() *Loop { return g.loops[g.chooser.next()] }

// Len returns the number of loops. Safe for concurrent use.
func (g *Group) Len() int { return len(g.loops) }

// Loop returns loop i (0 <= i < Len()). Safe for concurrent use.
func (g *Group) Loop(i int) *Loop { return g.loops[i] }

// Loops returns the group's loops in index order (a copy). Safe for
// concurrent use.
func (g *Group) Loops() []*Loop { return append([]*Loop(nil), g.loops...) }

// Backend returns the backend the group's loops run on. Safe for concurrent
// use.
func (g *Group) Backend() Backend { return g.loops[0].Backend() }

// Features reports what the group's backend found in the kernel (as loop 0
// sees it; every loop of a group uses the same backend). Safe for
// concurrent use.
func (g *Group) Features() Features { return g.loops[0].Features() }

// Execute runs f on the next loop (Next().Execute(f)). Safe for concurrent
// use.
func (g *Group) Execute(f func()) error { return g.Next().Execute(f) }

// Schedule runs f once after d on the next loop (Next().Schedule). Safe for
// concurrent use.
func (g *Group) Schedule(d time.Duration, f func()) (*sched.Timer, error) {
	return g.Next().Schedule(d, f)
}

// rebuildRings asks every loop to rebuild its ring (Loop.rebuildRing). It
// returns the first error. Tests call it (testknobs.RebuildRings). Safe
// for concurrent use.
func (g *Group) rebuildRings() error {
	var first error
	for _, l := range g.loops {
		if err := l.rebuildRing(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ShutdownGracefully starts a graceful shutdown of every loop (see
// Loop.ShutdownGracefully) and returns at once; Done closes when all loops
// have terminated. Loops that never started terminate at once. Calling it
// again has no effect. Netty's defaults are DefaultQuietPeriod and
// DefaultShutdownTimeout. Safe for concurrent use.
func (g *Group) ShutdownGracefully(quiet, timeout time.Duration) error {
	if err := checkShutdownArgs(quiet, timeout); err != nil {
		return err
	}
	for _, l := range g.loops {
		l.shutdown.begin(quiet, timeout)
	}
	return nil
}

// Shutdown shuts the group down without a quiet period and waits for every
// loop to terminate, like http.Server.Shutdown: queued tasks run, then ops
// are canceled and reaped. ctx's deadline, if any, is the shutdown timeout
// (else DefaultShutdownTimeout); if ctx ends first, Shutdown returns
// ctx.Err() while the shutdown goes on. Called on one of the group's loops,
// it starts the shutdown and returns ErrInLoop instead of deadlocking.
// Safe for concurrent use.
func (g *Group) Shutdown(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background() // as Dial treats a nil ctx
	}
	timeout := DefaultShutdownTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), 0)
	}
	for _, l := range g.loops {
		l.shutdown.begin(0, timeout)
	}
	for _, l := range g.loops {
		if l.InLoop() {
			return ErrInLoop
		}
	}
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done returns a channel closed once every loop has terminated. Safe for
// concurrent use.
func (g *Group) Done() <-chan struct{} { return g.done }

// Stats returns a snapshot of every loop's counters and their sum. Safe for
// concurrent use.
func (g *Group) Stats() GroupStats {
	gs := GroupStats{Loops: make([]Stats, len(g.loops))}
	for i, l := range g.loops {
		gs.Loops[i] = l.Stats()
		gs.Total.add(&gs.Loops[i])
	}
	return gs
}
