package loop_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// inflightOps is how many ops armEverything arms on a loop: a recv on a
// socket pair whose data arrives later and a multishot accept (the eventfd
// read is the driver's own and always armed, and not counted).
const inflightOps = 2

type inflight struct {
	peer     int
	addr     *unix.SockaddrInet4
	recvData chan []byte
	accepted chan int32
}

func armEverything(t *testing.T, l *loop.Loop) *inflight {
	a, peer := testutil.SocketPair(t)
	lfd, addr := testutil.ListenFd(t)
	in := &inflight{peer: peer, addr: addr, recvData: make(chan []byte, 1), accepted: make(chan int32, 16)}
	buf := make([]byte, 64)
	runOn(t, l, func() {
		if _, err := l.IO().Recv(a, buf, 0, completerFunc(func(c *loop.Completion) {
			if c.Res > 0 {
				in.recvData <- append([]byte(nil), buf[:c.Res]...)
			} else {
				in.recvData <- nil
			}
		})); err != nil {
			t.Error(err)
		}
		if _, err := l.IO().Accept(lfd, true, completerFunc(func(c *loop.Completion) {
			if c.Res >= 0 {
				unix.Close(int(c.Res))
			}
			in.accepted <- c.Res
		})); err != nil {
			t.Error(err)
		}
	})
	return in
}

// check verifies every op still completes, with the right result.
func (in *inflight) check(t *testing.T) {
	t.Helper()
	unix.Write(in.peer, []byte("after"))
	select {
	case d := <-in.recvData:
		if string(d) != "after" {
			t.Fatalf("recv after rebuild got %q", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("recv did not complete after the rebuild")
	}
	for i := 0; i < 2; i++ {
		fd, _ := testutil.Dial(t, in.addr)
		_ = fd
		select {
		case res := <-in.accepted:
			if res < 0 {
				t.Fatalf("accept %d after rebuild: %d", i, res)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("multishot accept %d did not complete after the rebuild", i)
		}
	}
}

func TestStallDetectorRebuilds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		in := armEverything(t, l)
		waitFor(t, time.Second, "the loop to wait", l.Waiting)
		start := time.Now()
		l.InjectStall(512)
		waitFor(t, 5*time.Second, "the rebuild", func() bool { return l.Stats().Rebuilds == 1 })
		took := time.Since(start)
		in.check(t)
		turnPasses(t, l) // a turn after the ops completed, for a second rebuild to show
		s := l.Stats()
		t.Logf("rebuild after %v: rebuilds %d, migrated %d ops, early returns %d", took, s.Rebuilds, s.MigratedOps, s.EarlyReturns)
		if s.Rebuilds != 1 {
			t.Fatalf("rebuilds %d after %d early returns", s.Rebuilds, s.EarlyReturns)
		}
		if s.MigratedOps != inflightOps {
			t.Fatalf("migrated %d ops, want the %d in flight (rebuild after %v)", s.MigratedOps, inflightOps, took)
		}
	})
}

func TestStallBelowThresholdAndDisabled(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		for _, c := range []struct {
			name      string
			threshold int
			inject    int
		}{{"511-of-512", 512, 511}, {"threshold-0", 0, 1000}} {
			t.Run(c.name, func(t *testing.T) {
				g := newGroup(t, b, loop.WithLoops(1), loop.WithStallThreshold(c.threshold))
				l := g.Loop(0)
				runOn(t, l, func() {})
				waitFor(t, time.Second, "the loop to wait", l.Waiting)
				l.InjectStall(c.inject)
				waitFor(t, 5*time.Second, "the injected returns", func() bool { return l.Stats().EarlyReturns >= uint64(c.inject) })
				if s := l.Stats(); s.Rebuilds != 0 {
					t.Fatalf("%d early returns at threshold %d rebuilt %d times", s.EarlyReturns, c.threshold, s.Rebuilds)
				}
			})
		}
	})
}

func TestRebuildRingFromOtherGoroutine(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		in := armEverything(t, l)
		if err := testknobs.RebuildRing(l); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the rebuild", func() bool { return l.Stats().Rebuilds == 1 })
		if s := l.Stats(); s.MigratedOps != inflightOps {
			t.Fatalf("migrated %d ops, want the %d in flight", s.MigratedOps, inflightOps)
		}
		in.check(t)
	})
}

// TestByteStreamAcrossRebuilds streams numbered bytes through a socket
// pair, received by a chain of recvs, while the ring is rebuilt repeatedly
// (RebuildRing from another goroutine, and once by the detector): the
// stream arrives complete, unduplicated and in order.
func TestByteStreamAcrossRebuilds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		a, peer := testutil.SocketPair(t)
		const total = 1 << 20
		var got bytes.Buffer
		var received atomic.Int64 // got.Len(), for the other goroutines
		done := make(chan struct{})
		buf := make([]byte, 4096)
		var recv loop.Completer
		recv = completerFunc(func(c *loop.Completion) {
			if c.Res <= 0 {
				t.Errorf("recv: %d", c.Res)
				close(done)
				return
			}
			got.Write(buf[:c.Res])
			received.Store(int64(got.Len()))
			if got.Len() >= total {
				close(done)
				return
			}
			if _, err := l.IO().Recv(a, buf, 0, recv); err != nil {
				t.Error(err)
			}
		})
		runOn(t, l, func() { l.IO().Recv(a, buf, 0, recv) })
		var wg sync.WaitGroup
		var stop atomic.Bool
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				n := l.Stats().Rebuilds
				testknobs.RebuildRing(l)
				// The next one once this one is done.
				testutil.Eventually(20*time.Second, func() bool { return stop.Load() || l.Stats().Rebuilds > n })
			}
		}()
		want := make([]byte, total)
		for i := range want {
			want[i] = byte(i * 7 / 3)
		}
		for off := 0; off < total; {
			n, err := unix.Write(peer, want[off:min(off+1000, total)])
			if err != nil {
				t.Fatal(err)
			}
			off += n
			if off%(64<<10) < 1000 { // a rebuild, and the receiver catches up
				r := l.Stats().Rebuilds
				waitFor(t, 20*time.Second, "a rebuild and the receiver", func() bool {
					return l.Stats().Rebuilds > r && received.Load() >= int64(off)-(64<<10)
				})
			}
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("stream did not arrive")
		}
		stop.Store(true)
		wg.Wait()
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("stream differs: got %d bytes", got.Len())
		}
		t.Logf("%d bytes intact across %d rebuilds", total, l.Stats().Rebuilds)
		if l.Stats().Rebuilds == 0 {
			t.Fatal("no rebuild happened during the stream")
		}
	})
}

func TestRebuildRunsOnLoopThread(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {})
		tid := l.Tid()
		var onLoop atomic.Bool
		// RebuildRing is a task like any other: a task queued right after it
		// runs after it, on the same thread.
		testknobs.RebuildRing(l)
		runOn(t, l, func() {
			if l.Features().SharedThread {
				onLoop.Store(l.InLoop()) // no thread of its own
			} else {
				onLoop.Store(unix.Gettid() == tid)
			}
		})
		if l.Stats().Rebuilds != 1 || !onLoop.Load() {
			t.Fatalf("rebuilds %d, same thread %v", l.Stats().Rebuilds, onLoop.Load())
		}
	})
}
