package loop

import "sync/atomic"

// A Local is a value of type T that every loop keeps for one user, made by
// the Local's init function the first time that loop's value is asked for
// (Netty's FastThreadLocal, per event loop). A package keeps its per-loop
// state in a Local rather than in a map keyed by loop: the state lives and
// dies with its loop, and reading it is a slice index, not a map lookup
// under a lock.
type Local[T any] struct {
	idx  int
	init func(*Loop) *T
}

// localCount numbers the Locals.
var localCount atomic.Int32

// NewLocal returns a Local whose value for each loop init makes. init runs
// once per loop, on whichever goroutine first calls Get for that loop; it
// must not call Get itself. Locals are meant to be package-level variables:
// each costs a slot in every loop that uses it.
func NewLocal[T any](init func(l *Loop) *T) *Local[T] {
	if init == nil {
		panic("loop: NewLocal with a nil init function")
	}
	return &Local[T]{idx: int(localCount.Add(1)) - 1, init: init}
}

// Get returns l's value, making it on the first call. Safe for concurrent
// use.
func (k *Local[T]) Get(l *Loop) *T {
	if p := l.locals.Load(); p != nil && k.idx < len(*p) {
		if v := (*p)[k.idx]; v != nil {
			return v.(*T)
		}
	}
	return k.slow(l)
}

func (k *Local[T]) slow(l *Loop) *T {
	l.localsMu.Lock()
	defer l.localsMu.Unlock()
	var cur []any
	if p := l.locals.Load(); p != nil {
		cur = *p
	}
	if k.idx < len(cur) && cur[k.idx] != nil {
		return cur[k.idx].(*T)
	}
	v := k.init(l)
	next := make([]any, max(len(cur), k.idx+1))
	copy(next, cur)
	next[k.idx] = v
	l.locals.Store(&next)
	return v
}
