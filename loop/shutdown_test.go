package loop_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// TestShutdownGraceful: on a clock the test moves, tasks accepted before a
// graceful shutdown run, a task 100 ms into the 200 ms quiet period runs
// and restarts it, timers are refused and canceled, and the loops
// terminate once 200 ms pass without a task: not at 300 ms, at 300 ms and
// a nanosecond.
func TestShutdownGraceful(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		clk := sched.NewManualClock(int64(time.Hour))
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(quietLogger), loop.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		l := g.Loop(0)
		// Tasks accepted before the shutdown run.
		var before atomic.Int64
		release := make(chan struct{})
		l.Execute(func() { <-release })
		for i := 0; i < 1000; i++ {
			l.Execute(func() { before.Add(1) })
		}
		tm, err := l.Schedule(time.Hour, func() { t.Error("hour timer ran") })
		if err != nil {
			t.Fatal(err)
		}
		start := clk.Now()
		if err := g.ShutdownGracefully(200*time.Millisecond, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		close(release)
		waitFor(t, 10*time.Second, "the tasks queued before the shutdown", func() bool { return before.Load() == 1000 })
		// A task 100 ms into the quiet period runs and restarts it.
		clk.Advance(100 * time.Millisecond)
		late := make(chan struct{})
		if err := l.Execute(func() { close(late) }); err != nil {
			t.Fatalf("Execute while shutting down: %v", err)
		}
		if _, err := l.Schedule(time.Millisecond, func() {}); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("Schedule while shutting down: %v", err)
		}
		select {
		case <-late:
		case <-time.After(10 * time.Second):
			t.Fatal("a task queued while shutting down did not run")
		}
		turnPasses(t, l) // the late task's turn has ended, noting when
		// 200 ms after it, the quiet period has not passed yet.
		terminatesAt(t, g, l, clk, start+int64(300*time.Millisecond)+1,
			"the group terminated 200 ms after the late task: its quiet period was not restarted",
			"the group did not terminate once the quiet period passed")
		if _, ferr, ok := tm.Future().Result(); !ok || !errors.Is(ferr, sched.ErrCanceled) {
			t.Fatalf("pending timer: %v %v, want canceled", ferr, ok)
		}
		if err := l.Execute(func() {}); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("Execute after shutdown: %v", err)
		}
		for _, l := range g.Loops() {
			if l.State() != loop.StateTerminated {
				t.Fatalf("%v: %v", l, l.State())
			}
		}
	})
}

// TestShutdownTimeoutBoundsBusyLoop: on a clock the test moves, a loop
// that runs a task every 100 ms never goes quiet for its 300 ms quiet
// period, and terminates at the 600 ms shutdown timeout, not before.
func TestShutdownTimeoutBoundsBusyLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		clk := sched.NewManualClock(int64(time.Hour))
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(quietLogger), loop.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		l := g.Loop(0)
		runOn(t, l, func() {})
		start := clk.Now()
		g.ShutdownGracefully(300*time.Millisecond, 600*time.Millisecond)
		for clk.Now()-start < int64(500*time.Millisecond) {
			clk.Advance(100 * time.Millisecond)
			runOn(t, l, func() {}) // the loop never goes quiet
		}
		terminatesAt(t, g, l, clk, start+int64(600*time.Millisecond),
			"the busy loop terminated before the shutdown timeout",
			"shutdown timeout did not bound a loop that never goes quiet")
	})
}

func TestShutdownQuietZeroAndOps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g, l, res := recvInFlight(t, b, func(*loop.Loop, loop.OpID) {})
		start := time.Now()
		if err := g.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("quiet-0 shutdown took %v", d)
		}
		select {
		case r := <-res:
			if r >= 0 {
				t.Fatalf("in-flight recv completed with %d at shutdown, want -errno", r)
			}
		default:
			t.Fatal("in-flight recv was not completed at shutdown")
		}
		if s := l.Stats(); s.OpsInFlight != 0 || s.Orphaned != 0 {
			t.Fatalf("ops in flight %d orphaned %d after termination", s.OpsInFlight, s.Orphaned)
		}
	})
}

func TestShutdownFromLoopReturnsError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(quietLogger))
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		g.Loop(1).Execute(func() { errc <- g.Shutdown(context.Background()) })
		select {
		case err := <-errc:
			if !errors.Is(err, loop.ErrInLoop) {
				t.Fatalf("Shutdown from a loop: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Shutdown from a loop deadlocked")
		}
		select {
		case <-g.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("group did not terminate")
		}
	})
}

// TestShutdownDelayTermination: on a clock the test moves, a loop
// shutting down with a quiet period of 0 does not terminate while a
// DelayTermination hold is out; it does once the hold is released, and
// without the release once the hold's limit or the shutdown's timeout
// passes, whichever is first (not a nanosecond before).
func TestShutdownDelayTermination(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		for _, c := range []struct {
			name           string
			limit, timeout time.Duration
			release        bool
		}{
			{"released", time.Minute, 10 * time.Second, true},
			{"timeout", time.Minute, 400 * time.Millisecond, false},
			{"limit", 400 * time.Millisecond, 10 * time.Second, false},
			// A limit too long to add to the clock holds as long as
			// any: it does not wrap to an instant already past.
			{"huge limit released", math.MaxInt64, 10 * time.Second, true},
			{"huge limit timeout", math.MaxInt64, 400 * time.Millisecond, false},
		} {
			clk := sched.NewManualClock(int64(time.Hour))
			g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(quietLogger), loop.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			l := g.Loop(0)
			var release func()
			start := clk.Now() // the hold's limit and the shutdown's timeout count from it
			runOn(t, l, func() { release = l.DelayTermination(c.limit) })
			if err := g.ShutdownGracefully(0, c.timeout); err != nil {
				t.Fatal(err)
			}
			turnPasses(t, l)
			select {
			case <-g.Done():
				t.Fatalf("%s: terminated with a hold out", c.name)
			default:
			}
			if c.release {
				// Tasks still run while shutting down: release on the loop.
				if err := l.Execute(func() { release(); release() }); err != nil {
					t.Fatal(err)
				}
			} else {
				bound := min(c.limit, c.timeout)
				clk.Set(start + int64(bound) - 1)
				turnPasses(t, l)
				select {
				case <-g.Done():
					t.Fatalf("%s: terminated before the hold's %v bound", c.name, bound)
				default:
				}
				clk.Advance(1)
				l.Wake()
			}
			select {
			case <-g.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: not terminated after the shutdown", c.name)
			}
		}
	})
}

// TestShutdownReleasedHoldGone: a released DelayTermination hold no longer
// counts. On a clock the test moves, with a 10 s hold released at once and
// a 100 ms one never released, a shutdown with a quiet period of 0 ends
// when the 100 ms one expires, not at the 10 s shutdown timeout.
func TestShutdownReleasedHoldGone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		clk := sched.NewManualClock(int64(time.Hour))
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(quietLogger), loop.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		l := g.Loop(0)
		start := clk.Now()
		runOn(t, l, func() {
			release := l.DelayTermination(10 * time.Second)
			release()
			l.DelayTermination(100 * time.Millisecond)
		})
		if err := g.ShutdownGracefully(0, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		terminatesAt(t, g, l, clk, start+int64(100*time.Millisecond),
			"terminated before the 100 ms hold expired",
			"not terminated once the 100 ms hold expired: the released 10 s hold still counted")
	})
}

// TestShutdownDrainRecancels: a terminating loop cancels every live op,
// also those already being canceled, so an op whose cancel was lost ends
// at once with -ECANCELED instead of keeping the drain waiting until its
// deadline (DefaultDrainTimeout) and being orphaned.
func TestShutdownDrainRecancels(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g, l, res := recvInFlight(t, b, (*loop.Loop).LoseCancel)
		start := time.Now()
		if err := g.ShutdownGracefully(0, time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.Done():
		case <-time.After(2 * loop.DefaultDrainTimeout):
			t.Fatal("not terminated after the drain's deadline")
		}
		if d := time.Since(start); d > loop.DefaultDrainTimeout/2 {
			t.Errorf("termination took %v: the drain waited for a cancel that was never sent", d)
		}
		select {
		case r := <-res:
			if r != -int32(unix.ECANCELED) {
				t.Errorf("receive ended with %d, want -ECANCELED", r)
			}
		default:
			t.Error("the receive got no final completion")
		}
		if s := l.Stats(); s.OpsInFlight != 0 || s.Orphaned != 0 {
			t.Errorf("ops in flight %d orphaned %d after termination", s.OpsInFlight, s.Orphaned)
		}
	})
}

// recvInFlight makes a one-loop group with a receive armed on an idle
// socket pair, calls then on the loop with the receive's id, and returns
// the channel its final result arrives on.
func recvInFlight(t *testing.T, b loop.Backend, then func(*loop.Loop, loop.OpID)) (*loop.Group, *loop.Loop, chan int32) {
	t.Helper()
	g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(quietLogger))
	if err != nil {
		t.Fatal(err)
	}
	l := g.Loop(0)
	a, _ := testutil.SocketPair(t)
	res := make(chan int32, 1)
	buf := make([]byte, 8)
	runOn(t, l, func() {
		id, err := l.IO().Recv(a, buf, 0, completerFunc(func(c *loop.Completion) { res <- c.Res }))
		if err != nil {
			t.Error(err)
			return
		}
		then(l, id)
	})
	return g, l, res
}

// terminatesAt checks, on a clock the test moves, that g is still running
// with the clock a nanosecond before at (after a whole turn of its loop l,
// the one that holds the termination back), and terminates once the clock
// reaches at.
func terminatesAt(t *testing.T, g *loop.Group, l *loop.Loop, clk *sched.ManualClock, at int64, before, after string) {
	t.Helper()
	clk.Set(at - 1)
	turnPasses(t, l)
	select {
	case <-g.Done():
		t.Fatal(before)
	default:
	}
	clk.Advance(1)
	for _, l := range g.Loops() {
		l.Wake()
	}
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal(after)
	}
}

// TestShutdownBegunAsLoopGoesToWait: a shutdown that begins after the loop
// chose to wait (on an idle loop, for up to sched.IdleWait) but before it
// published the wait's deadline finds no wait to end; the loop sees the
// new state before it blocks and terminates at once instead of sleeping
// out the idle wait.
func TestShutdownBegunAsLoopGoesToWait(t *testing.T) {
	var target atomic.Pointer[loop.Group]
	begun := make(chan time.Time, 1)
	restore := loop.BeforeWait(func() {
		// On the loop goroutine: the shutdown's wake finds the loop awake,
		// as another goroutine's would in this instant.
		if g := target.Swap(nil); g != nil {
			begun <- time.Now()
			if err := g.ShutdownGracefully(0, 5*time.Second); err != nil {
				panic(err)
			}
		}
	})
	defer restore()
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {})
		target.Store(g)
		if err := l.Execute(func() {}); err != nil { // the turn after it waits
			t.Fatal(err)
		}
		at := <-begun
		select {
		case <-g.Done():
		case <-time.After(sched.IdleWait * 7 / 10):
			t.Fatalf("the loop slept through a shutdown begun as it went to wait (still running %v later)", time.Since(at).Round(time.Millisecond))
		}
	})
}

// goexitOnCancel is a Completer that calls runtime.Goexit (as t.FailNow in
// a callback does) when its op completes canceled, as every op does when
// its loop terminates.
type goexitOnCancel struct{ seen chan struct{} }

func (g goexitOnCancel) Complete(c *loop.Completion) {
	if c.Res == -int32(unix.ECANCELED) {
		close(g.seen)
		runtime.Goexit()
	}
}

// TestShutdownSurvivesGoexitWhileTerminating: a callback that calls
// runtime.Goexit while its loop terminates (after a clean shutdown, or
// after a task's Goexit already ended the loop) skips the rest of what was
// left to run, but the loop still terminates: Done closes and its ring,
// eventfd and thread are released.
func TestShutdownSurvivesGoexitWhileTerminating(t *testing.T) {
	for _, how := range []string{"shutdown", "task-goexit"} {
		t.Run(how, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b loop.Backend) {
				testutil.CheckLeaks(t)
				g := newGroup(t, b, loop.WithLoops(1), loop.WithLogger(slog.New(slog.DiscardHandler)))
				l := g.Loop(0)
				a, _ := testutil.SocketPair(t)
				seen := make(chan struct{})
				runOn(t, l, func() {
					if _, err := l.IO().Recv(a, make([]byte, 16), 0, goexitOnCancel{seen}); err != nil {
						t.Error(err)
					}
				})
				if how == "shutdown" {
					if err := g.ShutdownGracefully(0, time.Second); err != nil {
						t.Fatal(err)
					}
				} else if err := l.Execute(func() { runtime.Goexit() }); err != nil {
					t.Fatal(err)
				}
				<-seen
				select {
				case <-g.Done():
				case <-time.After(5 * time.Second):
					t.Fatalf("the loop never terminated (state %v)", l.State())
				}
				if p := l.Stats().Panics; p == 0 {
					t.Errorf("Stats.Panics = 0 after a Goexit while terminating")
				}
			})
		})
	}
}

// TestShutdownHoldDoesNotSpin: a loop held past its quiet period by
// DelayTermination waits for the hold, the timeout or work, in waits of up
// to 100 ms, rather than turning every tick; it terminates when the hold
// is released.
func TestShutdownHoldDoesNotSpin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		var release func()
		runOn(t, l, func() { release = l.DelayTermination(time.Minute) })
		if err := g.ShutdownGracefully(0, time.Minute); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "the loop to shut down", func() bool { return l.State() == loop.StateShuttingDown })
		before := l.Stats().Turns
		time.Sleep(500 * time.Millisecond)
		// Polling at the shutdown interval: about 5 turns; every tick: 500.
		if n := l.Stats().Turns - before; n > 50 {
			t.Errorf("%d turns in 500 ms while held and idle", n)
		}
		if err := l.Execute(func() { release() }); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the loop did not terminate after its hold was released")
		}
	})
}
