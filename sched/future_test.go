package sched

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func TestFutureSetOnce(t *testing.T) {
	f := NewFuture[int]()
	if _, _, done := f.Result(); done || f.IsDone() {
		t.Fatal("new future is done")
	}
	if !f.Complete(7, nil) {
		t.Fatal("first Complete returned false")
	}
	if f.Complete(8, errors.New("late")) {
		t.Fatal("second Complete returned true")
	}
	if v, err, done := f.Result(); !done || v != 7 || err != nil {
		t.Fatalf("Result = %v, %v, %v", v, err, done)
	}
	select {
	case <-f.Done():
	default:
		t.Fatal("Done not closed")
	}
	var zero Future[string] // the zero value is usable
	errBoom := errors.New("boom")
	zero.Complete("", errBoom)
	if _, err := zero.Wait(context.Background()); err != errBoom {
		t.Fatalf("Wait = %v", err)
	}
}

func TestFutureListenersInOrder(t *testing.T) {
	f := NewFuture[string]()
	var got []string
	for _, name := range []string{"a", "b", "c"} {
		f.OnDone(func(v string, err error) { got = append(got, name+v) })
	}
	if len(got) != 0 {
		t.Fatal("listener ran before completion")
	}
	f.Complete("!", nil)
	f.OnDone(func(v string, err error) { got = append(got, "late"+v) }) // runs at once
	want := []string{"a!", "b!", "c!", "late!"}
	if len(got) != len(want) {
		t.Fatalf("listeners ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("listeners ran %v, want %v", got, want)
		}
	}
}

func TestFutureWaitContext(t *testing.T) {
	f := NewFuture[int]()
	ctx, cancel := contextWithTimeout(5 * time.Millisecond)
	defer cancel()
	if _, err := f.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a pending future = %v", err)
	}
	go f.Complete(3, nil)
	if v, err := f.Wait(context.Background()); v != 3 || err != nil {
		t.Fatalf("Wait = %v, %v", v, err)
	}
}

// Many goroutines complete, wait on and listen to one future at once: one
// Complete wins, every waiter and listener sees its result exactly once.
func TestFutureConcurrent(t *testing.T) {
	for range 100 {
		f := NewFuture[int]()
		var wins, calls atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(3)
			go func() {
				defer wg.Done()
				if f.Complete(i, nil) {
					wins.Add(1)
				}
			}()
			go func() {
				defer wg.Done()
				f.OnDone(func(int, error) { calls.Add(1) })
			}()
			go func() {
				defer wg.Done()
				v, _ := f.Wait(context.Background())
				if w, _, _ := f.Result(); v != w {
					t.Errorf("Wait saw %d, Result %d", v, w)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 || calls.Load() != 8 {
			t.Fatalf("%d Complete calls won, %d listener calls", wins.Load(), calls.Load())
		}
	}
}

// testOwner refuses every wait while refuse is set, with errOwnGoroutine:
// it plays an event loop whose goroutine calls Wait.
type testOwner struct {
	refuse atomic.Bool
	checks atomic.Int32
	hook   func() // runs in CheckWait, if set
}

var errOwnGoroutine = errors.New("waiting on the owner's goroutine")

func (o *testOwner) CheckWait() error {
	o.checks.Add(1)
	if o.hook != nil {
		o.hook()
	}
	if o.refuse.Load() {
		return errOwnGoroutine
	}
	return nil
}

// TestFutureOwnerRefusesWait: Wait for a pending future returns its
// owner's error at once, whatever ctx, where the owner refuses; it waits
// where the owner allows; a complete future returns its result even where
// the owner refuses, without asking it.
func TestFutureOwnerRefusesWait(t *testing.T) {
	o := &testOwner{}
	o.refuse.Store(true)
	f := NewFutureOn[int](o)
	ctx, cancel := contextWithTimeout(5 * time.Second) // a regression fails instead of hanging
	defer cancel()
	if _, err := f.Wait(ctx); err != errOwnGoroutine {
		t.Fatalf("Wait where the owner refuses: %v, want its error", err)
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if _, err := f.Wait(done); err != errOwnGoroutine {
		t.Fatalf("Wait with a done ctx where the owner refuses: %v, want the owner's error", err)
	}
	if f.IsDone() {
		t.Fatal("a refused Wait completed the future")
	}
	o.refuse.Store(false)
	go f.Complete(4, nil)
	if v, err := f.Wait(ctx); v != 4 || err != nil {
		t.Fatalf("Wait where the owner allows: %v, %v", v, err)
	}
	o.refuse.Store(true)
	checks := o.checks.Load()
	if v, err := f.Wait(context.Background()); v != 4 || err != nil {
		t.Fatalf("Wait for a complete future where the owner refuses: %v, %v", v, err)
	}
	if o.checks.Load() != checks {
		t.Fatal("Wait asked the owner about a complete future")
	}
	if NewFutureOn[int](nil).owner != nil {
		t.Fatal("a nil owner was kept")
	}
}

// TestFutureCompletedDuringCheck: a future another goroutine completes
// while its owner refuses the wait gives its result, not the refusal.
func TestFutureCompletedDuringCheck(t *testing.T) {
	o := &testOwner{}
	o.refuse.Store(true)
	f := NewFutureOn[string](o)
	o.hook = func() { f.Complete("late", nil) }
	if v, err := f.Wait(context.Background()); v != "late" || err != nil {
		t.Fatalf("Wait = %q, %v, want the result completed during the check", v, err)
	}
}

// TestTimerFutureOwner: a timer's future has its wheel's owner.
func TestTimerFutureOwner(t *testing.T) {
	o := &testOwner{}
	clock := NewManualClock(0)
	w, err := NewWheel(WheelConfig{Clock: clock, Owner: o})
	if err != nil {
		t.Fatal(err)
	}
	tm, _ := w.NewTimer(int64(time.Millisecond), func() {})
	_ = w.Add(tm)
	o.refuse.Store(true)
	if _, err := tm.Future().Wait(context.Background()); err != errOwnGoroutine {
		t.Fatalf("Wait for a pending timer's future on its owner: %v", err)
	}
	w.Advance(clock.Advance(time.Millisecond), func(tm *Timer) bool { tm.Run(); return true })
	if _, err := tm.Future().Wait(context.Background()); err != nil {
		t.Fatalf("Wait for a fired timer's future on its owner: %v", err)
	}
	plain, _ := NewWheel(WheelConfig{Clock: clock})
	tm, _ = plain.NewTimer(0, func() {})
	if tm.Future().owner != nil {
		t.Fatal("a timer of a wheel with no owner has an owned future")
	}
}
