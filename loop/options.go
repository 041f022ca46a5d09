package loop

import (
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ringloop/ringloop/ring"
	"github.com/ringloop/ringloop/sched"
)

// An Option configures a Group. Options are applied in order; later ones
// win. Zero values mean "the default", so a zero config behaves; values that
// cannot work are reported by NewGroup as errors wrapping ErrInvalidOption,
// never by a panic.
type Option func(*config)

// config holds every setting of a group. defaultConfig is the only place
// defaults live.
type config struct {
	loops          int
	name           string
	backend        Backend
	ioRatio        int
	ringEntries    uint32
	maxPending     int
	stallThreshold int
	tick           time.Duration
	logger         *slog.Logger
	bufCount       uint32
	bufSize        uint32
	clock          sched.Clock
	maxOps         uint32
	drainTimeout   time.Duration
	wait           WaitMode
	sharedThread   bool
	recvBundles    bool        // WithRecvBundles
	fairRecv       bool        // WithFairReceives
	kernel         string      // WithKernel, or RINGLOOP_KERNEL
	profile        ring.Kernel // kernel, parsed by validate
}

// Defaults.
const (
	// DefaultIORatio is Netty's default: I/O and tasks get equal time.
	DefaultIORatio = 50
	// DefaultStallThreshold is Netty's SELECTOR_AUTO_REBUILD_THRESHOLD.
	DefaultStallThreshold = 512
	// DefaultRingEntries is the SQ size of each ring; the CQ is twice that.
	DefaultRingEntries = 4096
	// DefaultBufCount and DefaultBufSize size each loop's provided-buffer
	// ring: 256 buffers of 4 KiB (1 MiB per loop).
	DefaultBufCount = 256
	DefaultBufSize  = 4096
	// DefaultDrainTimeout bounds how long a terminating loop waits for the
	// final completions of the ops it canceled.
	DefaultDrainTimeout = 5 * time.Second
)

func defaultConfig() config {
	count, size := bufRingFromEnv()
	return config{
		loops:          runtime.GOMAXPROCS(0),
		name:           "ringloop",
		backend:        BackendAuto,
		ioRatio:        DefaultIORatio,
		ringEntries:    DefaultRingEntries,
		stallThreshold: DefaultStallThreshold,
		tick:           sched.DefaultTick,
		logger:         slog.Default(),
		bufCount:       count,
		bufSize:        size,
		clock:          sched.SystemClock(),
		drainTimeout:   DefaultDrainTimeout,
		wait:           waitFromEnv(),
		sharedThread:   os.Getenv("RINGLOOP_THREAD") == "shared",
		recvBundles:    !envOff("RINGLOOP_RECV_BUNDLE"),
		fairRecv:       !envOff("RINGLOOP_RECV_FAIR"),
		kernel:         os.Getenv("RINGLOOP_KERNEL"),
	}
}

// WaitMode is how an idle locked-thread loop waits for I/O and for work
// handed to it (docs/loop.md, "Waiting").
type WaitMode int

const (
	// WaitKernel (the default) blocks the loop's OS thread in
	// io_uring_enter or epoll_wait: the kernel wakes that thread directly,
	// one thread wakeup per wait, the cheapest for a server whose work all
	// runs on its loops. But the loop keeps its P while it waits, until
	// the runtime's sysmon retakes it (20 µs to 10 ms later, after a tick
	// or two): other goroutines of the process that need a P then wait.
	WaitKernel WaitMode = iota
	// WaitNetpoll parks the loop goroutine on the Go runtime's netpoller
	// (the ring's registered eventfd, or the epoll instance), so its P is
	// free for other goroutines the moment it waits. Ending the wait hands
	// the P back to the loop's thread: two thread switches per wait
	// instead of one.
	WaitNetpoll
)

// String returns "kernel" or "netpoll".
func (m WaitMode) String() string {
	switch m {
	case WaitKernel:
		return "kernel"
	case WaitNetpoll:
		return "netpoll"
	}
	return "unknown"
}

// waitFromEnv is the default wait mode: WaitNetpoll if RINGLOOP_WAIT=netpoll
// is in the environment, else WaitKernel (other values are ignored).
func waitFromEnv() WaitMode {
	if os.Getenv("RINGLOOP_WAIT") == "netpoll" {
		return WaitNetpoll
	}
	return WaitKernel
}

// resolveWait is the wait mode a group's loops use.
func (c *config) resolveWait() WaitMode {
	if c.sharedThread {
		return WaitNetpoll
	}
	return c.wait
}

// WithWait sets how idle locked-thread loops wait: WaitKernel (the
// default, unless RINGLOOP_WAIT=netpoll is in the environment) or
// WaitNetpoll. docs/loop.md, "Waiting", compares them.
func WithWait(m WaitMode) Option { return func(c *config) { c.wait = m } }

// WithSharedThread(true) (or RINGLOOP_THREAD=shared in the environment,
// read when no option says otherwise) runs each loop as an ordinary goroutine: it locks
// an OS thread only while it runs a turn, and between turns it waits parked
// on the Go netpoller with no thread of its own (WaitNetpoll is implied).
// Handing work to such a loop, or waking a goroutine from it, is then a
// goroutine switch that the runtime can make on the same thread, instead of
// a wakeup of another thread.
//
// The io_uring ring then has no single issuer: it is set up without
// IORING_SETUP_SINGLE_ISSUER and DEFER_TASKRUN (its completions are
// finished on whichever thread submitted the op, as task work), and it does
// not register its fd. docs/loop.md, "Locked or shared thread", says when
// to pick which; the locked thread is the default.
func WithSharedThread(on bool) Option { return func(c *config) { c.sharedThread = on } }

// WithRecvBundles lets a provided-buffer receive fill several buffers per
// completion where the kernel can (IORING_RECVSEND_BUNDLE, Linux 6.10;
// Features.RecvBundle reports it): one completion for a burst instead of
// one per buffer. The Completer sees the same bytes in the same order,
// as one Data when the buffers lie together in memory and else as one
// completion per buffer (all but the last with ring.CQEFMore). On by
// default: on bulk transfers it saves up to half the CPU per request
// (docs/benchmarks-analysis.md); RINGLOOP_RECV_BUNDLE=off in the
// environment turns it off. io_uring only.
func WithRecvBundles(on bool) Option { return func(c *config) { c.recvBundles = on } }

// WithKernel runs the io_uring backend as it would run on Linux release
// version ("5.10", "5.15", "6.1", or a uname release such as
// "5.15.0-91-generic"; "" for the running kernel, the default): every
// probe is capped to what that release offers, so the loop takes the same
// fallbacks it would take there, one feature at a time, as listed in
// docs/kernel-support.md (the table in ring.KernelTable). A profile only
// takes features away: on a kernel older than the profile, what the
// kernel lacks is still missing. Below 5.6 (no opcode probe, nor the
// opcodes the loop needs) the io_uring backend is refused, and
// BackendAuto falls back to epoll. Features.Kernel reports the profile.
// RINGLOOP_KERNEL=<version> in the environment sets it for every group
// that does not pass this option. The epoll backend is the same on every
// release a profile names.
func WithKernel(version string) Option { return func(c *config) { c.kernel = version } }

// WithFairReceives rotates provided-buffer receives while the buffers run
// short. Once a receive has been parked for lack of buffers (see
// RecvProvided), every receive the loop resubmits from the parked queue
// runs as a single shot, and a receive armed meanwhile joins the back of
// the queue: each connection with bytes waiting gets one completion's
// worth (up to a bundle) per round, in order. Without it a multishot
// receive still armed keeps taking the buffers the loop recycles, while
// the parked ones get the few a turn resubmits, so the unluckiest
// connections wait many turns: at 1,024 connections with 64 KiB in
// flight each, the p99 latency was 2–3× that of a rotating loop, for the
// same throughput (docs/benchmarks-analysis.md, "Fair receives"). Once no
// receive is parked, receives are multishot again. On by default;
// RINGLOOP_RECV_FAIR=off in the environment turns it off. Ignored on the
// epoll backend, which parks nothing.
func WithFairReceives(on bool) Option { return func(c *config) { c.fairRecv = on } }

// envOff reports whether the environment variable turns a default off:
// "off", "0" or "false".
func envOff(name string) bool {
	switch os.Getenv(name) {
	case "off", "0", "false":
		return true
	}
	return false
}

// bufRingFromEnv is the default buffer ring geometry: RINGLOOP_BUF_RING=
// <count>x<size> if both parse (validate checks them), else the defaults.
func bufRingFromEnv() (count, size uint32) {
	c, s, ok := strings.Cut(os.Getenv("RINGLOOP_BUF_RING"), "x")
	n, err1 := strconv.ParseUint(c, 10, 32)
	m, err2 := strconv.ParseUint(s, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return DefaultBufCount, DefaultBufSize
	}
	return uint32(n), uint32(m)
}

// WithLoops sets the number of event loops. 0 means runtime.GOMAXPROCS(0):
// one loop per P, because each loop is a goroutine locked to an OS thread
// that competes with the Go scheduler's Ps for CPU; Netty's 2 × cores
// oversubscribes to cover JVM threads blocked in GC and safepoints, which Go
// loops do not need. Negative values are rejected. A power of two makes
// Group.Next a masked increment; any other count uses a modulo.
func WithLoops(n int) Option { return func(c *config) { c.loops = n } }

// WithName sets the group's name prefix. Loops are named
// "<name>-<group id>-<index>" (the OS thread shows the first 15 bytes).
// Empty means "ringloop"; names with spaces, '/' or control characters are
// rejected.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithBackend selects the I/O backend: BackendAuto (default: io_uring, epoll
// when io_uring is unusable), BackendUring or BackendEpoll.
func WithBackend(b Backend) Option { return func(c *config) { c.backend = b } }

// WithIORatio sets the percentage of loop time given to I/O, 1..100
// (default 50). After dispatching completions for ioTime, a loop runs tasks
// for ioTime*(100-ratio)/ratio; 100 runs every queued task each turn.
// Values outside 1..100 are rejected. See also Loop.SetIORatio.
func WithIORatio(r int) Option { return func(c *config) { c.ioRatio = r } }

// WithRingEntries sets the SQ size of each loop's ring (uring backend).
// 0 means 4096; the CQ is twice the SQ. Values above 32768 are rejected; the
// kernel rounds others up to a power of two.
func WithRingEntries(n uint32) Option {
	return func(c *config) { c.ringEntries = n }
}

// WithMaxPendingTasks bounds each loop's task queue: beyond n unrun tasks,
// Execute returns an error wrapping ErrRejected and ErrQueueFull. 0 (the
// default) means unbounded, like Netty; negative values are rejected.
func WithMaxPendingTasks(n int) Option {
	return func(c *config) { c.maxPending = n }
}

// WithStallThreshold sets how many consecutive empty early returns of a
// loop's wait make the stalled-ring detector rebuild the ring (default 512,
// Netty's SELECTOR_AUTO_REBUILD_THRESHOLD). 0 disables the detector;
// negative values are rejected.
func WithStallThreshold(n int) Option {
	return func(c *config) { c.stallThreshold = n }
}

// WithTick sets the timer wheel's resolution. 0 means 1 ms; negative values
// are rejected, as are ticks above one second.
func WithTick(d time.Duration) Option { return func(c *config) { c.tick = d } }

// WithLogger sets the logger for warnings (fallback, stalls, panics). nil
// means slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// maxBufRingBytes caps one loop's provided-buffer memory (count × size):
// 256 MiB, far above any useful ring, and well below what makes an
// allocation fail or the memlock limit refuse a registration.
const maxBufRingBytes = 256 << 20

// WithBufferRing sizes each loop's provided-buffer ring used by
// RecvProvided: count buffers (a power of two, at most 32768) of size bytes
// (1..1 MiB), at most 256 MiB in all. 0 for either means its default (256
// buffers of 4 KiB, or RINGLOOP_BUF_RING=<count>x<size> from the
// environment, e.g. 64x65536).
func WithBufferRing(count, size uint32) Option {
	return func(c *config) { c.bufCount, c.bufSize = count, size }
}

// WithClock replaces the monotonic clock that drives timers, the ioRatio
// budget and the shutdown quiet period. nil means sched.SystemClock(). It
// exists for deterministic tests.
func WithClock(clk sched.Clock) Option { return func(c *config) { c.clock = clk } }

// WithMaxOps caps each loop's op table (ops in flight at once), exactly. 0
// means no cap beyond 2^32-1. A loop needs an op for its own wakeups and
// one per armed receive, accept or send, so a cap of a few ops leaves
// little for connections.
func WithMaxOps(n uint32) Option { return func(c *config) { c.maxOps = n } }

// WithDrainTimeout bounds how long a terminating loop waits for the final
// completions of the ops it canceled (default 5 s). Ops still in flight then
// are orphaned: their records and buffers are kept forever rather than freed
// while the kernel may still write to them. Negative values are rejected.
func WithDrainTimeout(d time.Duration) Option {
	return func(c *config) { c.drainTimeout = d }
}

// validate checks every setting and fills zero values with defaults.
func (c *config) validate() error {
	d := defaultConfig()
	if c.loops < 0 {
		return invalidOption("loops %d (expected >= 0; 0 means GOMAXPROCS)", c.loops)
	}
	if c.loops == 0 {
		c.loops = d.loops
	}
	if c.loops > 1<<16 {
		return invalidOption("loops %d (expected <= 65536)", c.loops)
	}
	if c.name == "" {
		c.name = d.name
	}
	if len(c.name) > 64 || strings.ContainsFunc(c.name, func(r rune) bool {
		return r <= ' ' || r == '/' || r == 0x7f
	}) {
		return invalidOption("name %q (expected up to 64 printable characters without spaces or '/')", c.name)
	}
	switch c.backend {
	case BackendAuto, BackendUring, BackendEpoll:
	default:
		return invalidOption("backend %d (expected BackendAuto, BackendUring or BackendEpoll)", int(c.backend))
	}
	if c.wait != WaitKernel && c.wait != WaitNetpoll {
		return invalidOption("wait mode %d (expected WaitKernel or WaitNetpoll)", int(c.wait))
	}
	if err := checkIORatio(c.ioRatio); err != nil {
		return err
	}
	k, err := ring.ParseKernel(c.kernel)
	if err != nil {
		return invalidOption("kernel profile %q (WithKernel or RINGLOOP_KERNEL): %v", c.kernel, err)
	}
	c.profile = k
	if c.ringEntries == 0 {
		c.ringEntries = d.ringEntries
	}
	if c.ringEntries > ring.MaxEntries {
		return invalidOption("ring entries %d (expected <= %d)", c.ringEntries, ring.MaxEntries)
	}
	if c.maxPending < 0 {
		return invalidOption("max pending tasks %d (expected >= 0; 0 means unbounded)", c.maxPending)
	}
	if c.stallThreshold < 0 {
		return invalidOption("stall threshold %d (expected >= 0; 0 disables)", c.stallThreshold)
	}
	if c.tick < 0 || c.tick > time.Second {
		return invalidOption("tick %v (expected 0 < tick <= 1s; 0 means 1ms)", c.tick)
	}
	if c.tick == 0 {
		c.tick = d.tick
	}
	if c.logger == nil {
		c.logger = d.logger
	}
	if c.bufCount == 0 {
		c.bufCount = d.bufCount
	}
	if c.bufSize == 0 {
		c.bufSize = d.bufSize
	}
	if bits.OnesCount32(c.bufCount) != 1 || c.bufCount > 1<<15 {
		return invalidOption("buffer count %d (expected a power of two <= 32768)", c.bufCount)
	}
	if c.bufSize > 1<<20 {
		return invalidOption("buffer size %d (expected 1..1048576)", c.bufSize)
	}
	if total := uint64(c.bufCount) * uint64(c.bufSize); total > maxBufRingBytes {
		return invalidOption("buffer ring of %d × %d bytes = %d bytes per loop (expected at most %d)",
			c.bufCount, c.bufSize, total, maxBufRingBytes)
	}
	if c.clock == nil {
		c.clock = d.clock
	}
	if c.drainTimeout < 0 {
		return invalidOption("drain timeout %v (expected >= 0)", c.drainTimeout)
	}
	if c.drainTimeout == 0 {
		c.drainTimeout = d.drainTimeout
	}
	return nil
}

// checkIORatio validates an ioRatio, as Netty does ("expected: 0 < ioRatio
// <= 100").
func checkIORatio(r int) error {
	if r <= 0 || r > 100 {
		return invalidOption("ioRatio %d (expected 1..100)", r)
	}
	return nil
}
