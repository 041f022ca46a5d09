package sched

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"
)

// DefaultTick is the wheel resolution used when [WheelConfig.Tick] is zero.
const DefaultTick = time.Millisecond

// IdleWait is the longest [Wheel.Delay] returns: with nothing scheduled an
// event loop still wakes once a second, as Netty's loop does.
const IdleWait = time.Second

// WheelConfig configures a [Wheel]. The zero value is valid.
type WheelConfig struct {
	// Tick is the wheel's resolution: a timer fires at the first tick
	// boundary at or after its deadline. Zero means DefaultTick (1 ms);
	// negative values are rejected.
	Tick time.Duration
	// Clock supplies instants for fixed-delay timers and the wheel's start.
	// Nil means SystemClock().
	Clock Clock
	// Owner, if not nil, is the owner of the futures of the wheel's timers
	// ([Timer.Future]): the goroutine that owns the wheel and runs them,
	// where waiting for one would never end ([Owner]).
	Owner Owner
}

// A Wheel is a hierarchical hashed timer wheel (Varghese and Lauck, 1987):
// six levels of 64 slots over a configurable tick. Adding and stopping a
// timer cost O(1); advancing costs O(1) per due timer plus O(1) per occupied
// slot passed, found through one bitmap per level.
//
// Time is counted in ticks. A timer due at instant d is due at tick
// ceil(d/tick) and fires at the first Advance whose now reaches that tick's
// start: never before d, and at most one tick after it when Advance is called
// every tick. Timers delivered by one Advance come in (deadline, insertion
// sequence) order.
//
// Invariants:
//   - elapsed is the last tick processed: every timer due at or before it has
//     been moved to the ready list (or delivered, or dropped if stopped).
//   - A timer due after elapsed sits at level levelFor(elapsed, due), in slot
//     slotFor(due, level), or in overflow when that level is >= numLevels. At
//     every level, the slots at or before elapsed's slot are empty.
//   - ready is sorted by (when, seq) unless readyDirty is set.
//   - n counts the timers linked on any list, stopped ones included.
//
// A Wheel is owned by one goroutine (the event loop) and is not safe for
// concurrent use, except for the methods documented as such.
type Wheel struct {
	tick  int64  // nanoseconds per tick; immutable
	inv   uint64 // floor((2^64-1) / tick), for div; immutable
	clock Clock  // immutable
	owner Owner  // of the timers' futures; immutable

	elapsed    uint64
	seq        uint64 // next insertion sequence number
	n          int
	levels     [numLevels]level
	overflow   timerList // due beyond the top level's rotation
	ready      timerList // due, waiting for a sink that accepts them
	readyDirty bool
	scratch    []*Timer // reused by sortReady
}

// NewWheel returns an empty wheel whose clock starts at cfg.Clock's current
// reading. Safe for concurrent use.
func NewWheel(cfg WheelConfig) (*Wheel, error) {
	if cfg.Tick < 0 {
		return nil, ErrBadTick
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	w := &Wheel{tick: int64(cfg.Tick), inv: math.MaxUint64 / uint64(cfg.Tick), clock: cfg.Clock, owner: cfg.Owner}
	w.elapsed = w.tickOf(cfg.Clock.Now())
	return w, nil
}

// Tick returns the wheel's resolution. Safe for concurrent use.
func (w *Wheel) Tick() time.Duration { return time.Duration(w.tick) }

// Clock returns the wheel's clock. Safe for concurrent use.
func (w *Wheel) Clock() Clock { return w.clock }

// Len returns the number of timers held by the wheel, including stopped ones
// not yet dropped, and excluding timers handed to the sink. Must be called on
// the goroutine that owns the wheel.
func (w *Wheel) Len() int { return w.n }

// NewTimer returns a one-shot timer that will run fn at instant when, bound
// to this wheel but not yet in it (see [Timer]). Safe for concurrent use.
func (w *Wheel) NewTimer(when int64, fn func()) (*Timer, error) {
	if fn == nil {
		return nil, ErrNilTask
	}
	return &Timer{fn: fn, wheel: w, when: when}, nil
}

// NewFixedRate returns a timer that runs fn at first, first+period,
// first+2*period, …: the schedule never drifts, and after a stall the missed
// runs follow one per Advance until it has caught up. Safe for concurrent use.
func (w *Wheel) NewFixedRate(first int64, period time.Duration, fn func()) (*Timer, error) {
	return w.newPeriodic(first, int64(period), period, fn)
}

// NewFixedDelay returns a timer that runs fn at first and then delay after
// each run ends, as read from the wheel's clock. Safe for concurrent use.
func (w *Wheel) NewFixedDelay(first int64, delay time.Duration, fn func()) (*Timer, error) {
	return w.newPeriodic(first, -int64(delay), delay, fn)
}

func (w *Wheel) newPeriodic(first, p int64, d time.Duration, fn func()) (*Timer, error) {
	if d <= 0 {
		return nil, ErrBadPeriod
	}
	t, err := w.NewTimer(first, fn)
	if err != nil {
		return nil, err
	}
	t.ext.Store(&timerExt{period: p})
	return t, nil
}

// Add inserts a new timer created by this wheel. It returns
// [ErrTimerScheduled] if t belongs to another wheel or was already added,
// stopped or run; use [Timer.Reset] to re-arm such a timer. A deadline at or
// before the wheel's current tick makes the timer due at the next Advance.
// Must be called on the goroutine that owns the wheel.
func (w *Wheel) Add(t *Timer) error {
	if t.wheel != w || t.loc != locNone || t.state.Load() != statePending {
		return ErrTimerScheduled
	}
	w.add(t)
	return nil
}

// add gives t the next sequence number and links it.
func (w *Wheel) add(t *Timer) {
	t.seq = w.seq
	w.seq++
	w.n++
	w.place(t)
}

// place links t, which is on no list, where its deadline belongs relative to
// elapsed.
func (w *Wheel) place(t *Timer) {
	due := w.dueTick(t.when)
	if due <= w.elapsed {
		if tail := w.ready.tail; tail != nil && timerCmp(t, tail) < 0 {
			w.readyDirty = true
		}
		w.ready.pushBack(t)
		t.loc = locReady
		return
	}
	l := levelFor(w.elapsed, due)
	if l >= numLevels {
		w.overflow.pushBack(t)
		t.loc = locOverflow
		return
	}
	s := slotFor(due, l)
	lv := &w.levels[l]
	lv.slots[s].pushBack(t)
	lv.occupied |= 1 << uint(s)
	t.loc = locSlot0 + uint32(l*slotsPerLevel+s)
}

// unlink removes t from whichever wheel list holds it; a timer on no list is
// left alone.
func (w *Wheel) unlink(t *Timer) {
	switch t.loc {
	case locNone, locDelivered:
		return
	case locReady:
		w.ready.remove(t)
	case locOverflow:
		w.overflow.remove(t)
	default:
		i := int(t.loc - locSlot0)
		lv, s := &w.levels[i/slotsPerLevel], i%slotsPerLevel
		lv.slots[s].remove(t)
		if lv.slots[s].empty() {
			lv.occupied &^= 1 << uint(s)
		}
	}
	t.loc = locNone
	w.n--
}

// Stop stops t like [Timer.Stop] and also unlinks it from the wheel at once,
// in O(1), so a long timer does not hold memory until its deadline. It also
// unlinks a timer already stopped from another goroutine. Must be called on
// the goroutine that owns the wheel.
func (w *Wheel) Stop(t *Timer) bool {
	stopped := t.state.CompareAndSwap(statePending, stateCanceled) // the common case, inline
	if stopped {
		t.complete(ErrCanceled)
	} else {
		stopped = t.Stop()
	}
	if t.wheel == w {
		w.unlink(t)
	}
	return stopped
}

// StopAll stops and unlinks every timer in the wheel, as an event loop does
// when it shuts down, and returns how many it prevented from running. Timers
// already handed to the sink are not affected. Must be called on the
// goroutine that owns the wheel.
func (w *Wheel) StopAll() int {
	n := w.stopList(&w.ready) + w.stopList(&w.overflow)
	for l := range w.levels {
		lv := &w.levels[l]
		for s := range lv.slots {
			n += w.stopList(&lv.slots[s])
		}
		lv.occupied = 0
	}
	w.n = 0
	w.readyDirty = false
	return n
}

func (w *Wheel) stopList(l *timerList) int {
	n := 0
	for t := l.takeAll(); t != nil; {
		next := t.next
		t.prev, t.next, t.loc = nil, nil, locNone
		if t.Stop() {
			n++
		}
		t = next
	}
	return n
}

// Advance moves the wheel to instant now, then hands due timers to sink in
// (deadline, insertion sequence) order until sink returns false, and returns
// how many sink accepted. A refused timer, and every due timer after it, stay
// in the wheel and are offered again, first and in order, by the next
// Advance: none is lost or handed out twice. Stopped timers are dropped
// without reaching sink.
//
// sink may push the timer to the task queue (the usual case: the loop runs it
// later via [Timer.Run]) or call t.Run itself; it must not call other Wheel
// methods. Timers re-armed while sink runs (a periodic timer run in place
// that is still overdue) wait for the next Advance. now earlier than the
// wheel's current tick only delivers what is already due. Must be called on
// the goroutine that owns the wheel.
func (w *Wheel) Advance(now int64, sink func(*Timer) bool) int {
	target := w.tickOf(now)
	for target > w.elapsed {
		start, l, s, ok := w.nextExpiration()
		if !ok || start > target {
			break
		}
		w.expire(start, l, s)
	}
	if target > w.elapsed {
		w.elapsed = target
	}
	return w.deliver(sink)
}

// nextExpiration returns the first tick after elapsed at which a non-empty
// slot (level l, slot s) or, with l == numLevels, the overflow list must be
// processed. The lowest level with an occupied slot after elapsed's wins:
// its slots all start within the current block of the level above, before
// any later slot of a higher level.
func (w *Wheel) nextExpiration() (start uint64, l, s int, ok bool) {
	for l := range numLevels {
		if s, ok := w.levels[l].nextOccupied(slotFor(w.elapsed, l)); ok {
			shift := uint(l) * levelBits
			block := w.elapsed &^ (uint64(1)<<(shift+levelBits) - 1)
			return block + uint64(s)<<shift, l, s, true
		}
	}
	if !w.overflow.empty() {
		return (w.elapsed>>wheelBits + 1) << wheelBits, numLevels, 0, true
	}
	return 0, 0, 0, false
}

// expire moves the wheel to tick start and re-places every timer of the given
// slot (or of overflow): timers due at start become ready, the others
// cascade to a lower level. Stopped timers are dropped on the way.
func (w *Wheel) expire(start uint64, l, s int) {
	w.elapsed = start
	var t *Timer
	if l == numLevels {
		t = w.overflow.takeAll()
	} else {
		lv := &w.levels[l]
		t = lv.slots[s].takeAll()
		lv.occupied &^= 1 << uint(s)
	}
	for t != nil {
		next := t.next
		t.prev, t.next = nil, nil
		if t.state.Load() == statePending {
			w.place(t)
		} else {
			t.loc = locNone
			w.n--
		}
		t = next
	}
}

// deliver hands ready timers to sink, stopping at the first refusal or at
// the first timer re-armed during this call.
func (w *Wheel) deliver(sink func(*Timer) bool) int {
	if w.readyDirty {
		w.sortReady()
	}
	limit := w.seq // timers added from here on have seq >= limit
	n := 0
	for t := w.ready.head; t != nil && t.seq < limit; t = w.ready.head {
		w.ready.remove(t)
		w.n--
		if t.state.Load() != statePending {
			t.loc = locNone
			continue
		}
		t.loc = locDelivered
		if !sink(t) {
			w.ready.pushFront(t)
			t.loc = locReady
			w.n++
			break
		}
		n++
	}
	return n
}

// sortReady restores the (when, seq) order of the ready list.
func (w *Wheel) sortReady() {
	s := w.scratch[:0]
	for t := w.ready.takeAll(); t != nil; {
		next := t.next
		t.prev, t.next = nil, nil
		s = append(s, t)
		t = next
	}
	slices.SortFunc(s, timerCmp)
	for _, t := range s {
		w.ready.pushBack(t)
	}
	clear(s) // drop references so the scratch slice keeps no timer alive
	w.scratch = s[:0]
	w.readyDirty = false
}

// timerCmp orders timers by deadline, then by insertion sequence.
func timerCmp(a, b *Timer) int {
	if c := cmp.Compare(a.when, b.when); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// NextDeadline returns the instant at which the wheel next needs an Advance,
// and false if it holds no timer. When timers are ready it returns the
// current tick's start (at or before now). The instant may be earlier than
// any timer's deadline, when a higher-level slot must be cascaded first, or
// belong to a stopped timer not yet dropped: waking early is harmless, late
// never happens. Must be called on the goroutine that owns the wheel.
func (w *Wheel) NextDeadline() (int64, bool) {
	if !w.ready.empty() {
		return w.tickStart(w.elapsed), true
	}
	start, _, _, ok := w.nextExpiration()
	if !ok {
		return 0, false
	}
	return w.tickStart(start), true
}

// Delay returns how long an event loop may block at instant now before it
// must call Advance: zero if timers are due, the time to [Wheel.NextDeadline]
// otherwise, and at most [IdleWait] (also when nothing is scheduled). Must be
// called on the goroutine that owns the wheel.
func (w *Wheel) Delay(now int64) time.Duration {
	next, ok := w.NextDeadline()
	if !ok || next-now >= int64(IdleWait) {
		return IdleWait
	}
	if next <= now {
		return 0
	}
	return time.Duration(next - now)
}

// dueTick returns the tick a deadline is due at: ceil(when/tick), and 0 for
// instants at or before the clock's origin.
func (w *Wheel) dueTick(when int64) uint64 {
	if when <= 0 {
		return 0
	}
	return w.div(uint64(when-1)) + 1
}

// tickOf returns the tick in progress at instant now: floor(now/tick).
func (w *Wheel) tickOf(now int64) uint64 {
	if now <= 0 {
		return 0
	}
	return w.div(uint64(now))
}

// div returns x / tick with a multiplication by the precomputed reciprocal
// instead of a 64-bit division (docs/decisions.md, "Division by the tick").
// The estimate hi(x*inv) is floor(x/tick) or one less, as
// inv <= 2^64/tick < inv+1; one comparison corrects it.
func (w *Wheel) div(x uint64) uint64 {
	q, _ := bits.Mul64(x, w.inv)
	if x-q*uint64(w.tick) >= uint64(w.tick) {
		q++
	}
	return q
}

// tickStart returns the instant tick k begins, saturating at math.MaxInt64.
func (w *Wheel) tickStart(k uint64) int64 {
	if k > uint64(math.MaxInt64/w.tick) {
		return math.MaxInt64
	}
	return int64(k) * w.tick
}
