//go:build linux

package testutil_test

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

func TestLeaksSeesFdsGoroutinesAndRings(t *testing.T) {
	testutil.Watchdog(t, 20*time.Second)
	before := testutil.Snapshot()

	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	exited := make(chan struct{})
	go func() { <-release; close(exited) }()
	msg := before.Leaks(0)
	if !strings.Contains(msg, "leaked fd") || !strings.Contains(msg, "leaked goroutine") {
		t.Fatalf("leak report misses the pipe or the goroutine:\n%s", msg)
	}
	unix.Close(p[0])
	unix.Close(p[1])
	close(release)
	<-exited
	if msg := before.Leaks(2 * time.Second); msg != "" {
		t.Fatalf("leaks reported after cleanup:\n%s", msg)
	}

	if testutil.UringErr() == nil {
		r, err := ring.New(4, nil)
		if err != nil {
			t.Fatal(err)
		}
		if msg := before.Leaks(0); !strings.Contains(msg, "io_uring") {
			t.Fatalf("open ring not reported:\n%s", msg)
		}
		r.Close()
		if msg := before.Leaks(time.Second); msg != "" {
			t.Fatalf("closed ring reported:\n%s", msg)
		}
	}
}

func TestLoopbackHelpers(t *testing.T) {
	testutil.Watchdog(t, 20*time.Second)
	testutil.CheckLeaks(t)
	ln := testutil.Loopback(t)
	if !strings.HasPrefix(ln.Addr().String(), "127.0.0.1:") {
		t.Fatalf("listener on %v", ln.Addr())
	}
	for _, pair := range []func(testing.TB) (int, int){testutil.TCPPair, testutil.SocketPair} {
		a, b := pair(t)
		if _, err := unix.Write(a, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8)
		n, err := unix.Read(b, buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
	}
}

func TestSkipAndRequire(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.RequireKernel(t, "6.1")
	testutil.RequireSetupFlags(t, ring.SetupCoopTaskrun)
}

func TestWaitHelpers(t *testing.T) {
	testutil.Watchdog(t, 20*time.Second)
	testutil.CheckLeaks(t)

	lfd, addr := testutil.ListenFd(t)
	testutil.Dial(t, addr)
	testutil.Dial(t, addr)
	testutil.WaitAcceptQueue(t, lfd, 2, 10*time.Second)
	if n := testutil.AcceptQueueLen(t, lfd); n != 2 {
		t.Fatalf("accept queue holds %d, want 2", n)
	}

	a, b := testutil.SocketPair(t)
	unix.Write(b, []byte("x"))
	testutil.WaitReadable(t, a, 10*time.Second)

	// A thread asleep in epoll_pwait is seen there; a goroutine blocked
	// on a channel is seen in its function.
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(epfd)
	c, d := testutil.SocketPair(t)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c)}); err != nil {
		t.Fatal(err)
	}
	tids := make(chan int, 1)
	woken := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		ev := make([]unix.EpollEvent, 1)
		for {
			n, err := unix.EpollWait(epfd, ev, 10000)
			if err != unix.EINTR {
				woken <- n
				return
			}
		}
	}()
	testutil.WaitBlocked(t, <-tids, 10*time.Second)
	unix.Write(d, []byte("y"))
	if n := <-woken; n != 1 {
		t.Fatalf("epoll_wait returned %d events", n)
	}

	release := make(chan struct{})
	done := make(chan struct{})
	go func() { blockedForTest(release); close(done) }()
	testutil.WaitParked(t, 10*time.Second, "testutil_test.blockedForTest", 1)
	close(release)
	<-done
	if n := testutil.Parked("testutil_test.blockedForTest"); n != 0 {
		t.Fatalf("%d goroutines still seen blocked", n)
	}
	if !testutil.Eventually(time.Second, func() bool { return true }) || testutil.Eventually(10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Eventually")
	}
}

//go:noinline
func blockedForTest(release chan struct{}) { <-release }
