package sched_test

import (
	"fmt"
	"time"

	"github.com/ringloop/ringloop/sched"
)

// A loop turn in miniature: tasks and due timers share one queue, the wheel
// says how long the loop may sleep, and a manual clock makes it all
// deterministic.
func ExampleWheel() {
	clock := sched.NewManualClock(0)
	wheel, _ := sched.NewWheel(sched.WheelConfig{Tick: time.Millisecond, Clock: clock})
	tasks := sched.NewQueue(0)

	ms := int64(time.Millisecond)
	say := func(s string) func() {
		return func() { fmt.Printf("%2d ms: %s\n", clock.Now()/ms, s) }
	}
	once, _ := wheel.NewTimer(5*ms, say("one-shot"))
	tick, _ := wheel.NewFixedRate(2*ms, 4*time.Millisecond, say("fixed rate"))
	late, _ := wheel.NewTimer(7*ms, say("never runs"))
	for _, t := range []*sched.Timer{once, tick, late} {
		_ = wheel.Add(t)
	}
	_ = tasks.Push(sched.TaskFunc(say("task")))
	fmt.Println("stopped:", late.Stop())

	toQueue := func(t *sched.Timer) bool { return tasks.Push(t) == nil }
	run := func(t sched.Task) {
		if err := sched.Run(t); err != nil {
			fmt.Println(err)
		}
	}
	for {
		tasks.Drain(0, run)
		if clock.Now() >= 10*ms {
			break
		}
		clock.Advance(wheel.Delay(clock.Now())) // stands in for the loop's wait
		wheel.Advance(clock.Now(), toQueue)
	}
	// Output:
	// stopped: true
	//  0 ms: task
	//  2 ms: fixed rate
	//  5 ms: one-shot
	//  6 ms: fixed rate
	// 10 ms: fixed rate
}
