package loop_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// countTask counts its runs; run is its method value, made once, so
// queuing it allocates nothing.
type countTask struct {
	l    *loop.Loop
	run  func()
	runs atomic.Int32
	off  atomic.Int32 // runs not on the loop
	done chan struct{}
}

func (c *countTask) Run() {
	if !c.l.InLoop() {
		c.off.Add(1)
	}
	if c.runs.Add(1) == 2 {
		close(c.done)
	}
}

func TestExecuteBoundFunc(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		ct := &countTask{l: g.Loop(0), done: make(chan struct{})}
		ct.run = ct.Run
		if err := ct.l.Execute(ct.run); err != nil {
			t.Fatal(err)
		}
		if err := ct.l.ExecuteAfterTurn(ct.run); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ct.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 tasks ran", ct.runs.Load())
		}
		if n := ct.off.Load(); n != 0 {
			t.Fatalf("%d tasks ran off the loop", n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = ct.l.Execute(ct.run) }); n != 0 {
			t.Fatalf("Execute allocates %.1f times per call", n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = ct.l.ExecuteAfterTurn(ct.run) }); n != 0 {
			t.Fatalf("ExecuteAfterTurn allocates %.1f times per call", n)
		}
	})
}

func TestExecuteManyProducers(t *testing.T) {
	const producers, perProducer = 8, 50000
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(2))
		for _, l := range g.Loops() {
			runOn(t, l, func() {}) // start, so Tid is known
		}
		tids := []int{g.Loop(0).Tid(), g.Loop(1).Tid()}
		shared := g.Loop(0).Features().SharedThread
		var (
			ran     atomic.Int64
			bad     atomic.Int64
			wrongOS atomic.Int64
			wg      sync.WaitGroup
		)
		// last[p][loop] is the last sequence number producer p saw run on
		// loop; only that loop's goroutine touches it.
		last := make([][2]int, producers)
		for p := range last {
			last[p] = [2]int{-1, -1}
		}
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perProducer; i++ {
					l := g.Next()
					idx := l.Index()
					seq := i
					err := l.Execute(func() {
						if shared && !l.InLoop() || !shared && unix.Gettid() != tids[idx] {
							wrongOS.Add(1)
						}
						if last[p][idx] >= seq {
							bad.Add(1)
						}
						last[p][idx] = seq
						ran.Add(1)
					})
					if err != nil {
						t.Errorf("Execute: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		waitFor(t, 30*time.Second, "all tasks to run", func() bool { return ran.Load() == producers*perProducer })
		for _, l := range g.Loops() {
			runOn(t, l, func() {}) // queued behind every task: a task run twice ran before it
		}
		if n := ran.Load(); n != producers*perProducer {
			t.Fatalf("%d tasks ran, want %d (a task ran twice)", n, producers*perProducer)
		}
		if bad.Load() != 0 || wrongOS.Load() != 0 {
			t.Fatalf("%d tasks out of per-producer order, %d on a foreign thread", bad.Load(), wrongOS.Load())
		}
		for _, s := range g.Stats().Loops {
			t.Logf("%s: tasks %d sleeps %d wake writes %d wakeups %d turns %d", s.Name, s.Tasks, s.Sleeps, s.WakeWrites, s.Wakeups, s.Turns)
			if s.WakeWrites > s.Sleeps {
				t.Fatalf("%s: %d eventfd writes for %d sleeps", s.Name, s.WakeWrites, s.Sleeps)
			}
		}
	})
}

func TestExecuteFromLoopDoesNotWriteEventfd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {})
		before := l.Stats().WakeWrites
		done := make(chan struct{})
		runOn(t, l, func() {
			var n int
			var step func()
			step = func() {
				if n++; n == 1000 {
					close(done)
					return
				}
				l.Execute(step)
			}
			l.Execute(step)
		})
		<-done
		if w := l.Stats().WakeWrites - before; w > 1 {
			t.Fatalf("1000 Executes from the loop made %d eventfd writes", w)
		}
	})
}

func TestWakeupLatency(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {})
		for i := 0; i < 20; i++ {
			waitFor(t, time.Second, "the loop to wait", l.Waiting)
			start := time.Now()
			runOn(t, l, func() {})
			if d := time.Since(start); d > 200*time.Millisecond {
				t.Fatalf("Execute on a waiting loop took %v", d)
			}
		}
	})
}

// threadCPU returns the user+system clock ticks of thread tid.
func threadCPU(t *testing.T, tid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

func TestIdleGroupCPU(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(4))
		for _, l := range g.Loops() {
			runOn(t, l, func() {})
			waitAsleep(t, l)
		}
		var before, after int64
		var ru0, ru1 unix.Rusage
		shared := g.Loop(0).Features().SharedThread
		for _, l := range g.Loops() {
			if !shared {
				before += threadCPU(t, l.Tid())
			}
		}
		unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		const span = 2 * time.Second
		time.Sleep(span)
		for _, l := range g.Loops() {
			if !shared {
				after += threadCPU(t, l.Tid())
			}
		}
		unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		// Clock ticks are USER_HZ (100/s on Linux).
		loopPct := float64(after-before) * 10 * float64(time.Millisecond) / float64(span) * 100
		procPct := float64(rusageNanos(&ru1)-rusageNanos(&ru0)) / float64(span) * 100
		s := g.Stats().Total
		t.Logf("idle 4 loops over %v: loop threads %.2f%% of a core, whole process %.2f%%; turns %d sleeps %d", span, loopPct, procPct, s.Turns, s.Sleeps)
		if shared {
			// The loops own no thread: the whole process is measured.
			if procPct >= 2 {
				t.Fatalf("process with idle shared-thread loops used %.2f%% of a core", procPct)
			}
		} else if loopPct >= 2 {
			t.Fatalf("idle loop threads used %.2f%% of a core", loopPct)
		}
		if s.Turns > 4*(3+2) { // at most one idle wake per second per loop, plus start-up turns
			t.Fatalf("idle loops turned %d times in %v", s.Turns, span)
		}
	})
}

func rusageNanos(r *unix.Rusage) int64 {
	return r.Utime.Nano() + r.Stime.Nano()
}

// TestNow: Loop.Now reads the clock the loop's timers run on, and a
// timer scheduled for d fires once Now has advanced by d.
func TestNow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk))
		l := g.Loops()[0]
		if got := l.Now(); got != time.Hour {
			t.Fatalf("Now() = %v, want the clock's %v", got, time.Hour)
		}
		start := l.Now()
		fired := make(chan time.Duration, 1)
		if _, err := l.Schedule(5*time.Millisecond, func() { fired <- l.Now() }); err != nil {
			t.Fatal(err)
		}
		clk.Advance(5 * time.Millisecond)
		l.Execute(func() {})
		select {
		case at := <-fired:
			if at-start != 5*time.Millisecond {
				t.Fatalf("timer for 5ms fired at Now()+%v", at-start)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("timer did not fire")
		}
	})
}

func TestTimers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(2), loop.WithClock(clk))
		const n = 10000
		var (
			early, canceledRan, ran atomic.Int64
			wg                      sync.WaitGroup
			timers                  = make([]*sched.Timer, n)
			start                   = clk.Now()
		)
		for i := 0; i < n; i++ {
			d := time.Duration(rand.Int64N(int64(200 * time.Millisecond)))
			due := start + int64(d)
			canceled := i%10 == 0
			if !canceled {
				wg.Add(1)
			}
			tm, err := g.Schedule(d, func() {
				if clk.Now() < due {
					early.Add(1)
				}
				if canceled {
					canceledRan.Add(1)
					return
				}
				ran.Add(1)
				wg.Done()
			})
			if err != nil {
				t.Fatal(err)
			}
			timers[i] = tm
		}
		// The clock moves past every deadline, 250 µs before each Stop
		// with the loops woken, so the canceled timers are stopped while
		// the loops fire the due ones: some fire before their Stop.
		stopped := 0
		for i := 0; i < n; i += 10 {
			clk.Advance(250 * time.Microsecond)
			for _, l := range g.Loops() {
				l.Wake()
			}
			if timers[i].Stop() {
				stopped++
			}
		}
		wg.Wait()
		for _, l := range g.Loops() {
			turnPasses(t, l)
			runOn(t, l, func() {}) // behind every timer that was due
		}
		if early.Load() != 0 {
			t.Fatalf("%d timers ran early", early.Load())
		}
		if canceledRan.Load() != int64(n/10-stopped) {
			t.Fatalf("stopped %d of %d; %d canceled timers ran", stopped, n/10, canceledRan.Load())
		}
		t.Logf("%d timers, %d stopped before running (the others of the %d canceled had already fired)", n, stopped, n/10)
		for i := 0; i < n; i += 10 {
			if _, err, ok := timers[i].Future().Result(); !ok || (err != nil && !errors.Is(err, sched.ErrCanceled)) {
				t.Fatalf("canceled timer %d future: %v %v", i, err, ok)
			}
		}
	})
}

// TestFixedRateNoDrift: on a clock the test moves, a fixed-rate timer whose
// run takes 3 ms runs exactly at each of its slots, never before: its own
// time does not push the schedule (a fixed delay would slip 3 ms a run).
func TestFixedRateNoDrift(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk))
		l := g.Loop(0)
		const period, runs = 10 * time.Millisecond, 30
		ran := make(chan int64, runs)
		start := clk.Now()
		tm, err := l.ScheduleAtFixedRate(period, period, func() {
			ran <- clk.Now()
			clk.Advance(3 * time.Millisecond) // the task's own time must not push the schedule
		})
		if err != nil {
			t.Fatal(err)
		}
		defer tm.Stop()
		for k := 0; k < runs; k++ {
			slot := start + int64(k+1)*int64(period)
			clk.Set(slot - 1)
			turnPasses(t, l)
			select {
			case at := <-ran:
				t.Fatalf("run %d at %v, before its slot %v", k, time.Duration(at-start), time.Duration(slot-start))
			default:
			}
			clk.Set(slot)
			turnPasses(t, l)
			select {
			case at := <-ran:
				if at != slot {
					t.Fatalf("run %d at %v, want its slot %v", k, time.Duration(at-start), time.Duration(slot-start))
				}
			default:
				t.Fatalf("run %d did not come at its slot %v: the schedule drifted", k, time.Duration(slot-start))
			}
		}
	})
}

// TestFixedDelay: on a clock the test moves, a fixed-delay timer whose run
// takes 10 ms runs again exactly 20 ms after each run ends, never before.
func TestFixedDelay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk))
		l := g.Loop(0)
		ran := make(chan int64, 6)
		tm, err := l.ScheduleWithFixedDelay(0, 20*time.Millisecond, func() {
			ran <- clk.Now()
			clk.Advance(10 * time.Millisecond)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer tm.Stop()
		var at int64
		select {
		case at = <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the first run, due at once, did not come")
		}
		turnPasses(t, l) // the run has ended and its next deadline is set
		for i := 1; i < 6; i++ {
			next := at + int64(30*time.Millisecond) // 10 ms task + 20 ms delay
			clk.Set(next - 1)
			turnPasses(t, l)
			select {
			case <-ran:
				t.Fatalf("fixed-delay gap %d shorter than 30ms (10ms task + 20ms delay)", i)
			default:
			}
			clk.Set(next)
			turnPasses(t, l)
			select {
			case at = <-ran:
				if at != next {
					t.Fatalf("fixed-delay run %d at %v, want %v", i, at, next)
				}
			default:
				t.Fatalf("fixed-delay run %d did not come 30ms after the previous one started", i)
			}
		}
	})
}

func TestEqualDeadlineTimersInOrder(t *testing.T) {
	clk := sched.NewManualClock(int64(time.Hour))
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk))
		l := g.Loop(0)
		var got []int
		done := make(chan struct{})
		for i := 0; i < 100; i++ {
			if _, err := l.Schedule(5*time.Millisecond, func() {
				got = append(got, i)
				if i == 99 {
					close(done)
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		runOn(t, l, func() {}) // every timer is in the wheel now
		clk.Advance(5 * time.Millisecond)
		l.Execute(func() {}) // a turn to advance the wheel
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("timers did not fire; got %d", len(got))
		}
		for i, v := range got {
			if v != i {
				t.Fatalf("equal-deadline timers fired in order %v", got)
			}
		}
	})
}

func TestTimerFromOutsideWakesPromptly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {})
		waitFor(t, time.Second, "the loop to wait", l.Waiting)
		// A timer 10 s out does not write the eventfd.
		w0 := l.Stats().WakeWrites
		far, err := l.Schedule(10*time.Second, func() { t.Error("10 s timer ran") })
		if err != nil {
			t.Fatal(err)
		}
		// Schedule writes the eventfd, if at all, before it returns.
		if w := l.Stats().WakeWrites - w0; w != 0 {
			t.Fatalf("a timer 10 s out made %d eventfd writes", w)
		}
		far.Stop()
		// A 5 ms timer on a loop waiting up to 1 s fires in about 5 ms.
		for i := 0; i < 5; i++ {
			waitFor(t, time.Second, "the loop to wait", l.Waiting)
			fired := make(chan time.Time, 1)
			start := time.Now()
			if _, err := l.Schedule(5*time.Millisecond, func() { fired <- time.Now() }); err != nil {
				t.Fatal(err)
			}
			at := <-fired
			if d := at.Sub(start); d < 5*time.Millisecond || d > 100*time.Millisecond {
				t.Fatalf("5 ms timer fired after %v", d)
			}
		}
	})
}

func TestPanickingTaskRecovered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(1), loop.WithClock(clk))
		l := g.Loop(0)
		l.Execute(func() { panic("boom") })
		runOn(t, l, func() {})
		if s := l.Stats(); s.Panics != 1 || l.State() != loop.StateStarted {
			t.Fatalf("after a panicking task: panics %d state %v", s.Panics, l.State())
		}
		// A periodic task that panics stops and fails its handle.
		var runs atomic.Int64
		tm, err := l.ScheduleAtFixedRate(0, time.Millisecond, func() {
			if runs.Add(1) == 3 {
				panic(errors.New("periodic boom"))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for runs.Load() < 3 {
			advance(t, clk, l, time.Millisecond)
		}
		<-tm.Future().Done()
		_, ferr, _ := tm.Future().Result()
		var pe *sched.PanicError
		if !errors.As(ferr, &pe) {
			t.Fatalf("periodic future: %v, want a PanicError", ferr)
		}
		for range 5 { // five more periods
			advance(t, clk, l, time.Millisecond)
		}
		if runs.Load() != 3 {
			t.Fatalf("periodic task ran %d times after panicking on run 3", runs.Load())
		}
		if l.Stats().Panics != 2 || l.State() != loop.StateStarted {
			t.Fatalf("panics %d state %v", l.Stats().Panics, l.State())
		}
	})
}

// TestMaxPendingTasks: with WithMaxPendingTasks(n) and the loop held by an
// ordinary task, n more tasks are accepted and the (n+1)-th outside Execute
// is rejected (the running task holds no slot); due timers that do not fit
// in the full queue wait in the wheel and each runs exactly once later.
func TestMaxPendingTasks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		const n = 64
		const timers = 3 * n
		clk := sched.NewManualClock(int64(time.Hour))
		g := newGroup(t, b, loop.WithLoops(1), loop.WithMaxPendingTasks(n), loop.WithClock(clk))
		l := g.Loop(0)
		// retry submits f until the bounded queue takes it.
		retry := func(f func() error) {
			t.Helper()
			for {
				err := f()
				if err == nil {
					return
				}
				if !errors.Is(err, loop.ErrQueueFull) {
					t.Fatal(err)
				}
				waitFor(t, 10*time.Second, "room in the task queue", func() bool { return l.Stats().PendingTasks < n })
			}
		}
		// 3n timers go to the wheel (through the task queue, so some may
		// have to wait for room) before the loop is held. Timers due after
		// the loop's wait do not wake it, so the queue fills up with them;
		// the refused Schedule wakes the loop, which makes room at once
		// (else the setup would last until the first timer is due).
		// They fall due only when the test moves the clock, after the
		// queue below is full.
		const delay = 150 * time.Millisecond
		var fired [timers]atomic.Int32
		for i := range timers {
			retry(func() error {
				_, err := l.Schedule(delay, func() { fired[i].Add(1) })
				return err
			})
		}
		inWheel := make(chan struct{})
		retry(func() error { return l.Execute(func() { close(inWheel) }) })
		<-inWheel

		release := make(chan struct{})
		var releaseOnce sync.Once
		unblock := func() { releaseOnce.Do(func() { close(release) }) }
		defer unblock() // also when the test fails while the loop is held
		blocked := make(chan struct{})
		if err := l.Execute(func() { close(blocked); <-release }); err != nil {
			t.Fatal(err)
		}
		<-blocked
		var order []int
		for i := range n {
			if err := l.Execute(func() { order = append(order, i) }); err != nil {
				t.Fatalf("Execute %d of %d while a task runs: %v", i+1, n, err)
			}
		}
		if err := l.Execute(func() {}); !errors.Is(err, loop.ErrRejected) || !errors.Is(err, loop.ErrQueueFull) {
			t.Fatalf("Execute %d: %v, want ErrRejected and ErrQueueFull", n+1, err)
		}
		if _, err := l.Schedule(0, func() {}); !errors.Is(err, loop.ErrRejected) || !errors.Is(err, loop.ErrQueueFull) {
			t.Fatalf("Schedule on a full queue: %v", err)
		}
		if s := l.Stats(); s.PendingTasks != n || s.Rejected < 2 {
			t.Fatalf("pending %d, rejected %d", s.PendingTasks, s.Rejected)
		}
		for i := range fired {
			if c := fired[i].Load(); c != 0 {
				t.Fatalf("timer %d ran before it was due", i)
			}
		}
		// Let the timers fall due while the queue is full, then release: the
		// queued tasks run, then the due timers move into the queue, n at a
		// time, the rest waiting in the wheel.
		clk.Advance(delay + 20*time.Millisecond)
		unblock()

		allFired := func() bool {
			for i := range fired {
				if fired[i].Load() == 0 {
					return false
				}
			}
			return true
		}
		waitFor(t, 5*time.Second, "the timers", allFired)
		var got []int
		turnPasses(t, l)
		runOn(t, l, func() { got = append(got, order...) }) // behind any timer queued again
		for i := range fired {
			if c := fired[i].Load(); c != 1 {
				t.Fatalf("timer %d ran %d times", i, c)
			}
		}
		if len(got) != n {
			t.Fatalf("%d of %d queued tasks ran", len(got), n)
		}
		for i, v := range got {
			if v != i {
				t.Fatalf("tasks ran in order %v", got)
			}
		}
	})
}

func TestTailTasks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		var order []string
		tailRan := make(chan struct{})
		runOn(t, l, func() {
			l.ExecuteAfterTurn(func() { order = append(order, "tail"); close(tailRan) })
			l.Execute(func() { order = append(order, "task") })
			order = append(order, "first")
		})
		// Wait for the tail task itself: a task queued from here may still
		// run in the same turn, before the tail tasks.
		<-tailRan
		if strings.Join(order, ",") != "first,task,tail" {
			t.Fatalf("order %v", order)
		}
		// A tail task runs even on a turn with no task, and does not block.
		done := make(chan struct{})
		start := time.Now()
		if err := l.ExecuteAfterTurn(func() { close(done) }); err != nil {
			t.Fatal(err)
		}
		<-done
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Fatalf("tail task took %v", d)
		}
	})
}

func TestShutdownHooks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1))
		if err != nil {
			t.Fatal(err)
		}
		l := g.Loop(0)
		runOn(t, l, func() {})
		var order []string
		l.AddShutdownHook(func() {
			order = append(order, "a")
			l.AddShutdownHook(func() { order = append(order, "c") })
		})
		l.AddShutdownHook(func() { panic("hook boom") })
		remove, _ := l.AddShutdownHook(func() { order = append(order, "removed") })
		l.AddShutdownHook(func() { order = append(order, "b") })
		remove()
		shutdown(t, g)
		if strings.Join(order, ",") != "a,b,c" {
			t.Fatalf("hooks ran as %v, want a,b,c", order)
		}
	})
}
