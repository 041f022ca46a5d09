package loop

import (
	"log/slog"
	"math/bits"
	"os"
	"runtime"
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
// defaults live. tick, clock, maxOps, drainTimeout and kernel have no
// option: the tests set them (testknobs.go), and kernel comes from
// RINGLOOP=kernel= (env.go).
type config struct {
	loops            int
	name             string
	backend          Backend
	ioRatio          int
	ringEntries      uint32
	maxPending       int
	stallThreshold   int
	tick             time.Duration
	logger           *slog.Logger
	bufCount         uint32
	bufSize          uint32
	dgramBufCount    uint32
	dgramBufSize     uint32
	clock            sched.Clock
	maxOps           uint32
	drainTimeout     time.Duration
	sharedThread     bool
	blockedThreshold time.Duration
	keptBudget       int         // WithBufferBudget
	queuedBudget     int         // WithBufferBudget
	kernel           string      // RINGLOOP=kernel=
	profile          ring.Kernel // kernel, parsed by validate
	envProblems      []string    // what NewGroup reports of RINGLOOP (env.go)
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
	// DefaultDatagramBufCount and DefaultDatagramBufSize size each loop's
	// provided buffers for datagram receives: 64 buffers of 68 KiB, so
	// that any datagram (65,535 bytes at most, with the room for control
	// messages and the 128 bytes of header and source address) arrives
	// whole. They are made with a loop's first datagram receive, and the
	// memory of a buffer is resident only as far as datagrams have
	// filled it (WithDatagramBuffers).
	DefaultDatagramBufCount = 64
	DefaultDatagramBufSize  = 68 << 10
	// DefaultDrainTimeout bounds how long a terminating loop waits for the
	// final completions of the ops it canceled.
	DefaultDrainTimeout = 5 * time.Second
	// DefaultKeptBudget and DefaultQueuedBudget bound, per loop, the
	// received bytes its connections keep and the bytes they queue for
	// sending (WithBufferBudget).
	DefaultKeptBudget   = 32 << 20
	DefaultQueuedBudget = 1 << 20
)

func defaultConfig() config {
	env := parseEnv(os.Getenv(envName))
	return config{
		loops:            runtime.GOMAXPROCS(0),
		name:             "ringloop",
		backend:          BackendAuto,
		ioRatio:          DefaultIORatio,
		ringEntries:      DefaultRingEntries,
		stallThreshold:   DefaultStallThreshold,
		tick:             sched.DefaultTick,
		logger:           slog.Default(),
		bufCount:         DefaultBufCount,
		bufSize:          DefaultBufSize,
		dgramBufCount:    DefaultDatagramBufCount,
		dgramBufSize:     DefaultDatagramBufSize,
		clock:            sched.SystemClock(),
		drainTimeout:     DefaultDrainTimeout,
		sharedThread:     env.shared,
		blockedThreshold: DefaultBlockedThreshold,
		keptBudget:       DefaultKeptBudget,
		queuedBudget:     DefaultQueuedBudget,
		kernel:           env.kernel,
		envProblems:      env.problems,
	}
}

// WithSharedThread(true) runs each loop as an ordinary goroutine: it locks
// an OS thread only while it runs a turn, and between turns it waits parked
// on the Go netpoller. Handing work to such a loop, or waking a goroutine
// from it, is then a goroutine switch rather than a thread wakeup. Its ring
// has no single issuer (no SINGLE_ISSUER or DEFER_TASKRUN, no registered
// ring fd). It is the recommended configuration for groups that serve the
// net.Conn adapters (conn.ListenNet, conn.DialNet), whose handlers run on
// goroutines. The default, false (a loop locked to its own thread for life,
// waiting in the kernel), suits work done in callbacks; it comes from
// RINGLOOP=thread=shared|locked when no option says otherwise.
// docs/loop.md, "Waiting", says when to pick which.
func WithSharedThread(on bool) Option { return func(c *config) { c.sharedThread = on } }

// WithLoops sets the number of event loops. 0 means runtime.GOMAXPROCS(0)
// (docs/decisions.md, "Default loop count", says why); negative values are
// rejected. A power of two makes Group.Next a masked increment; any other
// count uses a modulo.
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
// Values outside 1..100 are rejected.
func WithIORatio(r int) Option { return func(c *config) { c.ioRatio = r } }

// WithRingEntries sets the SQ size of each loop's ring (uring backend).
// 0 means 4096; the CQ is twice the SQ. Values above 32768 are rejected; the
// kernel rounds others up to a power of two.
func WithRingEntries(n uint32) Option { return func(c *config) { c.ringEntries = n } }

// WithMaxPendingTasks bounds each loop's task queue: beyond n unrun tasks,
// Execute returns an error wrapping ErrRejected and ErrQueueFull. 0 (the
// default) means unbounded, like Netty; negative values are rejected.
func WithMaxPendingTasks(n int) Option { return func(c *config) { c.maxPending = n } }

// WithStallThreshold sets how many consecutive empty early returns of a
// loop's wait make the stalled-ring detector rebuild the ring (default 512,
// Netty's SELECTOR_AUTO_REBUILD_THRESHOLD). 0 disables the detector;
// negative values are rejected.
func WithStallThreshold(n int) Option { return func(c *config) { c.stallThreshold = n } }

// WithBlockedThreshold sets how long a loop may stay in one turn, outside
// its wait, before the blocked-loop detector reports it: a callback (task,
// timer, completion, hook) that blocks its loop for that long is logged
// once at Warn, "loop: blocked", with what the loop runs (Loop.Running)
// and the loop goroutine's stack, then "loop: unblocked" when the loop
// moves on, and counted in Stats.BlockedEpisodes. The default is
// DefaultBlockedThreshold (200 ms); 0 turns the detector off; negative
// values are rejected. The detector is a goroutine per group, started
// with the group's first loop and ended with the group, that looks every
// threshold/4 (at least every 5 ms); it costs the loop one atomic store
// per callback and no clock read.
func WithBlockedThreshold(d time.Duration) Option {
	return func(c *config) { c.blockedThreshold = d }
}

// WithLogger sets the logger for warnings (fallback, stalls, panics). nil
// means slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// maxBufRingBytes caps one loop's provided-buffer memory (count × size):
// 256 MiB, far above any useful ring, and well below what makes an
// allocation fail or the memlock limit refuse a registration.
const maxBufRingBytes = 256 << 20

// WithBufferRing sizes each loop's provided-buffer ring used by
// RecvProvided (stream receives): count buffers (a power of two, at most
// 32768) of size bytes (1..1 MiB), at most 256 MiB in all. 0 for either
// means its default (256 buffers of 4 KiB). Datagram receives have buffers
// of their own (WithDatagramBuffers).
func WithBufferRing(count, size uint32) Option {
	return func(c *config) { c.bufCount, c.bufSize = count, size }
}

// WithBufferBudget bounds, per loop, the bytes the connections of the loop
// keep received (input their handlers have not consumed, or read while
// paused) and the bytes they queue for sending, each in all (defaults
// DefaultKeptBudget, 32 MiB, and DefaultQueuedBudget, 1 MiB; 0 means the
// default; negative values are rejected). The loop itself holds no such
// bytes: package conn enforces the budget, by pausing reads on the
// connections that cost the most for the least progress until the total
// drains, never by resetting one (docs/security.md, "The model").
func WithBufferBudget(kept, queued int) Option {
	return func(c *config) { c.keptBudget, c.queuedBudget = kept, queued }
}

// BufferBudget returns the loop's budget of kept and queued bytes
// (WithBufferBudget). Safe for concurrent use.
func (l *Loop) BufferBudget() (kept, queued int) { return l.cfg.keptBudget, l.cfg.queuedBudget }

// WithDatagramBuffers sizes each loop's provided buffers for datagram
// receives (RecvmsgProvided): count buffers (a power of two, at most
// 32768) of size bytes (1..1 MiB), at most 256 MiB in all. 0 for either
// means its default: 64 buffers of 68 KiB, which hold any UDP datagram
// whole. A datagram is whole up to size less 128 bytes (IO.MaxDatagram);
// a longer one arrives truncated. count bounds how many datagrams one
// socket's receive takes before the loop has handled them (more wait in
// the socket). A loop makes the buffers with its first datagram receive
// (loops that receive none pay nothing) as address space: a buffer's
// pages become resident as datagrams are written into them and stay so,
// so a loop that only ever sees small datagrams holds about one page per
// buffer, and one that sees datagrams of 64 KiB up to count × size.
func WithDatagramBuffers(count, size uint32) Option {
	return func(c *config) { c.dgramBufCount, c.dgramBufSize = count, size }
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
	if err := checkIORatio(c.ioRatio); err != nil {
		return err
	}
	k, err := ring.ParseKernel(c.kernel)
	if err != nil {
		return invalidOption("kernel profile %q: %v", c.kernel, err)
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
	if c.blockedThreshold < 0 {
		return invalidOption("blocked threshold %v (expected >= 0; 0 disables)", c.blockedThreshold)
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
	if err := checkBuffers("buffer", "buffer ring", c.bufCount, c.bufSize); err != nil {
		return err
	}
	if c.keptBudget < 0 || c.queuedBudget < 0 {
		return invalidOption("buffer budget kept %d, queued %d (expected >= 0; 0 means the default)", c.keptBudget, c.queuedBudget)
	}
	if c.keptBudget == 0 {
		c.keptBudget = d.keptBudget
	}
	if c.queuedBudget == 0 {
		c.queuedBudget = d.queuedBudget
	}
	if c.dgramBufCount == 0 {
		c.dgramBufCount = d.dgramBufCount
	}
	if c.dgramBufSize == 0 {
		c.dgramBufSize = d.dgramBufSize
	}
	if err := checkBuffers("datagram buffer", "datagram buffers", c.dgramBufCount, c.dgramBufSize); err != nil {
		return err
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

// checkBuffers validates a loop's provided buffers (WithBufferRing,
// WithDatagramBuffers): count a power of two up to 32768, size up to 1 MiB,
// at most maxBufRingBytes in all. name and total name them in the error.
func checkBuffers(name, total string, count, size uint32) error {
	if bits.OnesCount32(count) != 1 || count > 1<<15 {
		return invalidOption("%s count %d (expected a power of two <= 32768)", name, count)
	}
	if size > 1<<20 {
		return invalidOption("%s size %d (expected 1..1048576)", name, size)
	}
	if all := uint64(count) * uint64(size); all > maxBufRingBytes {
		return invalidOption("%s of %d × %d bytes = %d bytes per loop (expected at most %d)",
			total, count, size, all, maxBufRingBytes)
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
