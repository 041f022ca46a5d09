package sched

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// wheelModel is the reference the wheel is checked against: a plain list of
// armed timers, sorted on demand. A timer due at deadline d is due at tick
// ceil(d/tick) and is delivered by the first Advance whose tick reaches it,
// in (deadline, insertion sequence) order, as far as the sink accepts.
type wheelModel struct {
	tick    int64
	elapsed int64 // last tick reached by Advance (or the start tick)
	seq     uint64
	armed   map[int]*modelTimer
}

type modelTimer struct {
	id     int
	when   int64
	seq    uint64
	period int64 // as timerExt.period
}

func (m *wheelModel) dueTick(when int64) int64 {
	if when <= 0 {
		return 0
	}
	return (when-1)/m.tick + 1
}

func (m *wheelModel) arm(id int, when, period int64) {
	m.armed[id] = &modelTimer{id: id, when: when, seq: m.seq, period: period}
	m.seq++
}

// advance returns the ids the wheel must hand to a sink accepting at most
// limit timers (limit < 0: all).
func (m *wheelModel) advance(now int64, limit int) []int {
	if now > 0 {
		m.elapsed = max(m.elapsed, now/m.tick)
	}
	var due []*modelTimer
	for _, mt := range m.armed {
		if m.dueTick(mt.when) <= m.elapsed {
			due = append(due, mt)
		}
	}
	slices.SortFunc(due, func(a, b *modelTimer) int {
		if c := cmp.Compare(a.when, b.when); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	if limit >= 0 && len(due) > limit {
		due = due[:limit]
	}
	ids := make([]int, len(due))
	for i, mt := range due {
		ids[i] = mt.id
	}
	return ids
}

// nextDue returns the instant the earliest armed timer becomes deliverable.
func (m *wheelModel) nextDue() (int64, bool) {
	if len(m.armed) == 0 {
		return 0, false
	}
	due := int64(math.MaxInt64)
	for _, mt := range m.armed {
		due = min(due, max(m.dueTick(mt.when), m.elapsed))
	}
	if due > math.MaxInt64/m.tick {
		return math.MaxInt64, true
	}
	return due * m.tick, true
}

// ran applies a run finishing at now.
func (m *wheelModel) ran(id int, now int64) {
	mt := m.armed[id]
	switch {
	case mt.period == 0:
		delete(m.armed, id)
	case mt.period > 0:
		mt.when = addSat(mt.when, mt.period)
		mt.seq, m.seq = m.seq, m.seq+1
	default:
		mt.when = addSat(now, -mt.period)
		mt.seq, m.seq = m.seq, m.seq+1
	}
}

// byteReader feeds a fuzz input to the driver; it yields zeros when empty.
type byteReader struct{ b []byte }

func (r *byteReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *byteReader) u16() int64 { return int64(r.byte())<<8 | int64(r.byte()) }

// span returns a number of ticks at one of several scales, so that inputs
// reach every level of the wheel and its overflow list.
func (r *byteReader) span() int64 {
	v := r.u16()
	switch r.byte() % 8 {
	case 0, 1, 2:
		return v % 70 // level 0 and its edge
	case 3, 4:
		return v % 5000 // levels 1-2
	case 5:
		return v << 8 // up to level 3-4
	case 6:
		return v << 22 // up to level 5
	default:
		return v << 26 // beyond the wheel's 2^36 ticks: overflow
	}
}

// fuzzTicks are the resolutions the driver picks from: 1 ns makes the whole
// range cheap to cross, the others exercise rounding of deadlines to ticks.
var fuzzTicks = []int64{1, 7, 1000, int64(time.Millisecond)}

// checkWheel drives a wheel and the model with the operations encoded in
// data and fails t at the first difference.
func checkWheel(t *testing.T, data []byte) {
	r := &byteReader{b: data}
	tick := fuzzTicks[r.byte()%byte(len(fuzzTicks))]
	clock := NewManualClock(r.u16() * tick / 3)
	w, err := NewWheel(WheelConfig{Tick: time.Duration(tick), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	m := &wheelModel{tick: tick, elapsed: clock.Now() / tick, armed: map[int]*modelTimer{}}
	var timers []*Timer
	var ran []int
	const nowCap = int64(1) << 61 // keeps deadlines far from int64 overflow

	newTimer := func() {
		id := len(timers)
		when := clock.Now() + (r.span()-8)*tick + int64(r.byte())%tick
		fn := func() { ran = append(ran, id) }
		var tm *Timer
		var period int64
		switch k := r.byte() % 8; k {
		case 0:
			p := 1 + r.span()*tick + int64(r.byte())%tick
			tm, err = w.NewFixedRate(when, time.Duration(p), fn)
			period = p
		case 1:
			p := 1 + r.span()*tick + int64(r.byte())%tick
			tm, err = w.NewFixedDelay(when, time.Duration(p), fn)
			period = -p
		default:
			tm, err = w.NewTimer(when, fn)
		}
		if err != nil {
			t.Fatal(err)
		}
		timers = append(timers, tm)
		if r.byte()%4 == 0 {
			tm.Run() // the path of a timer handed over through the task queue
		} else if err := w.Add(tm); err != nil {
			t.Fatalf("Add(new timer %d): %v", id, err)
		}
		m.arm(id, when, period)
	}
	pick := func() (int, bool) {
		if len(timers) == 0 {
			return 0, false
		}
		return int(r.u16()) % len(timers), true
	}

	for op := 0; len(r.b) > 0; op++ {
		if want, ok := m.nextDue(); ok {
			got, gok := w.NextDeadline()
			if !gok || got > want {
				t.Fatalf("op %d: NextDeadline = %d, %v; a timer is due at %d", op, got, gok, want)
			}
		}
		switch r.byte() % 10 {
		case 0, 1, 2:
			newTimer()
		case 3, 4:
			id, ok := pick()
			if !ok {
				continue
			}
			_, want := m.armed[id]
			var got bool
			if r.byte()%2 == 0 {
				got = timers[id].Stop() // lazy: dropped when it comes due
			} else {
				got = w.Stop(timers[id])
			}
			if got != want {
				t.Fatalf("op %d: Stop(timer %d) = %v, model says %v", op, id, got, want)
			}
			delete(m.armed, id)
		case 5:
			id, ok := pick()
			if !ok {
				continue
			}
			when := clock.Now() + (r.span()-8)*tick + int64(r.byte())%tick
			mt, want := m.armed[id]
			if got := timers[id].Reset(when); got != want {
				t.Fatalf("op %d: Reset(timer %d) = %v, model says %v", op, id, got, want)
			}
			period := timers[id].period()
			if mt != nil && mt.period != period {
				t.Fatalf("timer %d period %d, model %d", id, period, mt.period)
			}
			m.arm(id, when, period)
		case 6:
			if id, ok := pick(); ok {
				if err := w.Add(timers[id]); err != ErrTimerScheduled {
					t.Fatalf("op %d: Add(timer %d) again = %v, want ErrTimerScheduled", op, id, err)
				}
			}
		default:
			if d := r.span()*tick + int64(r.byte())%tick; clock.Now()+d < nowCap {
				clock.Advance(time.Duration(d))
			}
			now := clock.Now()
			limit := -1
			if b := r.byte(); b%4 == 0 {
				limit = int(b/4) % 4
			}
			want := m.advance(now, limit)
			var got []*Timer
			w.Advance(now, func(tm *Timer) bool {
				if limit >= 0 && len(got) >= limit {
					return false
				}
				got = append(got, tm)
				return true
			})
			if len(got) != len(want) {
				t.Fatalf("op %d: Advance(%d) delivered %d timers, model %d (%v)", op, now, len(got), len(want), want)
			}
			ran = ran[:0]
			for i, tm := range got {
				id := want[i]
				if tm != timers[id] {
					t.Fatalf("op %d: Advance(%d) delivered #%d out of order: want timer %d", op, now, i, id)
				}
				if tm.When() > now {
					t.Fatalf("op %d: timer %d due %d fired early at %d", op, id, tm.When(), now)
				}
				tm.Run()
				m.ran(id, now)
			}
			if len(ran) != len(want) {
				t.Fatalf("op %d: ran %v, want %v", op, ran, want)
			}
		}
	}
	// Stopped timers may linger until due; armed ones must all be there.
	if w.Len() < len(m.armed) {
		t.Fatalf("wheel holds %d timers, model has %d armed", w.Len(), len(m.armed))
	}
	if n := w.StopAll(); n != len(m.armed) {
		t.Fatalf("StopAll stopped %d, model has %d armed", n, len(m.armed))
	}
	if w.Len() != 0 {
		t.Fatalf("Len after StopAll = %d", w.Len())
	}
}

// FuzzWheel checks the wheel against the reference model on random
// add/stop/reset/advance sequences: identical deliveries, in order, never
// early, never lost or duplicated when the sink refuses some.
func FuzzWheel(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 16 {
		f.Add(randomOps(rng, 200))
	}
	f.Fuzz(checkWheel)
}

// TestWheelModel runs fixed pseudo-random inputs through the fuzz driver, so
// plain go test covers it.
func TestWheelModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 400 {
		data := randomOps(rng, 50+rng.IntN(1500))
		t.Run("", func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("input %d: %x", i, data)
				}
			}()
			checkWheel(t, data)
		})
	}
}

func randomOps(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}
