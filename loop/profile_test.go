package loop_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// kernelProfiles are the releases the profile tests run under (the uring
// backend's floor and later), with whether bundles may run: they need a
// length on multishot receives (6.17) as well. "" is the running kernel.
var kernelProfiles = []struct {
	kernel string
	bundle bool
}{
	{kernel: "6.1"},
	{kernel: "6.12"},
	{kernel: "", bundle: true},
}

// Under each kernel profile the loop submits only what that release has:
// the ops it ran are counted by kind as its ring published them, and a
// feature the profile lacks must not appear once. The workload asks for
// everything (multishot accept, multishot provided-buffer receives, a
// multishot poll, SHUTDOWN, timed waits), so a profile that leaks a newer
// feature fails here, and one that drops what 6.1 has fails too.
func TestKernelProfileOpCounts(t *testing.T) {
	testutil.SkipIfNoUring(t)
	defer loop.CountSubmissions()()
	for _, p := range kernelProfiles {
		t.Run("kernel="+cmp.Or(p.kernel, "running"), func(t *testing.T) {
			k := ring.MustKernel(p.kernel)
			g, err := loop.NewGroup(loop.WithBackend(loop.BackendUring), loop.WithLogger(quietLogger),
				loop.WithLoops(1), loop.WithKernel(p.kernel))
			if err != nil {
				t.Fatalf("a uring group under %s: %v", p.kernel, err)
			}
			t.Cleanup(func() { shutdown(t, g) })
			l := g.Loop(0)
			runOn(t, l, func() {}) // started: the buffer ring is registered
			f := l.Features()
			if f.Kernel != k.String() || f.Backend != loop.BackendUring {
				t.Errorf("features under %s: %+v", p.kernel, f)
			}
			if f.RecvBundle && !p.bundle {
				t.Errorf("bundles under %s", p.kernel)
			}
			if f.SetupFlags&^k.SetupFlags() != 0 {
				t.Errorf("setup flags %#x beyond %s's %#x", f.SetupFlags, p.kernel, k.SetupFlags())
			}
			profileWorkload(t, l)
			var c ring.SubmitCounts
			runOn(t, l, func() { c = l.Submissions() })
			t.Logf("%s: %v; enters %d (ext-arg %d, registered %d)", p.kernel, c.SQEs, c.Enters, c.ExtArgEnters, c.RegisteredEnters)
			multi := func(k ring.SQEKind) bool { return k.Multishot }
			bufSel := func(k ring.SQEKind) bool { return k.BufferSelect }
			bundle := func(k ring.SQEKind) bool { return k.Bundle }
			if n := c.Count(ring.OpRecv, bundle); n > 0 && !p.bundle {
				t.Errorf("%s: %d bundled RECV, which the release does not have", p.kernel, n)
			}
			for kind := range c.SQEs {
				if int(kind.Op) >= k.OpcodeLimit() {
					t.Errorf("%s: opcode %d submitted, past the release's last (%d)", p.kernel, kind.Op, k.OpcodeLimit()-1)
				}
			}
			// What 6.1 has, the workload used: the counts can see.
			for _, chk := range []struct {
				what string
				n    uint64
			}{
				{"multishot ACCEPT", c.Count(ring.OpAccept, multi)},
				{"RECV from a buffer ring", c.Count(ring.OpRecv, bufSel)},
				{"SHUTDOWN", c.Count(ring.OpShutdown, nil)},
				{"enters", c.Enters},
			} {
				if chk.n == 0 {
					t.Errorf("%s: no %s", p.kernel, chk.what)
				}
			}
			if !f.SharedThread && c.Count(ring.OpRecv, multi) == 0 { // a shared-thread loop arms single shots
				t.Errorf("%s: no multishot RECV", p.kernel)
			}
			if !f.SharedThread && c.ExtArgEnters == 0 { // a shared-thread loop waits on the netpoller
				t.Errorf("%s: no timed wait with EXT_ARG", p.kernel)
			}
			if !f.SharedThread && c.RegisteredEnters == 0 {
				t.Errorf("%s: no enter through the registered ring fd", p.kernel)
			}
			if c.Count(ring.OpTimeout, nil) > 1 {
				t.Errorf("%s: %d TIMEOUT SQEs for one timer: waits took the TIMEOUT-SQE way", p.kernel, c.Count(ring.OpTimeout, nil))
			}
			// A shared-thread loop on more than one P arms single shots
			// of one buffer (TestSharedThreadReceiveKind).
			multishotRecv := !f.SharedThread || runtime.GOMAXPROCS(0) == 1
			if p.bundle && f.RecvBundle && multishotRecv && c.Count(ring.OpRecv, bundle) == 0 {
				t.Errorf("%s: no bundled RECV, which the kernel has", p.kernel)
			}
		})
	}
}

// profileWorkload runs on l: a listener accepting 4 connections (multishot
// asked for), an echo of 64 KiB on each (provided-buffer receives), a
// SHUTDOWN of each server side, and a timer, so the loop waits with a
// timeout.
func profileWorkload(t *testing.T, l *loop.Loop) {
	const conns, size = 4, 64 << 10
	lfd, addr := testutil.ListenFd(t)
	type server struct {
		fd   int
		got  []byte
		done bool
	}
	var (
		mu      sync.Mutex
		servers []*server
		errs    []string
	)
	fail := func(s string) {
		mu.Lock()
		errs = append(errs, s)
		mu.Unlock()
	}
	var recv func(s *server)
	recv = func(s *server) {
		c := completerFunc(func(cp *loop.Completion) {
			switch {
			case cp.Res > 0:
				mu.Lock()
				s.got = append(s.got, cp.Data...)
				full := len(s.got) == size
				mu.Unlock()
				if full {
					// The whole message: echo it, then shut the
					// sending side.
					out := bytes.Clone(s.got)
					if _, err := l.IO().Send(s.fd, out, 0, completerFunc(func(cp *loop.Completion) {
						if cp.Res != int32(len(out)) {
							fail("short send")
						}
						if _, err := l.IO().Shutdown(s.fd, unix.SHUT_WR, completerFunc(func(cp *loop.Completion) {
							if cp.Res != 0 {
								fail("shutdown failed")
							}
							mu.Lock()
							s.done = true
							mu.Unlock()
						})); err != nil {
							fail("Shutdown: " + err.Error())
						}
					})); err != nil {
						fail("Send: " + err.Error())
					}
				}
				if cp.Flags&ring.CQEFMore == 0 && !full {
					recv(s)
				}
			case cp.Res == 0:
			default:
				if cp.Flags&ring.CQEFMore == 0 {
					fail("receive failed: " + unix.Errno(-cp.Res).Error())
				}
			}
		})
		if _, err := l.IO().RecvProvided(s.fd, 0, c); err != nil {
			fail("receive: " + err.Error())
		}
	}
	var accept func()
	accept = func() {
		if _, err := l.IO().Accept(lfd, true, completerFunc(func(cp *loop.Completion) {
			if cp.Res < 0 {
				if cp.Res != -int32(unix.ECANCELED) {
					fail("accept: " + unix.Errno(-cp.Res).Error())
				}
				return
			}
			s := &server{fd: int(cp.Res)}
			t.Cleanup(func() { unix.Close(s.fd) })
			mu.Lock()
			servers = append(servers, s)
			n := len(servers)
			mu.Unlock()
			recv(s)
			if cp.Flags&ring.CQEFMore == 0 && n < conns {
				accept()
			}
		})); err != nil {
			fail("Accept: " + err.Error())
		}
	}
	fired := make(chan struct{})
	runOn(t, l, accept)
	if _, err := l.Schedule(20*time.Millisecond, func() { close(fired) }); err != nil {
		t.Fatal(err)
	}
	for range conns {
		fd, _ := testutil.Dial(t, addr)
		go func() {
			msg := pattern(fd, size)
			for p := msg; len(p) > 0; {
				n, err := unix.Write(fd, p)
				if err != nil {
					fail("client write: " + err.Error())
					return
				}
				p = p[n:]
			}
			var back []byte
			var rerr error
			buf := make([]byte, 32<<10)
			for {
				n, err := unix.Read(fd, buf)
				if err == unix.EINTR {
					continue
				}
				if n <= 0 || err != nil {
					rerr = err
					break
				}
				back = append(back, buf[:n]...)
			}
			if !bytes.Equal(back, msg) {
				fail(fmt.Sprintf("echo differs: %d bytes back of %d (equal prefix: %v), then read error %v", len(back), len(msg), bytes.HasPrefix(msg, back), rerr))
			}
		}()
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer never fired")
	}
	waitFor(t, 20*time.Second, "every connection echoed and shut", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range servers {
			if s.done {
				n++
			}
		}
		return n == conns || len(errs) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, e := range errs {
		t.Error(e)
	}
}

// BackendAuto runs io_uring only where it measured at or above epoll:
// from 6.1 on. Before that it picks epoll and says why, naming the
// release and what it lacks.
func TestKernelProfileAuto(t *testing.T) {
	testutil.SkipIfNoUring(t)
	for _, c := range []struct {
		kernel string
		want   loop.Backend
	}{{"5.10", loop.BackendEpoll}, {"5.19", loop.BackendEpoll}, {"6.0", loop.BackendEpoll}, {"6.1", loop.BackendUring}, {"", loop.BackendUring}} {
		g, err := loop.NewGroup(loop.WithLogger(quietLogger), loop.WithLoops(1), loop.WithKernel(c.kernel))
		if err != nil {
			t.Fatalf("%q: %v", c.kernel, err)
		}
		f := g.Features()
		shutdown(t, g)
		if f.Backend != c.want {
			t.Errorf("auto under %q chose %v (%s), want %v", c.kernel, f.Backend, f.FallbackReason, c.want)
		}
		if c.want == loop.BackendEpoll && (!strings.Contains(f.FallbackReason, "Linux "+c.kernel+" ") ||
			!strings.Contains(f.FallbackReason, "lacks IORING_SETUP_DEFER_TASKRUN") || !strings.Contains(f.FallbackReason, "io_uring needs 6.1")) {
			t.Errorf("auto under %q: fallback reason %q does not name the release and what it lacks", c.kernel, f.FallbackReason)
		}
		if c.want == loop.BackendUring && f.FallbackReason != "" {
			t.Errorf("auto under %q: fallback reason %q on io_uring", c.kernel, f.FallbackReason)
		}
		if f.Kernel != c.kernel {
			t.Errorf("Features.Kernel = %q under %q", f.Kernel, c.kernel)
		}
	}
}

// BackendUring under a release before 6.1 fails in NewGroup, with an error
// matching ring.ErrNotSupported that names the release and what it lacks.
func TestKernelProfileUringRefused(t *testing.T) {
	testutil.CheckLeaks(t)
	for _, c := range []struct{ kernel, lacks string }{
		{"5.15", "IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_SINGLE_ISSUER, multishot receive, multishot accept, provided-buffer rings, registered ring fds;"},
		{"6.0", "IORING_SETUP_DEFER_TASKRUN;"},
	} {
		g, err := loop.NewGroup(loop.WithBackend(loop.BackendUring), loop.WithLogger(quietLogger), loop.WithLoops(2), loop.WithKernel(c.kernel))
		if err == nil {
			shutdown(t, g)
			t.Fatalf("BackendUring under %s: NewGroup succeeded", c.kernel)
		}
		if !errors.Is(err, ring.ErrNotSupported) || !strings.Contains(err.Error(), "Linux "+c.kernel+" ") ||
			!strings.Contains(err.Error(), "lacks "+c.lacks) || !strings.Contains(err.Error(), "io_uring needs 6.1 (BackendAuto uses epoll here)") {
			t.Errorf("BackendUring under %s: %v; want ErrNotSupported naming the release and that it lacks %s", c.kernel, err, c.lacks)
		}
	}
}

// A shared-thread loop sets its ring up with COOP_TASKRUN (completions wait
// for the submitting thread's next entry into the kernel instead of
// interrupting it) and without SINGLE_ISSUER or DEFER_TASKRUN, and arms
// multishot receives only while the process runs on one P: with more, the
// loop goroutine moves between threads and its receives are single shots,
// of one buffer each. The kinds are read from what the ring submitted.
func TestSharedThreadReceiveKind(t *testing.T) {
	testutil.SkipIfNoUring(t)
	defer loop.CountSubmissions()()
	for _, procs := range []int{1, 2} {
		t.Run("GOMAXPROCS="+strconv.Itoa(procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			g, err := loop.NewGroup(loop.WithBackend(loop.BackendUring), loop.WithLogger(quietLogger),
				loop.WithLoops(1), loop.WithSharedThread(true))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { shutdown(t, g) })
			l := g.Loop(0)
			runOn(t, l, func() {})
			f := l.Features()
			if !f.SharedThread {
				t.Fatalf("features: %+v", f)
			}
			if f.SetupFlags&ring.SetupCoopTaskrun == 0 {
				t.Errorf("setup flags %#x: no COOP_TASKRUN", f.SetupFlags)
			}
			if f.SetupFlags&(ring.SetupSingleIssuer|ring.SetupDeferTaskrun) != 0 {
				t.Errorf("setup flags %#x: single issuer or deferred task run on a shared thread", f.SetupFlags)
			}
			// What start submitted (its probes of the kernel) is left out.
			var before, c ring.SubmitCounts
			runOn(t, l, func() { before = l.Submissions() })
			profileWorkload(t, l)
			runOn(t, l, func() { c = l.Submissions() })
			// RECV SQEs of a kind since start.
			recvs := func(kind func(ring.SQEKind) bool) uint64 {
				return c.Count(ring.OpRecv, kind) - before.Count(ring.OpRecv, kind)
			}
			nMulti := recvs(func(k ring.SQEKind) bool { return k.Multishot })
			nSingle := recvs(func(k ring.SQEKind) bool { return !k.Multishot && k.BufferSelect })
			t.Logf("RECV: %d multishot, %d single shots", nMulti, nSingle)
			if procs == 1 && (nMulti == 0 || nSingle != 0) {
				t.Errorf("one P: %d multishot and %d single-shot receives, want multishot only", nMulti, nSingle)
			}
			if procs > 1 && (nMulti != 0 || nSingle == 0) {
				t.Errorf("%d Ps: %d multishot and %d single-shot receives, want single shots only", procs, nMulti, nSingle)
			}
			if procs == 1 && f.RecvBundle && recvs(func(k ring.SQEKind) bool { return k.Multishot && k.Bundle }) == 0 {
				t.Errorf("one P, a kernel with bundles: no bundled multishot receive")
			}
			// A single shot with bundles would append all the socket
			// holds to its one completion: one buffer each.
			if n := recvs(func(k ring.SQEKind) bool { return k.Bundle && !k.Multishot }); n != 0 {
				t.Errorf("%d single-shot receives with bundles", n)
			}
		})
	}
}
