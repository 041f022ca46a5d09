// Package sched is the scheduling core of a ringloop event loop: a
// multi-producer, single-consumer task queue, a hierarchical hashed timer
// wheel, futures, and the clocks they run on. It is pure Go (no syscalls, no
// unsafe, nothing else from this module), starts no goroutine, and builds and
// tests on every operating system.
//
// # Single-consumer contract
//
// Each [Queue] and each [Wheel] belongs to one goroutine, the event loop:
//
//   - Any goroutine may push to a Queue, create timers, call [Timer.Stop],
//     and use [Future] values. These methods say "Safe for concurrent use."
//   - Only the owner may pop or drain the Queue, add, reset, advance or
//     inspect the Wheel, and call [Timer.Run]. These methods say "Must be
//     called on the goroutine that owns the wheel" (or "on the consumer
//     goroutine"). Go has no goroutine identity to check this, so it is a
//     documented contract, as it is for the loop built on top.
//
// A timer made on another goroutine reaches the wheel by being pushed onto
// the owner's queue: a [*Timer] is a [Task], and running it on the owner
// inserts it. Due timers travel the other way: [Wheel.Advance] hands them to
// a sink, normally a push onto the same queue, and running them there calls
// their function and re-arms periodic ones. With a bounded queue a due timer
// that does not fit stays in the wheel and is offered again by the next
// Advance, never lost or duplicated.
//
// # Futures and their owner
//
// A [Future] may name its [Owner], the goroutine that completes it
// ([NewFutureOn]; a timer's future has its wheel's, [WheelConfig.Owner]).
// [Future.Wait] asks the owner before blocking: on the owner's own
// goroutine a pending future could never complete, so Wait returns the
// owner's error at once instead (an event loop's error says so; a future
// already complete returns its result anywhere). Waiting on any other
// goroutine is not checked: two owners waiting for each other's futures
// block for good, and only the code that waits can avoid it.
//
// # Wheel resolution and range
//
// The wheel follows Varghese and Lauck, "Hashed and Hierarchical Timing
// Wheels: Data Structures for the Efficient Implementation of a Timer
// Facility" (SOSP 1987), scheme 7: six levels of 64 slots, level l slot s
// covering 64^l ticks. The tick is configurable and defaults to 1 ms, so the
// levels resolve 1 ms, 64 ms, 4.1 s, 4.4 min, 4.7 h and 12.4 days per slot,
// and span 2^36 ticks (about 795 days) in all; deadlines further out wait in
// an overflow list that is re-examined once per 2^36 ticks. A timer fires at
// the first tick boundary at or after its deadline: never early, at most one
// tick late when the wheel is advanced every tick. Timers delivered together
// come in (deadline, insertion sequence) order, so equal deadlines fire in
// the order they were scheduled.
//
// Add, Stop and Reset are O(1); Advance is O(1) per due timer plus O(1) per
// occupied slot crossed (a bitmap per level finds the next one), and a timer
// cascades at most five times on its way down. [Wheel.Delay] tells the loop
// how long it may block, capped at [IdleWait] (1 s) as in Netty.
//
// # Time
//
// Instants are int64 nanoseconds read from a [Clock]: [SystemClock] for
// production (monotonic, since process start), [ManualClock] for tests, which
// makes every timing test deterministic.
//
// # Tasks and panics
//
// [Run] runs a task and turns a panic into a [*PanicError]; an event loop
// runs every task through it, reports the error and carries on. A timer whose
// function panics becomes failed (a periodic timer stops) and its future
// fails with that error.
package sched
