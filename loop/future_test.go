package loop_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
)

// errReleased completes a future the test had to let go of: a wait that
// blocked where it should have been refused.
var errReleased = errors.New("released by the test's watchdog")

// expectRefusal checks that a wait started on a loop sent an error
// wrapping loop.ErrInLoop to res at once. A wait that blocks instead (a
// loop waiting for itself) is let go by release after 5 s, and the test
// fails instead of hanging.
func expectRefusal(tb testing.TB, what string, res <-chan error, release func()) {
	tb.Helper()
	select {
	case err := <-res:
		if !errors.Is(err, loop.ErrInLoop) {
			tb.Fatalf("%s on its own loop: %v, want an error wrapping loop.ErrInLoop", what, err)
		}
	case <-time.After(5 * time.Second):
		release()
		<-res
		tb.Fatalf("%s on its own loop blocked instead of returning loop.ErrInLoop", what)
	}
}

// refusedOn runs wait as a task on l and checks it with expectRefusal.
func refusedOn(tb testing.TB, l *loop.Loop, what string, wait func() error, release func()) {
	tb.Helper()
	res := make(chan error, 1)
	if err := l.Execute(func() { res <- wait() }); err != nil {
		tb.Fatalf("Execute: %v", err)
	}
	expectRefusal(tb, what, res, release)
}

// resultOn runs f on l and returns what it returned.
func resultOn[T any](tb testing.TB, l *loop.Loop, f func() T) T {
	tb.Helper()
	res := make(chan T, 1)
	runOn(tb, l, func() { res <- f() })
	return <-res
}

type waitResult struct {
	v   int
	err error
}

// TestFutureWaitOnItsLoop: Wait for a pending future of loop.NewFuture on
// the future's own loop returns an error wrapping loop.ErrInLoop at once,
// whatever the context; on another loop and off the loops it waits and
// gets the result; a complete future's Wait returns its result on its
// loop too, also in an OnDone listener.
func TestFutureWaitOnItsLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(2))
		l0, l1 := g.Loop(0), g.Loop(1)

		f := loop.NewFuture[int](l0)
		release := func() { f.Complete(0, errReleased) }
		refusedOn(t, l0, "Wait(context.Background())", func() error {
			_, err := f.Wait(context.Background())
			return err
		}, release)
		refusedOn(t, l0, "Wait with a deadline", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			_, err := f.Wait(ctx)
			return err
		}, release)
		if f.IsDone() {
			t.Fatal("a refused Wait completed the future")
		}

		// Another loop may wait for l0 to complete it: only the future's
		// own loop is refused, as in Netty.
		r := resultOn(t, l1, func() waitResult {
			if err := l0.Execute(func() { f.Complete(7, nil) }); err != nil {
				return waitResult{err: err}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			v, err := f.Wait(ctx)
			return waitResult{v, err}
		})
		if r.v != 7 || r.err != nil {
			t.Fatalf("Wait on another loop: %d, %v, want 7, nil", r.v, r.err)
		}

		// Complete: its result, on its own loop as well.
		r = resultOn(t, l0, func() waitResult {
			v, err := f.Wait(context.Background())
			return waitResult{v, err}
		})
		if r.v != 7 || r.err != nil {
			t.Fatalf("Wait for a complete future on its loop: %d, %v, want 7, nil", r.v, r.err)
		}
		r = resultOn(t, l0, func() waitResult {
			lf := loop.NewFuture[int](l0)
			res := waitResult{err: errors.New("the listener did not run")}
			lf.OnDone(func(int, error) {
				v, err := lf.Wait(context.Background())
				res = waitResult{v, err}
			})
			lf.Complete(8, nil)
			return res
		})
		if r.v != 8 || r.err != nil {
			t.Fatalf("Wait in an OnDone listener: %d, %v, want 8, nil", r.v, r.err)
		}

		// Off the loops it waits.
		off := loop.NewFuture[string](l0)
		if _, err := l0.Schedule(20*time.Millisecond, func() { off.Complete("done", nil) }); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if v, err := off.Wait(ctx); v != "done" || err != nil {
			t.Fatalf("Wait off the loops: %q, %v", v, err)
		}
	})
}

// TestTimerFutureWaitOnItsLoop: a timer's future belongs to the timer's
// loop: Wait for it there returns an error wrapping loop.ErrInLoop while
// the timer is pending (one-shot or periodic, also from the timer's own
// function); off the loop it waits; once complete it returns its result
// on the loop.
func TestTimerFutureWaitOnItsLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		once, err := l.Schedule(time.Hour, func() {})
		if err != nil {
			t.Fatal(err)
		}
		rate, err := l.ScheduleAtFixedRate(time.Hour, time.Hour, func() {})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			what string
			tm   *sched.Timer
		}{{"one-shot timer", once}, {"fixed-rate timer", rate}} {
			refusedOn(t, l, "Future().Wait of a pending "+tc.what, func() error {
				_, err := tc.tm.Future().Wait(context.Background())
				return err
			}, func() { tc.tm.Stop() })
		}

		// From the timer's own function: the timer is running, its
		// future pending.
		self := make(chan error, 1)
		var selfTimer *sched.Timer
		runOn(t, l, func() { // scheduled on the loop: set before it runs
			selfTimer, err = l.Schedule(0, func() {
				_, err := selfTimer.Future().Wait(context.Background())
				self <- err
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		expectRefusal(t, "a timer's Future().Wait in its own function", self, func() {
			selfTimer.Future().Complete(struct{}{}, errReleased)
		})

		// Off the loop: Stop, then the wait ends with ErrCanceled; a
		// timer that runs ends it with nil.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		time.AfterFunc(10*time.Millisecond, func() { once.Stop() })
		if _, err := once.Future().Wait(ctx); !errors.Is(err, sched.ErrCanceled) {
			t.Fatalf("Wait off the loop for a stopped timer: %v, want sched.ErrCanceled", err)
		}
		soon, err := l.Schedule(10*time.Millisecond, func() {})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := soon.Future().Wait(ctx); err != nil {
			t.Fatalf("Wait off the loop for a timer that ran: %v", err)
		}

		// Complete: the result, on the loop.
		for _, tc := range []struct {
			what string
			tm   *sched.Timer
			want error
		}{{"a fired timer", soon, nil}, {"a stopped timer", once, sched.ErrCanceled}, {"a timer waiting for itself", selfTimer, nil}} {
			err := resultOn(t, l, func() error {
				_, err := tc.tm.Future().Wait(context.Background())
				return err
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Future().Wait of %s on its loop: %v, want %v", tc.what, err, tc.want)
			}
		}
		rate.Stop()
	})
}

// A handler on the loop acts on a future's result with OnDone; Wait is
// for goroutines off the loop that completes it.
func ExampleNewFuture() {
	g, _ := loop.NewGroup(loop.WithLoops(1))
	defer g.Shutdown(context.Background())
	l := g.Next()
	f := loop.NewFuture[string](l)
	listened := make(chan struct{})
	_ = l.Execute(func() {
		_, err := f.Wait(context.Background()) // on l: refused, l would wait for itself
		fmt.Println(errors.Is(err, loop.ErrInLoop))
		f.OnDone(func(v string, err error) { fmt.Println("listener:", v); close(listened) })
		f.Complete("ready", nil)
	})
	v, _ := f.Wait(context.Background()) // off the loop: waits
	<-listened
	fmt.Println("waited:", v)
	// Output:
	// true
	// listener: ready
	// waited: ready
}
