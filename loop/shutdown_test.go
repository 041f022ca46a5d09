package loop_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

func TestShutdownGraceful(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(quietLogger))
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
		start := time.Now()
		if err := g.ShutdownGracefully(200*time.Millisecond, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		close(release)
		// A task 100 ms into the quiet period runs and extends it.
		time.Sleep(100 * time.Millisecond)
		var late atomic.Bool
		if err := l.Execute(func() { late.Store(true) }); err != nil {
			t.Fatalf("Execute while shutting down: %v", err)
		}
		if _, err := l.Schedule(time.Millisecond, func() {}); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("Schedule while shutting down: %v", err)
		}
		<-g.Done()
		took := time.Since(start)
		if before.Load() != 1000 || !late.Load() {
			t.Fatalf("tasks before shutdown ran %d/1000, late task ran %v", before.Load(), late.Load())
		}
		if took < 300*time.Millisecond || took > 2*time.Second {
			t.Fatalf("shutdown took %v, want about 300 ms (quiet period restarted at 100 ms)", took)
		}
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
		t.Logf("graceful shutdown took %v", took)
	})
}

func TestShutdownTimeoutBoundsBusyLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(quietLogger))
		if err != nil {
			t.Fatal(err)
		}
		l := g.Loop(0)
		stop := make(chan struct{})
		go func() { // a task every 10 ms: the loop never goes quiet
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
					if l.Execute(func() {}) != nil {
						return
					}
				}
			}
		}()
		defer close(stop)
		runOn(t, l, func() {})
		start := time.Now()
		g.ShutdownGracefully(300*time.Millisecond, 600*time.Millisecond)
		select {
		case <-g.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("shutdown timeout did not bound a loop that never goes quiet")
		}
		if took := time.Since(start); took < 550*time.Millisecond || took > 1500*time.Millisecond {
			t.Fatalf("shutdown took %v, want about the 600 ms timeout", took)
		}
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

// TestShutdownDelayTermination: a loop shutting down with a quiet period
// of 0 does not terminate while a DelayTermination hold is out; it does
// once the hold is released, and without the release once the hold's limit
// or the shutdown's timeout passes, whichever is first.
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
			g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(quietLogger))
			if err != nil {
				t.Fatal(err)
			}
			l := g.Loop(0)
			var release func()
			start := time.Now() // before the hold: its limit counts from it
			runOn(t, l, func() { release = l.DelayTermination(c.limit) })
			if err := g.ShutdownGracefully(0, c.timeout); err != nil {
				t.Fatal(err)
			}
			select {
			case <-g.Done():
				t.Fatalf("%s: terminated after %v with a hold out", c.name, time.Since(start))
			case <-time.After(200 * time.Millisecond):
			}
			if c.release {
				// Tasks still run while shutting down: release on the loop.
				if err := l.Execute(func() { release(); release() }); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-g.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: not terminated %v after the shutdown", c.name, time.Since(start))
			}
			// The loop's clock may read up to a tick (1 ms) behind.
			if bound := min(c.limit, c.timeout) - 5*time.Millisecond; !c.release && time.Since(start) < bound {
				t.Fatalf("%s: terminated after %v, before the hold's %v bound", c.name, time.Since(start), bound)
			}
		}
	})
}

// TestShutdownReleasedHoldGone: a released DelayTermination hold no longer
// counts. With a 10 s hold released at once and a 100 ms one never
// released, a shutdown with a quiet period of 0 ends when the 100 ms one
// expires, not at the 10 s shutdown timeout.
func TestShutdownReleasedHoldGone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(quietLogger))
		if err != nil {
			t.Fatal(err)
		}
		l := g.Loop(0)
		start := time.Now()
		runOn(t, l, func() {
			release := l.DelayTermination(10 * time.Second)
			release()
			l.DelayTermination(100 * time.Millisecond)
		})
		if err := g.ShutdownGracefully(0, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("not terminated after the shutdown's timeout")
		}
		took := time.Since(start)
		if took >= 5*time.Second {
			t.Fatalf("terminated after %v: the released 10 s hold still counted", took)
		}
		// The loop's clock may read up to a tick (1 ms) behind.
		if took < 95*time.Millisecond {
			t.Fatalf("terminated after %v, before the 100 ms hold expired", took)
		}
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
