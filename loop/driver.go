package loop

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/ring"
)

// driver is a loop's I/O backend: one io_uring ring (driver_uring.go) or one
// epoll instance (driver_epoll.go). Both run the same op contract
// (docs/op-lifecycle.md), so nothing above the loop can tell them apart.
//
// Every method but wake is called on the loop goroutine only.
type driver interface {
	// backend names the implementation.
	backend() Backend

	// start runs once on the loop goroutine before the first turn: the
	// uring driver enables its ring there (that thread becomes the single
	// issuer) and arms the eventfd read.
	start() error

	// submit hands a prepared op (opQueued, its fields set) to the
	// backend. A non-nil error means the op was not accepted and no
	// completion will follow.
	submit(o *op) error

	// cancel asks the backend to stop o. o's final completion still
	// follows through poll: its real result if it finished first, else
	// -ECANCELED. The op stays referenced until then.
	cancel(o *op) error

	// poll flushes pending submissions, waits up to timeout for at least
	// one completion or a wakeup (timeout 0: do not block), and delivers
	// every available completion, at most max, to sink. Completions of
	// loop-internal ops (the eventfd read, cancels) are handled inside the
	// driver and never reach sink, but a consumed wakeup is reported.
	poll(timeout time.Duration, max int, sink completionSink) (pollResult, error)

	// wake makes the current or the next poll return. Safe for concurrent
	// use; cheap when a wakeup is already pending.
	wake() error

	// rebuild replaces the ring (or epoll instance) and moves every live
	// op of t to it without losing, duplicating or reordering a result
	// (the stalled-ring recovery). It returns how many ops were migrated.
	rebuild(t *opTable, sink completionSink) (migrated int, err error)

	// counters fills the backend's own counters into s. Safe for
	// concurrent use.
	counters(s *Stats)
	// quarantineBufs keeps the backend's provided buffers mapped for the
	// life of the process (ops that may still write into them were given
	// up) and returns the bytes kept; 0 if the kernel never holds them.
	quarantineBufs() uint64
	// setHandOff sets whether the next blocking wait of the kernel wait
	// gives the loop thread's P back first (Loop.HandOffNextWait). Loop
	// goroutine only.
	setHandOff(on bool)
	// close releases the backend. The loop calls it after every op reached
	// its final completion, or after the drain deadline passed (the
	// remaining ops are then orphaned, never freed).
	close() error

	// features reports what the backend found in the kernel.
	features() Features

	// injectStall (a test seam) makes the next n polls return at once
	// with nothing, as a stalled ring would. Safe for concurrent use.
	injectStall(n int)
}

// stallSeam implements injectStall for a driver that embeds it; poll calls
// takeStall first.
type stallSeam struct{ stall atomic.Int64 }

func (s *stallSeam) injectStall(n int) { s.stall.Add(int64(n)) }

// takeStall consumes one injected stall, if any is left (the loop goroutine
// is the only taker).
func (s *stallSeam) takeStall() bool { return s.stall.Load() > 0 && s.stall.Add(-1) >= 0 }

// driverConfig is what a driver needs from the group's options.
type driverConfig struct {
	name        string       // loop name, "ringloop-<group>-<index>", for logs
	ringEntries uint32       // SQ entries (uring); CQ is twice that
	bufCount    uint32       // provided buffers per loop (power of two)
	bufSize     uint32       // bytes per provided buffer
	dgramCount  uint32       // provided buffers for datagram receives (power of two)
	dgramSize   uint32       // bytes per datagram buffer
	logger      *slog.Logger // never nil
	shared      bool         // the loop goroutine is not locked to one thread and waits on the netpoller (WithSharedThread)
	park        *parkHooks   // set by the loop; called around netpoller waits
	ops         *opTable     // the loop's op table (the epoll driver finds an op by its slot there)
	kernel      ring.Kernel  // RINGLOOP=kernel=: the release whose features the uring driver keeps to
}

// parkHooks are the loop's side of a netpoller wait: park runs before the
// loop goroutine may block, resume after it runs again. A shared-thread loop
// unlocks its OS thread in park and locks the one it resumes on in resume.
type parkHooks struct {
	park, resume func()
}

// completionSink receives the completions a driver reaps. The loop
// implements it: it looks the op up in its table (counting stale user_data),
// calls the op's Completer and frees the slot on the final completion.
// data is non-nil only for provided-buffer receives and is valid only during
// the call; the driver recycles the buffer afterwards.
type completionSink interface {
	complete(ud uint64, res int32, flags uint32, data []byte)
	// abandon delivers the final completion of an op the backend gave up
	// on without the kernel's final word (quarantine.go): its record and
	// buffers are quarantined, its slot is never reused, and the
	// Completer sees Completion.Quarantined. extra counts other memory
	// quarantined on its account.
	abandon(ud uint64, res int32, flags uint32, extra uint64)
}

// pollResult is what one poll observed.
type pollResult struct {
	completions int  // completions delivered to the sink
	woken       bool // a wakeup (eventfd) was consumed
	timedOut    bool // the wait ran to its full timeout
	interrupted bool // EINTR: a signal, not a stall; retry without counting
}

// Backend selects the I/O backend of a group.
type Backend int

const (
	// BackendAuto uses io_uring from Linux 6.1 and falls back to epoll,
	// with one log line naming the reason, on older kernels and where
	// io_uring is unusable.
	BackendAuto Backend = iota
	// BackendUring forces io_uring; NewGroup fails where it cannot work
	// (before Linux 6.1, or under an older kernel profile).
	BackendUring
	// BackendEpoll forces epoll.
	BackendEpoll
)

// String returns "auto", "uring" or "epoll".
func (b Backend) String() string {
	switch b {
	case BackendAuto:
		return "auto"
	case BackendUring:
		return "uring"
	case BackendEpoll:
		return "epoll"
	}
	return "unknown"
}

// Features describes what a loop's backend found in the kernel.
type Features struct {
	Backend        Backend // BackendUring or BackendEpoll
	RingFeatures   uint32  // io_uring IORING_FEAT_* bits (uring only)
	SetupFlags     uint32  // io_uring setup flags in use (uring only)
	RecvBundle     bool    // a provided-buffer receive may fill several buffers per completion (6.17)
	RecvCap        uint32  // bytes a provided-buffer completion may take at most (a bundle's 16 buffers); 0: none
	BufCount       uint32  // provided buffers per loop, as configured (WithBufferRing)
	BufSize        uint32  // bytes per provided buffer, as configured (WithBufferRing)
	DgramBufCount  uint32  // provided buffers for datagram receives per loop (WithDatagramBuffers)
	DgramBufSize   uint32  // bytes per datagram buffer (WithDatagramBuffers)
	FallbackReason string  // why auto fell back to epoll, if it did
	SharedThread   bool    // the loop runs as a shared-thread goroutine (WithSharedThread)
	Kernel         string  // the kernel profile in use (RINGLOOP=kernel=), "" for the running kernel
}
