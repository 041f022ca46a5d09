package sched

import (
	"testing"
	"time"
)

func TestManualClock(t *testing.T) {
	c := NewManualClock(100)
	if c.Now() != 100 {
		t.Fatalf("Now = %d", c.Now())
	}
	if got := c.Advance(50); got != 150 {
		t.Fatalf("Advance = %d", got)
	}
	if got := c.Advance(-time.Second); got != 150 {
		t.Fatalf("negative Advance moved the clock to %d", got)
	}
	if got := c.Set(120); got != 150 {
		t.Fatalf("Set backwards moved the clock to %d", got)
	}
	if got := c.Set(1000); got != 1000 || c.Now() != 1000 {
		t.Fatalf("Set = %d", got)
	}
	var zero ManualClock
	if zero.Now() != 0 {
		t.Fatal("zero ManualClock does not read 0")
	}
}

func TestSystemClockMonotonic(t *testing.T) {
	c := SystemClock()
	prev := c.Now()
	if prev < 0 {
		t.Fatalf("SystemClock reads %d", prev)
	}
	for range 1000 {
		now := c.Now()
		if now < prev {
			t.Fatalf("clock went back from %d to %d", prev, now)
		}
		prev = now
	}
	time.Sleep(time.Millisecond)
	if c.Now()-prev < int64(time.Millisecond) {
		t.Fatal("a 1 ms sleep did not move the clock by 1 ms")
	}
}

func TestRunRecoversPanics(t *testing.T) {
	if err := Run(TaskFunc(func() {})); err != nil {
		t.Fatalf("Run = %v", err)
	}
	errBoom := errorString("boom")
	err := Run(TaskFunc(func() { panic(errBoom) }))
	pe, ok := err.(*PanicError)
	if !ok || pe.Value != errBoom || pe.Unwrap() != errBoom || pe.Error() != "sched: task panicked: boom" {
		t.Fatalf("Run = %#v", err)
	}
	if (&PanicError{Value: 1}).Unwrap() != nil {
		t.Fatal("Unwrap of a non-error value")
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
