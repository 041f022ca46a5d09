package loop

import (
	"bytes"
	"runtime"
	"strconv"
	"time"
)

// The blocked-loop detector (docs/loop.md, "Blocked loops"). A loop runs
// every callback on its one goroutine, so a callback that blocks (a
// system call, a lock, a sleep, a long computation) stalls every connection
// of the loop. The group's watchdog goroutine notices a loop that stays in
// one turn, outside its wait, longer than WithBlockedThreshold, and logs it
// once per episode with what the loop runs and the loop goroutine's stack.
//
// The loop pays one atomic pointer store per callback (the description of
// what it is about to run) and one per turn; it reads no clock for it.
// Progress is what the loop maintains anyway: its turn counter, and its
// published wait deadline (waker.nextWakeup), which is not awake while it
// waits.

// DefaultBlockedThreshold is how long a loop may stay in one turn, outside
// its wait, before the detector reports it (WithBlockedThreshold).
const DefaultBlockedThreshold = 200 * time.Millisecond

// minBlockedTick bounds the watchdog's tick from below, so a tiny
// threshold does not make it spin.
const minBlockedTick = 5 * time.Millisecond

// maxBlockedStack bounds the buffer the watchdog dumps every goroutine's
// stack into, to cut out the loop goroutine's.
const maxBlockedStack = 8 << 20

// What a loop runs, as Running records it: package-level, so a record is
// one pointer store and the watchdog can read the string at any time.
var (
	whatLoop       = "loop" // the loop's own work: its wait's setup and end, moving due timers
	whatTask       = "task"
	whatTailTask   = "tail task"
	whatTimer      = "timer"
	whatHook       = "shutdown hook"
	whatCompletion = "completion"
)

// Running records what the loop goroutine is about to run, for the
// blocked-loop detector (WithBlockedThreshold): a loop found in one turn
// for longer than the threshold is reported with the description recorded
// last. The loop records "task", "tail task", "timer", "completion" and
// "shutdown hook" itself before each, and "loop" at the start of each turn;
// a package that calls code of its own from those (conn calls its Handler's
// methods from completions) records a finer description before each call,
// which the loop's next record replaces. Nothing needs to be recorded when
// the callback returns: a loop in its wait is never reported.
//
// what must point to a string that is never modified and lives as long as
// the process, such as a package-level variable
//
//	var whatOnRead = "conn handler OnRead"
//	l.Running(&whatOnRead)
//
// so that the call is a single atomic pointer store and allocates nothing,
// and the detector can read the string from its own goroutine at any time.
// Must be called on the loop goroutine (not checked: the check would cost
// more than the store).
func (l *Loop) Running(what *string) { l.what.Store(what) }

// runningNow returns what the loop recorded last.
func (l *Loop) runningNow() string {
	if p := l.what.Load(); p != nil {
		return *p
	}
	return whatLoop
}

// startWatchdog starts the group's blocked-loop watchdog, once, when the
// group's first loop starts (a group never used starts no goroutine), unless
// the threshold is 0. It ends when the group terminates.
func (g *Group) startWatchdog() {
	if g.cfg.blockedThreshold <= 0 || g.watching.Load() || !g.watching.CompareAndSwap(false, true) {
		return
	}
	go g.watchBlocked(g.cfg.blockedThreshold)
}

// watchBlocked is the watchdog: every threshold/4 (at least minBlockedTick)
// it looks at each loop's progress, until the group has terminated.
func (g *Group) watchBlocked(threshold time.Duration) {
	tk := time.NewTicker(max(threshold/4, minBlockedTick))
	defer tk.Stop()
	ws := make([]blockedWatch, len(g.loops))
	for {
		select {
		case now := <-tk.C:
			for i, l := range g.loops {
				ws[i].check(l, now, threshold)
			}
		case <-g.done:
			// Every loop has terminated, which is progress: an episode
			// still open ends here.
			now := time.Now()
			for i, l := range g.loops {
				ws[i].check(l, now, threshold)
			}
			return
		}
	}
}

// blockedWatch is the watchdog's view of one loop.
type blockedWatch struct {
	turns   uint64    // the loop's turn count at the last progress seen
	since   time.Time // the tick that saw that progress; zero before the first
	episode bool      // a blocked episode was reported and has not ended
}

// check looks at l at now. Progress is a turn count that moved, or the
// loop in its wait; a loop not started, or past its last turn (Shutdown and
// later: its last drain is bounded by the drain timeout), counts as
// progressing too. A loop without progress for threshold starts an
// episode: counted and logged once; the next progress ends it, logged
// with the time it lasted. Durations are measured in ticks, from the first
// tick that saw the loop in the turn: a blocked duration falls short of the
// truth by up to one tick, an episode's total is right to within one.
func (w *blockedWatch) check(l *Loop, now time.Time, threshold time.Duration) {
	st := l.State()
	waiting := l.waker.nextWakeup.Load() != awake
	turns := l.stats.turns.Load()
	if st < StateStarted || st >= StateShutdown || waiting || turns != w.turns || w.since.IsZero() {
		if w.episode {
			l.logger.Warn("loop: unblocked", "loop", l.name, "blocked", now.Sub(w.since))
		}
		*w = blockedWatch{turns: turns, since: now}
		return
	}
	if d := now.Sub(w.since); !w.episode && d >= threshold {
		w.episode = true
		l.stats.blocked.Add(1)
		l.logger.Warn("loop: blocked", "loop", l.name, "running", l.runningNow(),
			"blocked", d, "threshold", threshold, "stack", goroutineStack(l.goid.Load()))
	}
}

// goroutineID returns the calling goroutine's id, from the header of its
// stack dump ("goroutine 123 [running]:"); 0 if it cannot be read.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0
	}
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return id
}

// goroutineStack returns goroutine id's stack, cut out of a dump of every
// goroutine (a stop of the world: the watchdog makes one per episode). The
// dump is bounded to maxBlockedStack bytes; a goroutine beyond it is
// reported as not found.
func goroutineStack(id uint64) string {
	if id == 0 {
		return "(loop goroutine unknown)"
	}
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= maxBlockedStack {
			buf = buf[:n]
			break
		}
		buf = make([]byte, min(2*len(buf), maxBlockedStack))
	}
	header := []byte("goroutine " + strconv.FormatUint(id, 10) + " [")
	for off := 0; ; {
		i := bytes.Index(buf[off:], header)
		if i < 0 {
			return "(loop goroutine " + strconv.FormatUint(id, 10) + " not found in the stack dump)"
		}
		i += off
		if i > 0 && buf[i-1] != '\n' {
			off = i + len(header)
			continue
		}
		blk := buf[i:]
		if j := bytes.Index(blk, []byte("\n\n")); j >= 0 {
			blk = blk[:j]
		}
		return string(bytes.TrimRight(blk, "\n"))
	}
}
