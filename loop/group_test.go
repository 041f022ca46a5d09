package loop_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

func TestNextRoundRobin(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("loops=%d", n), func(t *testing.T) {
			g := newGroup(t, loop.BackendEpoll, loop.WithLoops(n))
			if g.Len() != n {
				t.Fatalf("Len = %d, want %d", g.Len(), n)
			}
			if want := n&(n-1) == 0; g.ChooserUsesMask() != want {
				t.Fatalf("mask chooser = %v, want %v", g.ChooserUsesMask(), want)
			}
			for i := 0; i < 3*n+1; i++ {
				if got := g.Next().Index(); got != i%n {
					t.Fatalf("Next #%d = loop %d, want %d", i, got, i%n)
				}
			}
		})
	}
	t.Run("mask-wraparound", func(t *testing.T) {
		g := newGroup(t, loop.BackendEpoll, loop.WithLoops(4))
		g.SetChooserCounter(math.MaxUint64 - 5)
		want := []int{2, 3, 0, 1, 2, 3, 0, 1, 2, 3}
		for i, w := range want {
			if got := g.Next().Index(); got != w {
				t.Fatalf("Next #%d across the wrap = %d, want %d", i, got, w)
			}
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		g := newGroup(t, loop.BackendEpoll, loop.WithLoops(3))
		var mu sync.Mutex
		counts := make([]int, 3)
		var wg sync.WaitGroup
		for p := 0; p < 4; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]int, 3)
				for i := 0; i < 3000; i++ {
					local[g.Next().Index()]++
				}
				mu.Lock()
				for i := range local {
					counts[i] += local[i]
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		for i, c := range counts {
			if c != 4000 {
				t.Fatalf("loop %d chosen %d times, want 4000 (counts %v)", i, c, counts)
			}
		}
	})
}

func TestDefaultLoopCount(t *testing.T) {
	g := newGroup(t, loop.BackendEpoll)
	if g.Len() != runtime.GOMAXPROCS(0) {
		t.Fatalf("default Len = %d, want GOMAXPROCS = %d", g.Len(), runtime.GOMAXPROCS(0))
	}
}

func TestNoGoroutineUntilFirstUse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		before := runtime.NumGoroutine()
		g := newGroup(t, b, loop.WithLoops(4))
		if n := runtime.NumGoroutine(); n > before {
			t.Fatalf("NewGroup started %d goroutines", n-before)
		}
		for _, l := range g.Loops() {
			if l.State() != loop.StateNotStarted || l.Tid() != 0 {
				t.Fatalf("%v: state %v tid %d before first use", l, l.State(), l.Tid())
			}
		}
		runOn(t, g.Loop(1), func() {})
		if g.Loop(1).State() != loop.StateStarted || g.Loop(0).State() != loop.StateNotStarted {
			t.Fatalf("after Execute on loop 1: states %v, %v", g.Loop(0).State(), g.Loop(1).State())
		}
		// The loop's goroutine, and the group's blocked-loop watchdog,
		// which starts with the first loop.
		if n := runtime.NumGoroutine(); n > before+2 {
			t.Fatalf("one Execute started %d goroutines, want 2", n-before)
		}
	})
}

func TestConcurrentFirstExecuteStartsOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		before := runtime.NumGoroutine()
		var wg sync.WaitGroup
		var ran sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 100; i++ {
			wg.Add(1)
			ran.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := l.Execute(ran.Done); err != nil {
					t.Errorf("Execute: %v", err)
					ran.Done()
				}
			}()
		}
		close(start)
		wg.Wait()
		ran.Wait()
		if n := runtime.NumGoroutine(); n > before+2 { // the loop and the group's watchdog
			t.Fatalf("100 racing first Executes left %d goroutines, want 2", n-before)
		}
	})
}

func TestThreadNameMatchesString(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(2))
		for _, l := range g.Loops() {
			var tid, recorded int
			runOn(t, l, func() { tid, recorded = unix.Gettid(), l.Tid() })
			if g.Loop(0).Features().SharedThread {
				// No thread of its own to name: only InLoop applies.
				var in bool
				runOn(t, l, func() { in = l.InLoop() && tid == recorded })
				if !in || l.InLoop() {
					t.Fatalf("InLoop on the loop %v (thread %d, recorded %d), on the test goroutine %v", in, tid, recorded, l.InLoop())
				}
				continue
			}
			if tid != l.Tid() {
				t.Fatalf("tid %d, loop records %d", tid, l.Tid())
			}
			comm, err := readComm(tid)
			if err != nil {
				t.Fatal(err)
			}
			want := l.String()
			if tid == os.Getpid() {
				// A loop that started on the main thread leaves it the
				// process's name (ps and pidof read it).
				want, _ = readComm(os.Getpid())
			}
			if len(want) > 15 {
				want = want[:15]
			}
			if comm != want {
				t.Fatalf("thread name %q, want %q (String %q)", comm, want, l.String())
			}
			if l.InLoop() {
				t.Fatal("InLoop true on the test goroutine")
			}
			var in bool
			runOn(t, l, func() { in = l.InLoop() })
			if !in {
				t.Fatal("InLoop false on the loop")
			}
		}
	})
}

func TestOptionsValidation(t *testing.T) {
	bad := map[string]loop.Option{
		"loops<0":        loop.WithLoops(-1),
		"ioRatio=0":      loop.WithIORatio(0),
		"ioRatio=101":    loop.WithIORatio(101),
		"ringEntries":    loop.WithRingEntries(ring.MaxEntries + 1),
		"maxPending<0":   loop.WithMaxPendingTasks(-1),
		"stall<0":        loop.WithStallThreshold(-1),
		"tick<0":         loop.WithTick(-time.Millisecond),
		"tick>1s":        loop.WithTick(2 * time.Second),
		"backend":        loop.WithBackend(loop.Backend(42)),
		"name":           loop.WithName("a b"),
		"name/":          loop.WithName("a/b"),
		"bufCount":       loop.WithBufferRing(3, 4096),
		"bufSize":        loop.WithBufferRing(16, 2<<20),
		"dgramBufCount":  loop.WithDatagramBuffers(3, 4096),
		"dgramBufSize":   loop.WithDatagramBuffers(16, 2<<20),
		"dgramBufTotal":  loop.WithDatagramBuffers(1024, 1<<20),
		"drainTimeout<0": loop.WithDrainTimeout(-1),
		"nil option":     nil,
	}
	for name, o := range bad {
		t.Run(name, func(t *testing.T) {
			g, err := loop.NewGroup(loop.WithBackend(loop.BackendEpoll), o)
			if err == nil {
				shutdown(t, g)
				t.Fatal("NewGroup accepted an invalid option")
			}
			if !errors.Is(err, loop.ErrInvalidOption) {
				t.Fatalf("error %v does not wrap ErrInvalidOption", err)
			}
			if g != nil {
				t.Fatal("non-nil group with an error")
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		if err := l.Execute(nil); !errors.Is(err, loop.ErrNilTask) {
			t.Fatalf("Execute(nil) = %v", err)
		}
		if err := l.ExecuteAfterTurn(nil); !errors.Is(err, loop.ErrNilTask) {
			t.Fatalf("ExecuteAfterTurn(nil) = %v", err)
		}
		if _, err := l.Schedule(time.Millisecond, nil); !errors.Is(err, loop.ErrNilTask) {
			t.Fatalf("Schedule(nil) = %v", err)
		}
		if _, err := l.ScheduleAtFixedRate(0, 0, func() {}); !errors.Is(err, loop.ErrInvalidArgument) {
			t.Fatalf("ScheduleAtFixedRate(period 0) = %v", err)
		}
		if _, err := l.ScheduleWithFixedDelay(0, -1, func() {}); !errors.Is(err, loop.ErrInvalidArgument) {
			t.Fatalf("ScheduleWithFixedDelay(delay -1) = %v", err)
		}
		if _, err := l.AddShutdownHook(nil); !errors.Is(err, loop.ErrNilTask) {
			t.Fatalf("AddShutdownHook(nil) = %v", err)
		}
		for _, r := range []int{-1, 101} {
			if _, err := loop.NewGroup(loop.WithLoops(1), loop.WithIORatio(r)); !errors.Is(err, loop.ErrInvalidOption) {
				t.Fatalf("WithIORatio(%d) = %v", r, err)
			}
		}
		if err := g.ShutdownGracefully(-1, time.Second); !errors.Is(err, loop.ErrInvalidOption) {
			t.Fatalf("ShutdownGracefully(-1, 1s) = %v", err)
		}
		if err := g.ShutdownGracefully(2*time.Second, time.Second); !errors.Is(err, loop.ErrInvalidOption) {
			t.Fatalf("ShutdownGracefully(2s, 1s) = %v", err)
		}
		// Op API misuse, on the loop.
		runOn(t, l, func() {
			nop := completerFunc(func(*loop.Completion) {})
			checks := []struct {
				name string
				err  error
				want error
			}{
				{"nil completer", second(l.Nop(nil)), loop.ErrNilCompleter},
				{"negative fd", second(l.IO().Recv(-1, make([]byte, 1), 0, nop)), loop.ErrInvalidArgument},
				{"empty recv", second(l.IO().Recv(0, nil, 0, nop)), loop.ErrInvalidArgument},
				{"empty send", second(l.IO().Send(0, nil, 0, nop)), loop.ErrInvalidArgument},
				{"no sendmsg bufs", second(l.IO().Sendmsg(0, nil, 0, nop)), loop.ErrInvalidArgument},
				{"nil sockaddr", second(l.IO().Connect(0, nil, nop)), loop.ErrInvalidArgument},
				{"bad port", second(l.IO().Connect(0, &unix.SockaddrInet4{Port: 70000}, nop)), loop.ErrInvalidArgument},
				{"bad shutdown how", second(l.IO().Shutdown(0, 7, nop)), loop.ErrInvalidArgument},
				{"unknown op", l.IO().Cancel(loop.OpID(12345)), loop.ErrUnknownOp},
			}
			for _, c := range checks {
				if !errors.Is(c.err, c.want) {
					t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
				}
			}
		})
		shutdown(t, g)
		if err := l.Execute(func() {}); !errors.Is(err, loop.ErrRejected) || !errors.Is(err, loop.ErrShutdown) {
			t.Fatalf("Execute after shutdown = %v", err)
		}
		if _, err := l.Schedule(time.Millisecond, func() {}); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("Schedule after shutdown = %v", err)
		}
		if _, err := l.AddShutdownHook(func() {}); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("AddShutdownHook after shutdown = %v", err)
		}
		if err := testknobs.RebuildRing(l); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("RebuildRing after shutdown = %v", err)
		}
		if err := g.Execute(func() {}); !errors.Is(err, loop.ErrRejected) {
			t.Fatalf("Group.Execute after shutdown = %v", err)
		}
	})
}

func second[T any](_ T, err error) error { return err }

func TestFallback(t *testing.T) {
	cause := fmt.Errorf("io_uring_setup: %w", &ring.UnsupportedError{Op: "io_uring_setup", MinKernel: "5.1"})
	for _, errno := range []error{cause, unix.ENOSYS, unix.EPERM, unix.ENOMEM} {
		t.Run(errno.Error(), func(t *testing.T) {
			restore := loop.MakeUringUnavailable(errno)
			defer restore()
			g := newGroup(t, loop.BackendAuto, loop.WithLoops(2))
			if g.Backend() != loop.BackendEpoll {
				t.Fatalf("auto chose %v with io_uring unavailable", g.Backend())
			}
			f := g.Features()
			if f.Backend != loop.BackendEpoll || f.FallbackReason == "" || f.FallbackReason != errno.Error() {
				t.Fatalf("features %+v: want epoll with reason %q", f, errno)
			}
			for _, l := range g.Loops() {
				if l.Features().FallbackReason != errno.Error() {
					t.Fatalf("%v: reason %q", l, l.Features().FallbackReason)
				}
			}
			runOn(t, g.Next(), func() {}) // it serves
			_, err := loop.NewGroup(loop.WithBackend(loop.BackendUring), loop.WithLoops(1))
			if !errors.Is(err, errno) {
				t.Fatalf("forced uring: %v, want the cause %v", err, errno)
			}
		})
	}
	t.Run("other-errors-do-not-fall-back", func(t *testing.T) {
		restore := loop.MakeUringUnavailable(unix.EMFILE)
		defer restore()
		_, err := loop.NewGroup(loop.WithLoops(1))
		if !errors.Is(err, unix.EMFILE) {
			t.Fatalf("auto with EMFILE: %v", err)
		}
	})
	t.Run("auto-uses-uring", func(t *testing.T) {
		testutil.SkipIfNoUring(t)
		// On the running kernel: under an older profile auto may choose
		// epoll (TestKernelProfileAuto).
		g := newGroup(t, loop.BackendAuto, loop.WithLoops(1), loop.WithKernel(""))
		if g.Backend() != loop.BackendUring || g.Features().FallbackReason != "" {
			t.Fatalf("auto on a working kernel: %v (%q)", g.Backend(), g.Features().FallbackReason)
		}
	})
}

func TestNewGroupFailureCleansUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		restore := loop.FailDriverAt(2, unix.ENOMEM)
		defer restore()
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(4))
		if err == nil {
			shutdown(t, g)
			t.Fatal("NewGroup succeeded with loop 2 failing")
		}
		if !errors.Is(err, unix.ENOMEM) {
			t.Fatalf("error %v lost the errno", err)
		}
	})
}

func TestShutdownNeverStartedAndTwice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(3))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.ShutdownGracefully(loop.DefaultQuietPeriod, loop.DefaultShutdownTimeout); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("never-started group did not terminate")
		}
		if err := g.ShutdownGracefully(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := g.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, l := range g.Loops() {
			if l.State() != loop.StateTerminated {
				t.Fatalf("%v: %v", l, l.State())
			}
		}
	})
}

func readComm(tid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/comm", tid))
	if err != nil {
		return "", err
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return string(b), nil
}
