package sched

import "math/bits"

// Wheel geometry: numLevels levels of slotsPerLevel slots. Level l slot s
// holds timers due in a window of 64^l ticks, so level 0 resolves single ticks
// and the top level spans 64^6 = 2^36 ticks (about 795 days at 1 ms, 68 s at
// 1 ns). Deadlines beyond that wait in the wheel's overflow list.
const (
	levelBits     = 6
	slotsPerLevel = 1 << levelBits // 64: one bit per slot in a uint64 bitmap
	slotMask      = slotsPerLevel - 1
	numLevels     = 6
	wheelBits     = levelBits * numLevels // 36: ticks covered by all levels
)

// levelFor returns the level at which a timer due at tick due is kept while
// the wheel has processed every tick up to elapsed (due > elapsed): the level
// of the highest bit in which due and elapsed differ. A result >= numLevels
// means the deadline lies beyond the wheel's range and belongs in overflow.
//
// Because due and elapsed agree on every bit above that level, the timer's
// slot at that level lies strictly after elapsed's slot in the same rotation:
// a level never wraps, and its slots at or before elapsed's are empty.
func levelFor(elapsed, due uint64) int {
	masked := (elapsed ^ due) | slotMask // | slotMask: equal values land on level 0
	return (63 - bits.LeadingZeros64(masked)) / levelBits
}

// slotFor returns the slot of tick due at level l.
func slotFor(due uint64, l int) int {
	return int(due>>(uint(l)*levelBits)) & slotMask
}

// level is one ring of the wheel. Invariant: bit s of occupied is set iff
// slots[s] is non-empty.
type level struct {
	occupied uint64
	slots    [slotsPerLevel]timerList
}

// nextOccupied returns the first occupied slot after pos, if any.
func (lv *level) nextOccupied(pos int) (int, bool) {
	m := lv.occupied &^ (uint64(2)<<uint(pos) - 1) // clear bits 0..pos; pos 63 clears all
	if m == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(m), true
}

// timerList is an intrusive doubly linked FIFO of timers, linked through
// Timer.prev and Timer.next, so insertion and removal are O(1) and allocate
// nothing.
type timerList struct {
	head, tail *Timer
}

func (l *timerList) empty() bool { return l.head == nil }

// pushBack appends t, which must be on no list.
func (l *timerList) pushBack(t *Timer) {
	t.prev, t.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = t
	} else {
		l.head = t
	}
	l.tail = t
}

// remove unlinks t, which must be on l.
func (l *timerList) remove(t *Timer) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.tail = t.prev
	}
	t.prev, t.next = nil, nil
}

// takeAll empties l and returns its former head; the timers stay chained
// through next, so the caller must read t.next before relinking t.
func (l *timerList) takeAll() *Timer {
	h := l.head
	l.head, l.tail = nil, nil
	return h
}

// pushFront prepends t, which must be on no list.
func (l *timerList) pushFront(t *Timer) {
	t.prev, t.next = nil, l.head
	if l.head != nil {
		l.head.prev = t
	} else {
		l.tail = t
	}
	l.head = t
}
