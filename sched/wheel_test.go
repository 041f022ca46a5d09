package sched

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func newTestWheel(t *testing.T, start int64) (*Wheel, *ManualClock) {
	t.Helper()
	clock := NewManualClock(start)
	w, err := NewWheel(WheelConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return w, clock
}

// runSink runs each due timer in place.
func runSink(t *Timer) bool { t.Run(); return true }

// TestLevelFor checks, for elapsed values around every level boundary and
// every due tick in a window after them, that the chosen level and slot lie
// strictly after elapsed's slot within elapsed's block of the level above.
func TestLevelFor(t *testing.T) {
	for l := range numLevels + 1 {
		for _, off := range []int64{-2, -1, 0, 1, 63} {
			elapsed := uint64(max(0, int64(1)<<(levelBits*l)+off))
			for step := uint64(1); step < uint64(1)<<wheelBits+64; step = step*3 + 1 {
				for _, due := range []uint64{elapsed + step, elapsed + step + 1} {
					lv := levelFor(elapsed, due)
					if lv >= numLevels {
						if due>>wheelBits == elapsed>>wheelBits {
							t.Fatalf("levelFor(%d, %d) = overflow within range", elapsed, due)
						}
						continue
					}
					shift := uint(lv+1) * levelBits
					if due>>shift != elapsed>>shift {
						t.Fatalf("levelFor(%d, %d) = %d: not in elapsed's block", elapsed, due, lv)
					}
					if slotFor(due, lv) <= slotFor(elapsed, lv) {
						t.Fatalf("levelFor(%d, %d) = %d: slot %d not after %d", elapsed, due, lv, slotFor(due, lv), slotFor(elapsed, lv))
					}
				}
			}
		}
	}
}

func TestWheelDivExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tick := range []int64{1, 3, 7, 1000, ms, int64(time.Second), math.MaxInt64} {
		w, err := NewWheel(WheelConfig{Tick: time.Duration(tick), Clock: NewManualClock(0)})
		if err != nil {
			t.Fatal(err)
		}
		xs := []uint64{0, 1, uint64(tick) - 1, uint64(tick), uint64(tick) + 1, math.MaxInt64, math.MaxUint64 - 1, math.MaxUint64}
		for range 10000 {
			xs = append(xs, rng.Uint64(), rng.Uint64()>>rng.UintN(64))
		}
		for _, x := range xs {
			if got, want := w.div(x), x/uint64(tick); got != want {
				t.Fatalf("tick %d: div(%d) = %d, want %d", tick, x, got, want)
			}
		}
	}
}

func TestNewWheelValidates(t *testing.T) {
	if _, err := NewWheel(WheelConfig{Tick: -1}); !errors.Is(err, ErrBadTick) {
		t.Fatalf("negative tick: %v", err)
	}
	w, err := NewWheel(WheelConfig{})
	if err != nil || w.Tick() != DefaultTick || w.Clock() == nil {
		t.Fatalf("zero config: %v, tick %v", err, w.Tick())
	}
	if _, err := w.NewTimer(0, nil); !errors.Is(err, ErrNilTask) {
		t.Fatalf("nil fn: %v", err)
	}
	for _, p := range []time.Duration{0, -time.Second} {
		if _, err := w.NewFixedRate(0, p, func() {}); !errors.Is(err, ErrBadPeriod) {
			t.Fatalf("fixed rate %v: %v", p, err)
		}
		if _, err := w.NewFixedDelay(0, p, func() {}); !errors.Is(err, ErrBadPeriod) {
			t.Fatalf("fixed delay %v: %v", p, err)
		}
	}
	other, _ := NewWheel(WheelConfig{})
	tm, _ := other.NewTimer(0, func() {})
	if err := w.Add(tm); !errors.Is(err, ErrTimerScheduled) {
		t.Fatalf("foreign timer: %v", err)
	}
}

// Advancing one tick at a time, every timer fires at the first tick boundary
// at or after its deadline: never early, less than one tick late.
func TestWheelFiresWithinOneTick(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	rng := rand.New(rand.NewPCG(7, 8))
	firedAt := map[int]int64{}
	whens := map[int]int64{}
	for i := range 2000 {
		when := 1 + rng.Int64N(300_000*ms) // up to 5 minutes: four levels
		whens[i] = when
		tm, _ := w.NewTimer(when, func() { firedAt[i] = clock.Now() })
		if err := w.Add(tm); err != nil {
			t.Fatal(err)
		}
	}
	for w.Len() > 0 {
		// Jump straight to the next deadline the wheel reports, then tick by
		// tick: the wheel must never make the loop oversleep.
		next, _ := w.NextDeadline()
		if next > clock.Now()+ms {
			clock.Set(next - ms)
		}
		w.Advance(clock.Advance(time.Millisecond), runSink)
	}
	for i, when := range whens {
		at, ok := firedAt[i]
		if !ok {
			t.Fatalf("timer %d (due %d) never fired", i, when)
		}
		if at < when || at-when >= ms {
			t.Fatalf("timer %d due %d fired at %d", i, when, at)
		}
	}
}

// Timers due at the same instant fire in insertion order, even when the
// earlier ones were inserted at a higher level and cascaded down.
func TestWheelTiesInInsertionOrder(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	const due = 5_000 * ms
	var order []int
	for i := range 30 {
		tm, _ := w.NewTimer(due, func() { order = append(order, i) })
		if err := w.Add(tm); err != nil {
			t.Fatal(err)
		}
		w.Advance(clock.Advance(time.Duration(150*ms)), runSink) // later ones land lower
	}
	w.Advance(clock.Set(due), runSink)
	if len(order) != 30 {
		t.Fatalf("fired %d of 30", len(order))
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("fired %v, want insertion order", order)
		}
	}
}

func TestFixedRateNoDrift(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	const first, period = 3 * ms, 10 * ms
	var runs []int64
	var tm *Timer
	tm, _ = w.NewFixedRate(first, time.Duration(period), func() {
		runs = append(runs, clock.Now())
		clock.Advance(time.Duration(2 * ms)) // the task takes time: must not shift the schedule
	})
	if err := w.Add(tm); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for len(runs) < 1000 {
		if len(runs) == 500 && clock.Now() < 5_100*ms {
			clock.Advance(time.Duration(5 * period)) // a stall: catch up one run per Advance
		} else if clock.Now() < tm.When() {
			clock.Set(tm.When() + rng.Int64N(ms)) // never a full tick late
		}
		w.Advance(clock.Now(), runSink)
	}
	for k, at := range runs {
		want := first + int64(k)*period
		if k >= 500 && k < 506 {
			continue // catching up after the stall
		}
		if at < want || at-want >= ms {
			t.Fatalf("run %d at %d, schedule says %d (drift %d)", k, at, want, at-want)
		}
	}
	if got, want := tm.When(), first+1000*period; got != want {
		t.Fatalf("after 1000 runs next deadline %d, want %d: drift %d", got, want, got-want)
	}
}

func TestFixedDelayFromCompletion(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	const delay, work = 10 * ms, 3 * ms
	var starts, ends []int64
	tm, _ := w.NewFixedDelay(ms, time.Duration(delay), func() {
		starts = append(starts, clock.Now())
		ends = append(ends, clock.Advance(time.Duration(work)))
	})
	if err := w.Add(tm); err != nil {
		t.Fatal(err)
	}
	for len(starts) < 100 {
		w.Advance(clock.Advance(time.Millisecond), runSink)
	}
	for k := 1; k < len(starts); k++ {
		if got := starts[k] - ends[k-1]; got != delay {
			t.Fatalf("run %d started %d after the previous run ended, want %d", k, got, delay)
		}
	}
}

// A bounded queue as the sink: due timers that do not fit stay in the wheel
// and are delivered later, in order, none lost or repeated.
func TestAdvanceIntoFullQueue(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	q := NewQueue(3)
	var order []int
	for i := range 10 {
		tm, _ := w.NewTimer(int64(10-i%3)*ms, func() { order = append(order, i) })
		if err := w.Add(tm); err != nil {
			t.Fatal(err)
		}
	}
	sink := func(t *Timer) bool { return q.Push(t) == nil }
	clock.Set(20 * ms)
	for turns := 0; len(order) < 10; turns++ {
		if turns > 10 {
			t.Fatalf("ran %v after %d turns", order, turns)
		}
		if n := w.Advance(clock.Now(), sink); n > 3 {
			t.Fatalf("Advance delivered %d into a queue of 3", n)
		}
		q.Drain(0, func(t Task) { t.Run() })
	}
	want := []int{2, 5, 8, 1, 4, 7, 0, 3, 6, 9} // deadline 8, 9, then 10 ms; ties by insertion
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("ran %v, want %v", order, want)
		}
	}
	if w.Len() != 0 || q.Len() != 0 {
		t.Fatalf("left %d timers in the wheel, %d tasks queued", w.Len(), q.Len())
	}
}

// A timer made on another goroutine travels to the owner through the queue,
// is inserted by Run, comes due, and runs through the queue again.
func TestTimerHandOffThroughQueue(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	q := NewQueue(0)
	ran := make(chan struct{}, 1)
	pushed := make(chan struct{})
	go func() {
		defer close(pushed)
		tm, err := w.NewTimer(5*ms, func() { ran <- struct{}{} })
		if err == nil {
			err = q.Push(tm)
		}
		if err != nil {
			t.Error(err)
		}
	}()
	run := func(t Task) { t.Run() }
	<-pushed
	if n := q.Drain(0, run); n != 1 {
		t.Fatalf("drained %d tasks after the hand-off, want the timer", n)
	}
	if w.Len() != 1 {
		t.Fatalf("wheel holds %d timers after the hand-off", w.Len())
	}
	if d := w.Delay(clock.Now()); d != 5*time.Millisecond {
		t.Fatalf("Delay = %v, want 5ms", d)
	}
	w.Advance(clock.Set(5*ms), func(t *Timer) bool { return q.Push(t) == nil })
	q.Drain(0, run)
	select {
	case <-ran:
	default:
		t.Fatal("timer did not run")
	}
}

// A timer reset after delivery leaves a stale queue entry; it must not run
// the timer early, and the timer runs once at its new deadline.
func TestResetAfterDelivery(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	q := NewQueue(0)
	var at []int64
	tm, _ := w.NewTimer(ms, func() { at = append(at, clock.Now()) })
	_ = w.Add(tm)
	sink := func(t *Timer) bool { return q.Push(t) == nil }
	w.Advance(clock.Set(ms), sink)
	if !tm.Reset(10 * ms) {
		t.Fatal("Reset of a delivered, not yet run timer reported it was not pending")
	}
	q.Drain(0, func(t Task) { t.Run() }) // the stale entry
	if len(at) != 0 {
		t.Fatal("stale queue entry ran the timer")
	}
	for clock.Now() < 20*ms {
		w.Advance(clock.Advance(time.Millisecond), sink)
		q.Drain(0, func(t Task) { t.Run() })
	}
	if len(at) != 1 || at[0] != 10*ms {
		t.Fatalf("ran at %v, want once at %d", at, 10*ms)
	}
}

func TestResetFromOwnCallback(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	var tm *Timer
	runs := 0
	tm, _ = w.NewTimer(ms, func() {
		if runs++; runs < 3 {
			tm.Reset(clock.Now() + 5*ms)
		}
	})
	_ = w.Add(tm)
	for range 30 {
		w.Advance(clock.Advance(time.Millisecond), runSink)
	}
	if runs != 3 {
		t.Fatalf("ran %d times, want 3", runs)
	}
	if _, err, done := tm.Future().Result(); !done || err != nil {
		t.Fatalf("future after last run: done %v, err %v", done, err)
	}
}

func TestStopPeriodicFromOwnCallback(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	var tm *Timer
	runs := 0
	tm, _ = w.NewFixedRate(ms, time.Duration(ms), func() {
		if runs++; runs == 3 && !tm.Stop() {
			t.Error("Stop of a running periodic timer reported nothing prevented")
		}
	})
	_ = w.Add(tm)
	for range 20 {
		w.Advance(clock.Advance(time.Millisecond), runSink)
	}
	if runs != 3 || w.Len() != 0 {
		t.Fatalf("ran %d times (want 3), wheel holds %d", runs, w.Len())
	}
	if _, err := tm.Future().Wait(t.Context()); !errors.Is(err, ErrCanceled) {
		t.Fatalf("future: %v", err)
	}
}

// Stop from other goroutines races the owner running the timers: for each
// one-shot timer exactly one of "Stop returned true" and "it ran" happens.
func TestStopRacesRun(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	const n = 5000
	timers := make([]*Timer, n)
	ran := make([]bool, n)
	stopped := make([]bool, n)
	for i := range timers {
		timers[i], _ = w.NewTimer(int64(1+i%50)*ms, func() { ran[i] = true })
		_ = w.Add(timers[i])
	}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 2 {
				stopped[i] = timers[i].Stop()
			}
		}()
	}
	for range 60 {
		w.Advance(clock.Advance(time.Millisecond), runSink)
	}
	wg.Wait()
	for i := range timers {
		if ran[i] == stopped[i] {
			t.Fatalf("timer %d: ran %v, Stop returned %v", i, ran[i], stopped[i])
		}
	}
	if w.Len() != 0 {
		t.Fatalf("wheel still holds %d timers", w.Len())
	}
}

func TestTimerFuture(t *testing.T) {
	w, clock := newTestWheel(t, 0)
	fired, _ := w.NewTimer(ms, func() {})
	canceled, _ := w.NewTimer(ms, func() {})
	panicky, _ := w.NewFixedRate(ms, time.Duration(ms), func() { panic("boom") })
	early := fired.Future()
	for _, tm := range []*Timer{fired, canceled, panicky} {
		_ = w.Add(tm)
	}
	if !w.Stop(canceled) || w.Stop(canceled) {
		t.Fatal("Stop should report true once")
	}
	var panicErr error
	w.Advance(clock.Advance(time.Millisecond), func(tm *Timer) bool {
		if err := Run(tm); err != nil {
			panicErr = err
		}
		return true
	})
	if _, err, done := early.Result(); !done || err != nil {
		t.Fatalf("fired timer's future: done %v, err %v", done, err)
	}
	if _, err, done := fired.Future().Result(); !done || err != nil {
		t.Fatalf("future asked after firing: done %v, err %v", done, err)
	}
	if _, err := canceled.Future().Wait(t.Context()); !errors.Is(err, ErrCanceled) {
		t.Fatalf("canceled timer's future: %v", err)
	}
	var pe *PanicError
	if !errors.As(panicErr, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("Run returned %v", panicErr)
	}
	_, err, _ := panicky.Future().Result()
	if err != pe {
		t.Fatalf("panicking timer's future: %v, want the *PanicError Run returned", err)
	}
	if w.Len() != 0 || panicky.Stop() {
		t.Fatal("a failed periodic timer must not be re-armed")
	}
	if !fired.Reset(clock.Now() + ms) {
		if fired.Future().IsDone() {
			t.Fatal("Reset of a fired timer kept its completed future")
		}
	}
}

func TestDelayAndNextDeadline(t *testing.T) {
	w, clock := newTestWheel(t, 7*ms)
	if _, ok := w.NextDeadline(); ok {
		t.Fatal("empty wheel reports a deadline")
	}
	if d := w.Delay(clock.Now()); d != IdleWait {
		t.Fatalf("empty wheel: Delay %v, want %v", d, IdleWait)
	}
	far, _ := w.NewTimer(clock.Now()+int64(time.Hour), func() {})
	_ = w.Add(far)
	if d := w.Delay(clock.Now()); d != IdleWait {
		t.Fatalf("one hour out: Delay %v, want the %v cap", d, IdleWait)
	}
	near, _ := w.NewTimer(clock.Now()+int64(2500*time.Microsecond), func() {})
	_ = w.Add(near)
	if d := w.Delay(clock.Now()); d != 3*time.Millisecond {
		t.Fatalf("2.5 ms out at 1 ms resolution: Delay %v, want 3ms", d)
	}
	past, _ := w.NewTimer(0, func() {})
	_ = w.Add(past)
	if d := w.Delay(clock.Now()); d != 0 {
		t.Fatalf("due timer: Delay %v, want 0", d)
	}
	if n := w.StopAll(); n != 3 || w.Len() != 0 {
		t.Fatalf("StopAll = %d, Len %d", n, w.Len())
	}
	if !errors.Is(func() error { _, err, _ := far.Future().Result(); return err }(), ErrCanceled) {
		t.Fatal("StopAll did not cancel the far timer's future")
	}
}

// Deadlines beyond the top level's range wait in overflow and still fire on
// time; a 1 ns tick makes the 2^36-tick range quick to cross.
func TestWheelOverflow(t *testing.T) {
	clock := NewManualClock(0)
	w, _ := NewWheel(WheelConfig{Tick: 1, Clock: clock})
	var at []int64
	whens := []int64{1 << 40, 1<<36 + 5, 1 << 37, math.MaxInt64}
	for _, when := range whens {
		tm, _ := w.NewTimer(when, func() { at = append(at, clock.Now()) })
		_ = w.Add(tm)
	}
	for len(at) < 3 {
		next, ok := w.NextDeadline()
		if !ok {
			t.Fatal("wheel lost a timer")
		}
		w.Advance(clock.Set(next), runSink)
	}
	want := []int64{1<<36 + 5, 1 << 37, 1 << 40}
	for i := range want {
		if at[i] != want[i] {
			t.Fatalf("fired at %v, want %v", at, want)
		}
	}
	if w.Len() != 1 {
		t.Fatalf("Len = %d, want the MaxInt64 timer", w.Len())
	}
}
