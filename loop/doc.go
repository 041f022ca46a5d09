// Package loop provides Netty-style event loops on Linux io_uring, with an
// epoll backend that keeps the same contract.
//
// A [Group] is a fixed set of [Loop]s (Netty's EventLoopGroup); [Group.Next]
// picks one round robin. Each Loop is one goroutine locked to one OS thread
// for its whole life (runtime.LockOSThread, never unlocked) that owns one
// io_uring ring, or one epoll instance, plus a task queue, a timer wheel and
// an op table. An idle loop waits in the kernel. With [WithSharedThread]
// (or RINGLOOP=thread=shared) a loop holds a thread only while it runs a
// turn and waits parked on the Go netpoller, so handing it work is a
// goroutine switch (docs/loop.md, "Waiting", says when to pick which).
// Everything a loop runs (tasks, timers, completion callbacks, shutdown
// hooks) runs on that goroutine, one thing at a time, so state
// owned by a loop needs no lock.
//
// # Executor and op API
//
// A Loop is an executor: [Loop.Execute] and [Loop.ExecuteAfterTurn] queue
// functions, [Loop.Schedule] and its periodic forms queue timers, and
// everything queued runs on the loop goroutine. The loop's asynchronous
// socket operations are its [IO], reached with [Loop.IO]: Accept, Recv,
// RecvProvided, RecvProvidedOnce, RecvmsgProvided, Send, Sendmsg, SendTo,
// PollWritable, Connect, Close, Shutdown and Cancel, each of which delivers its
// completions to a [Completer] on the loop goroutine.
//
// # Affinity
//
// Every exported method says whether it is "Safe for concurrent use" or
// "Must be called on the loop goroutine". Execute, ExecuteAfterTurn,
// Schedule*, IO, Stats and the shutdown methods may be called from
// anywhere. The methods of IO are loop-only: call them from a task or a
// callback. [Loop.InLoop] tells code where it runs (it compares gettid(2)
// with the loop thread's id); builds with the uringdebug tag check
// loop-only calls this way and panic on stale completions.
//
// A loop never waits for itself: a blocking call that would returns an
// error wrapping [ErrInLoop] at once instead. [Group.Shutdown] does so on
// any of the group's loops, and the Wait of a pending future a loop
// completes ([NewFuture], a timer's Future) on that loop; a complete
// future's Wait returns its result anywhere (docs/loop.md, "Blocking
// waits").
//
// # Lifecycle
//
// Creating a group opens each loop's backend (setup errors are returned by
// [NewGroup], errno intact) but starts no goroutine: a loop starts on first
// use. States follow Netty ([State]): NotStarted, Started, ShuttingDown,
// Shutdown, Terminated. [Group.ShutdownGracefully] keeps running tasks until
// none arrived for the quiet period (or the timeout passed), runs shutdown
// hooks, cancels timers, cancels and reaps every op, closes the backend and
// then closes [Loop.Done] / [Group.Done]. After shutdown, Execute returns an
// error wrapping [ErrRejected].
//
// # Run cycle, wakeups, ioRatio
//
// Each turn waits for completions (without blocking if tasks are queued or a
// timer is due; otherwise until the next timer, at most 1 s), dispatches
// them, moves due timers to the task queue, runs tasks for
// ioTime*(100-ioRatio)/ioRatio (every task at ioRatio 100; the clock is read
// every 64 tasks), then runs tail tasks. Execute from another goroutine
// wakes a waiting loop with at most one eventfd write per wait. See
// docs/loop.md for the full protocol and the stalled-ring detector.
//
// # Observing a loop
//
// [Loop.Stats] and [Group.Stats] report counters and, as [Histogram]s
// with fixed power-of-two buckets, the latency of each turn (TurnTime),
// of its completion dispatch (IOTime) and task phase (TaskTime), and the
// time tasks wait in the queue before the loop takes them (QueueDelay).
// They add no clock read per task or completion (docs/loop.md, "Latency
// histograms").
//
// A blocked-loop detector, one goroutine per group, logs a loop that
// stays in one turn longer than [WithBlockedThreshold] (200 ms by
// default): "loop: blocked" at Warn, with what the loop runs
// ([Loop.Running]) and the loop goroutine's stack, then "loop: unblocked"
// when it moves on; [Stats] counts the episodes (docs/loop.md, "Blocked
// loops").
//
// While a runtime/trace is taken, each turn is a region "ringloop.turn"
// with sub-regions "wait", "io" and "tasks", in a trace task named after
// the loop, for go tool trace (docs/loop.md, "Execution traces").
//
// # Backends
//
// [BackendAuto] (the default) uses io_uring from Linux 6.1, where it is
// ahead of epoll (docs/kernel-support.md), and falls back to epoll, with one log line
// naming the reason, on older kernels and where io_uring is unusable
// (ENOSYS, EPERM, ENOMEM); [BackendUring] returns that error instead, one
// that names the kernel and what it lacks on a kernel before 6.1.
// [Loop.Features] and [Group.Features] report the choice. Features newer
// than 6.1 (bundles, NO_SQARRAY) are probed and used where present. A
// kernel profile (RINGLOOP=kernel=<version>) runs the loop as on another
// release, capping every probe to what it offers (docs/kernel-support.md,
// "Kernel profiles").
//
// # Environment
//
// RINGLOOP, GODEBUG style, is the one variable the package reads:
// RINGLOOP=thread=shared,kernel=6.1 (docs/configuration.md). Options win
// over it; unknown keys and bad values are logged once, at Warn, and
// ignored.
//
// # Memory shared with the kernel
//
// A buffer passed to an op belongs to the loop until the kernel's final
// word on it: the op's final completion.
// Where that word never comes (an op given up by a ring rebuild or by the
// drain at termination), the op's record and buffers are quarantined for
// the life of the process and counted in [Stats] (Quarantined and
// QuarantinedBytes, and ProcessQuarantinedBytes for the whole process); the
// op's Completer gets a final completion with
// [Completion].Quarantined set and must not reuse that memory either. See
// docs/op-lifecycle.md.
//
// # Fault injection
//
// Built with the ringfault tag, the package exports SetFaults and
// InjectedFaults, and the backends inject rare paths (short sends, fake
// retryable and fatal results, buffers returned with failures, CQ overflow,
// forced rebuilds, give-ups, failed buffer-ring registrations) at the
// probabilities given, for end-to-end tests that check every byte.
//
// # Default loop count
//
// runtime.GOMAXPROCS(0): one loop per P. Override it with [WithLoops]. The
// reason is in docs/decisions.md, "Default loop count".
package loop
