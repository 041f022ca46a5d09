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
