package loop

import (
	"reflect"
	"sync/atomic"
)

// Stats is a snapshot of one loop's counters. Counters only grow; gauges
// (PendingTasks, OpsInFlight) are read at snapshot time. Values are read one
// by one, so a snapshot of a running loop is not atomic as a whole.
type Stats struct {
	Name    string  // the loop's name, as String()
	State   State   // lifecycle state
	Backend Backend // BackendUring or BackendEpoll

	Turns        uint64 // run-cycle turns
	Tasks        uint64 // tasks run (due timers and tail tasks included)
	Panics       uint64 // tasks, timers, completers and hooks that panicked (recovered)
	Rejected     uint64 // Execute/Schedule calls refused (ErrRejected)
	PendingTasks int    // tasks queued and not yet run

	Sleeps     uint64 // blocking waits: the loop published a wait deadline and waited
	WakeWrites uint64 // eventfd writes made by other goroutines to end a wait; at most one per sleep
	Wakeups    uint64 // waits ended by a wakeup

	OpsSubmitted     uint64 // ops handed to the backend
	Completions      uint64 // completions delivered to Completers
	StaleCompletions uint64 // completions naming no live op (dropped; uringdebug panics)
	OpsInFlight      int    // op-table records not yet at their final completion (as of the last turn)
	ParkedRecvs      uint64 // provided-buffer receives parked for buffers (after -ENOBUFS, or armed while others were parked), to be resubmitted (starved.go)

	EarlyReturns    uint64 // waits that returned early with nothing to do (stall-detector input)
	Interrupts      uint64 // waits interrupted by a signal (EINTR; never a stall)
	PollErrors      uint64 // failed waits (other than EINTR)
	Rebuilds        uint64 // ring (or epoll instance) replacements, by the stalled-ring detector or requested by a test
	RebuildFailures uint64 // replacements that failed (the old ring was kept)
	MigratedOps     uint64 // ops moved to a new ring by rebuilds

	IONanos   uint64 // time spent dispatching completions (the ioRatio numerator's input)
	TaskNanos uint64 // time spent in the task phase (tasks, due timers, tail tasks)

	Orphaned uint64 // ops still in flight when the drain deadline passed at termination

	// Quarantined counts ops given up without the kernel's final word
	// (Completion.Quarantined): their records and buffers are kept for
	// the life of the process, never reused. QuarantinedBytes is the
	// buffer memory so kept (a provided-buffer ring kept mapped included).
	Quarantined      uint64
	QuarantinedBytes uint64
	// ProcessQuarantinedBytes is process-wide, not the loop's: the
	// QuarantinedBytes of every loop the process ever ran, of every
	// group, terminated ones included. GroupStats.Total holds it as the
	// loops report it, not summed.
	ProcessQuarantinedBytes uint64

	// Invariant breaks the io_uring backend counts (zero in a healthy
	// process; both are logged as errors when they happen):
	// LostCompletions are CQEs the kernel dropped (its CQ overflow
	// counter; only without IORING_FEAT_NODROP or under memory
	// pressure), BufferMisuse completions naming a provided buffer the
	// loop already held (never given back twice: see ring.BufRing.Take).
	LostCompletions uint64
	BufferMisuse    uint64

	// CQOverflows counts the polls of the io_uring backend that found
	// completions the CQ had no room for waiting on the kernel's overflow
	// list (IORING_SQ_CQ_OVERFLOW), which the poll then moved into the CQ.
	// None is lost where the kernel has IORING_FEAT_NODROP (5.5); the CQ
	// is twice the SQ (WithRingEntries), so a count that keeps growing
	// says it is too small for the ops in flight.
	CQOverflows uint64

	// RecvBundles counts provided-buffer completions that carried several
	// buffers (receive bundles, Linux 6.10).
	RecvBundles uint64

	// BlockedEpisodes counts the times the blocked-loop detector
	// (WithBlockedThreshold) found the loop in one turn, outside its
	// wait, for longer than the threshold: each is logged once at Warn,
	// "loop: blocked", with the goroutine's stack, and again as
	// "loop: unblocked" when the loop moves on.
	BlockedEpisodes uint64

	// Latency histograms (docs/loop.md, "Latency histograms"), timed with
	// the loop's clock from the readings a turn makes anyway (one more
	// per turn at most, none per task or completion).
	//
	// TurnTime has one sample per turn: its busy time, from the start of
	// completion dispatch (the first completion delivered, or the wait's
	// return when there was none) to the end of its task phase (tail
	// tasks and resubmitted parked receives included); the wait is not
	// in it.
	TurnTime Histogram
	// IOTime has one sample per turn that dispatched completions: from
	// the first completion delivered to the end of the poll (IONanos is
	// its sum).
	IOTime Histogram
	// TaskTime has one sample per turn that ran tasks: the task phase,
	// due timers and tail tasks included (TaskNanos is its sum).
	TaskTime Histogram
	// QueueDelay has one sample per turn whose task phase took tasks
	// from the task queue: the longest any of them waited there, from
	// the Execute (or the Schedule made off the loop) that queued it to
	// when the loop took it. The queue stamps a batch when its first
	// task is pushed (one clock read per batch of tasks, by the
	// producer). A batch queued before the phase began is measured to
	// the phase's start, which is exact unless tasks left over from an
	// earlier turn ran first; one queued while the phase ran is taken by
	// it and measured to its end, an upper bound (by at most the phase's
	// length). Due timers count from their turn, not their deadline:
	// about 0.
	QueueDelay Histogram
}

// GroupStats is a snapshot of every loop of a group plus their sum.
type GroupStats struct {
	Loops []Stats // by loop index
	Total Stats   // counters, gauges and histograms summed over the loops (Name, State and Backend left zero; ProcessQuarantinedBytes as the loops report it)
}

// counters are a loop's live statistics. The loop goroutine updates most of
// them (single writer); WakeWrites and Rejected are also written by other
// goroutines, and blocked by the group's watchdog. Every field is atomic
// so Stats can read them from anywhere.
type counters struct {
	turns, tasks, panics, rejected       atomic.Uint64
	sleeps, wakeWrites, wakeups          atomic.Uint64
	submitted, completions, stale        atomic.Uint64
	earlyReturns, interrupts, pollErrors atomic.Uint64
	rebuilds, rebuildFailures, migrated  atomic.Uint64
	ioNanos, taskNanos, orphaned         atomic.Uint64
	quarantined, quarantinedBytes        atomic.Uint64
	parked, blocked                      atomic.Uint64
	opsInFlight                          atomic.Int64

	turnTime, ioTime, taskTime, queueDelay histogram
}

func (c *counters) snapshot(s *Stats) {
	s.Turns = c.turns.Load()
	s.Tasks = c.tasks.Load()
	s.Panics = c.panics.Load()
	s.Rejected = c.rejected.Load()
	// WakeWrites first: a sleep is counted before a producer can see it
	// and write, so read in this order a snapshot never shows a write
	// whose sleep it missed (WakeWrites ≤ Sleeps).
	s.WakeWrites = c.wakeWrites.Load()
	s.Sleeps = c.sleeps.Load()
	s.Wakeups = c.wakeups.Load()
	s.OpsSubmitted = c.submitted.Load()
	s.Completions = c.completions.Load()
	s.StaleCompletions = c.stale.Load()
	s.OpsInFlight = int(c.opsInFlight.Load())
	s.ParkedRecvs = c.parked.Load()
	s.EarlyReturns = c.earlyReturns.Load()
	s.Interrupts = c.interrupts.Load()
	s.PollErrors = c.pollErrors.Load()
	s.Rebuilds = c.rebuilds.Load()
	s.RebuildFailures = c.rebuildFailures.Load()
	s.MigratedOps = c.migrated.Load()
	s.IONanos = c.ioNanos.Load()
	s.TaskNanos = c.taskNanos.Load()
	s.Orphaned = c.orphaned.Load()
	s.Quarantined = c.quarantined.Load()
	s.QuarantinedBytes = c.quarantinedBytes.Load()
	s.ProcessQuarantinedBytes = quarantinedBytes()
	s.BlockedEpisodes = c.blocked.Load()
	c.turnTime.snapshot(&s.TurnTime)
	c.ioTime.snapshot(&s.IOTime)
	c.taskTime.snapshot(&s.TaskTime)
	c.queueDelay.snapshot(&s.QueueDelay)
}

// add sums the counters, gauges and histograms of o into s: every uint64,
// int and Histogram field (Name, State and Backend are not summed, and
// ProcessQuarantinedBytes, already a total, is copied).
func (s *Stats) add(o *Stats) {
	sv, ov := reflect.ValueOf(s).Elem(), reflect.ValueOf(o).Elem()
	for i := range sv.NumField() {
		switch f := sv.Field(i); {
		case sv.Type().Field(i).Name == "ProcessQuarantinedBytes":
			f.SetUint(ov.Field(i).Uint())
		case f.Type() == reflect.TypeFor[uint64]():
			f.SetUint(f.Uint() + ov.Field(i).Uint())
		case f.Type() == reflect.TypeFor[int]():
			f.SetInt(f.Int() + ov.Field(i).Int())
		case f.Type() == reflect.TypeFor[Histogram]():
			f.Addr().Interface().(*Histogram).add(ov.Field(i).Addr().Interface().(*Histogram))
		}
	}
}
