package sched

import (
	"context"
	"sync"
	"sync/atomic"
)

// closedChan is the Done channel of a future that completed before anyone
// asked for its channel: one shared closed channel instead of one per future.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// An Owner stands for the goroutine that completes a future, normally an
// event loop's. A goroutine that blocks waiting for a future only it would
// complete waits for good, so [Future.Wait] asks the future's owner before
// it blocks. A future gets its owner from [NewFutureOn], or from its
// timer's wheel ([WheelConfig.Owner]).
type Owner interface {
	// CheckWait returns nil if the calling goroutine may block until the
	// owner completes a future, and otherwise the error that a blocking
	// wait returns at once instead: on the owner's own goroutine, which
	// would have to complete the future it waits for. Safe for concurrent
	// use.
	CheckWait() error
}

// A Future is the set-once result of an asynchronous operation: a value of
// type T or an error. It is also its own promise: whoever runs the operation
// calls [Future.Complete] once; later calls are ignored.
//
// Observers can poll with [Future.Result], block with [Future.Wait], select on
// [Future.Done], or register callbacks with [Future.OnDone]. A future may
// have an [Owner], the goroutine that completes it: Wait refuses to block
// there. A receive from Done is not checked: on the owner's goroutine it
// never returns while the future is pending. A Future starts no goroutine.
// The zero value is a pending future of no owner, ready to use; a Future
// must not be copied after first use.
type Future[T any] struct {
	owner Owner       // set at creation, never changed; nil: Wait never refuses
	done  atomic.Bool // set after val and err, under mu; read without mu

	mu        sync.Mutex
	ch        chan struct{}    // created on first Done call; closed on completion
	listeners []func(T, error) // in registration order; nil once completed
	val       T                // written once, before done is set
	err       error            // written once, before done is set
}

// NewFuture returns a pending future of no owner: its Wait blocks on any
// goroutine. Safe for concurrent use.
func NewFuture[T any]() *Future[T] { return &Future[T]{} }

// NewFutureOn returns a pending future that owner completes. Its Wait,
// called while the future is pending on a goroutine owner refuses
// ([Owner.CheckWait]), returns owner's error at once instead of blocking. A
// nil owner gives a future like NewFuture's. Safe for concurrent use.
func NewFutureOn[T any](owner Owner) *Future[T] { return &Future[T]{owner: owner} }

// Complete sets the future's result to v and err and reports whether this call
// completed it; it returns false, changing nothing, if the future was already
// complete. On success it closes the Done channel, then runs the registered
// listeners in registration order on the calling goroutine. A panicking
// listener propagates to the caller and the listeners after it do not run.
// Safe for concurrent use.
func (f *Future[T]) Complete(v T, err error) bool {
	f.mu.Lock()
	if f.done.Load() {
		f.mu.Unlock()
		return false
	}
	f.val, f.err = v, err
	f.done.Store(true)
	if f.ch != nil {
		close(f.ch)
	}
	ls := f.listeners
	f.listeners = nil
	f.mu.Unlock()
	for _, l := range ls {
		l(v, err)
	}
	return true
}

// IsDone reports whether the future is complete. Safe for concurrent use.
func (f *Future[T]) IsDone() bool { return f.done.Load() }

// Result returns the value and error and true if the future is complete, or
// zero values and false if it is pending. Safe for concurrent use.
func (f *Future[T]) Result() (T, error, bool) {
	if !f.done.Load() {
		var zero T
		return zero, nil, false
	}
	return f.val, f.err, true
}

// Done returns a channel that is closed when the future completes. Safe for
// concurrent use.
func (f *Future[T]) Done() <-chan struct{} {
	if f.done.Load() {
		return closedChan
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done.Load() {
		return closedChan
	}
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

// Wait blocks until the future completes or ctx is done, and returns the
// future's value and error, or the zero value and ctx.Err(). A complete
// future's result is returned at once, on any goroutine. A pending future
// whose [Owner] refuses the calling goroutine (its own, which would have to
// complete the future) is not waited for: Wait returns the zero value and
// the owner's error at once, whatever ctx. Safe for concurrent use.
func (f *Future[T]) Wait(ctx context.Context) (T, error) {
	if f.done.Load() {
		return f.val, f.err
	}
	if f.owner != nil {
		if err := f.owner.CheckWait(); err != nil {
			if f.done.Load() { // completed meanwhile by another goroutine
				return f.val, f.err
			}
			var zero T
			return zero, err
		}
	}
	select {
	case <-f.Done():
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// OnDone registers fn to be called with the future's value and error once it
// completes. Listeners registered before completion run in registration order
// on the goroutine that calls [Future.Complete], after Done is closed; if the
// future is already complete, fn runs at once on the calling goroutine. fn
// must not block: on an event loop it runs on the loop. Safe for concurrent
// use.
func (f *Future[T]) OnDone(fn func(T, error)) {
	if !f.done.Load() {
		f.mu.Lock()
		if !f.done.Load() {
			f.listeners = append(f.listeners, fn)
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
	fn(f.val, f.err)
}
