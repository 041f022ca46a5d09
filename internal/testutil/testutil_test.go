//go:build linux

package testutil_test

import (
	"os"
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
