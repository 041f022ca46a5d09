//go:build linux

package ring_test

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// newRing creates a ring for t, closed by t.Cleanup, after a watchdog and
// a skip where io_uring is refused or the kernel predates 6.1.
func newRing(t *testing.T, entries uint32, p *ring.Params) *ring.Ring {
	t.Helper()
	testutil.RequireKernel(t, "6.1")
	testutil.Watchdog(t, 20*time.Second)
	r, err := ring.New(entries, p)
	if err != nil {
		t.Fatalf("New(%d): %v", entries, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// getSQE returns a free SQE or fails t.
func getSQE(t *testing.T, r *ring.Ring) *ring.SQE {
	t.Helper()
	sqe, err := r.GetSQE()
	if err != nil {
		t.Fatalf("GetSQE: %v", err)
	}
	return sqe
}

// reap collects exactly n CQEs (failing t if they do not arrive within d),
// submitting whatever is pending first.
func reap(t *testing.T, r *ring.Ring, n int, d time.Duration) []ring.CQE {
	t.Helper()
	out := make([]ring.CQE, 0, n)
	buf := make([]ring.CQE, 16)
	deadline := time.Now().Add(d)
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("reaped %d of %d CQEs in %v: %+v", len(out), n, d, out)
		}
		if _, err := r.SubmitAndWaitTimeout(1, left); err != nil && !errors.Is(err, unix.ETIME) {
			t.Fatalf("SubmitAndWaitTimeout: %v", err)
		}
		k := r.PeekBatch(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		r.CQAdvance(uint32(k))
	}
	return out
}

// reapOne waits for the next CQE and returns a copy.
func reapOne(t *testing.T, r *ring.Ring) ring.CQE {
	t.Helper()
	return reap(t, r, 1, 5*time.Second)[0]
}

// expectNoCQE asserts nothing completes within d.
func expectNoCQE(t *testing.T, r *ring.Ring, d time.Duration) {
	t.Helper()
	if c, err := r.WaitCQETimeout(d); err == nil {
		t.Fatalf("unexpected CQE %+v", *c)
	}
}

func TestNewValidation(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 20*time.Second)
	cases := []struct {
		name    string
		entries uint32
		p       *ring.Params
	}{
		{"entries=0", 0, nil},
		{"entries=max+1", ring.MaxEntries + 1, nil},
		{"entries=huge", 1 << 31, nil},
		{"entries=maxuint32", ^uint32(0), nil},
		{"unknown-flag", 8, &ring.Params{Flags: 1 << 30}},
		{"cqsize-zero", 8, &ring.Params{Flags: ring.SetupCQSize}},
		{"cqsize-below-sq", 8, &ring.Params{Flags: ring.SetupCQSize, CQEntries: 4}},
		{"cqsize-huge", 8, &ring.Params{Flags: ring.SetupCQSize, CQEntries: ring.MaxCQEntries + 1}},
		{"cqentries-without-flag", 8, &ring.Params{CQEntries: 64}},
		{"sqe128-unhandled", 8, &ring.Params{Flags: ring.SetupSQE128}},
		{"defer-without-single-issuer", 8, &ring.Params{Flags: ring.SetupDeferTaskrun}},
		{"resv-nonzero", 8, &ring.Params{Resv: [3]uint32{1}}},
		{"attach-bad-wq", 8, &ring.Params{Flags: ring.SetupAttachWQ, WQFd: 1 << 30}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ring.New(tc.entries, tc.p)
			if err == nil {
				r.Close()
				t.Fatalf("New(%d, %+v) succeeded", tc.entries, tc.p)
			}
			if errors.Is(err, ring.ErrNotSupported) && tc.name != "sqe128-unhandled" {
				t.Fatalf("bad input reported as not supported: %v", err)
			}
			if len(err.Error()) < 6 || err.Error()[:6] != "ring: " {
				t.Fatalf("error %q lacks the ring: prefix", err)
			}
		})
	}
}

func TestNewParamsOut(t *testing.T) {
	p := ring.Params{Flags: ring.SetupCQSize, CQEntries: 100}
	r := newRing(t, 5, &p)
	if p.SQEntries != 8 || p.CQEntries != 128 {
		t.Fatalf("granted SQ %d CQ %d, want 8 and 128", p.SQEntries, p.CQEntries)
	}
	if r.Params() != p {
		t.Fatalf("Params() disagrees with params: %+v", r.Params())
	}
	if r.Flags() != ring.SetupCQSize {
		t.Fatalf("Flags() = %#x", r.Flags())
	}
	if r.Features()&ring.FeatSingleMmap == 0 || r.Features()&ring.FeatNoDrop == 0 || r.Features() != p.Features {
		t.Fatalf("features %#x (params %#x) lack SINGLE_MMAP or NODROP", r.Features(), p.Features)
	}
	// Defaults: CQ twice the SQ.
	r2 := newRing(t, 16, nil)
	if p2 := r2.Params(); p2.SQEntries != 16 || p2.CQEntries != 32 {
		t.Fatalf("default sizes SQ %d CQ %d", p2.SQEntries, p2.CQEntries)
	}
}

func TestNopBatches(t *testing.T) {
	r := newRing(t, 32, nil)
	for round := 0; round < 20; round++ {
		for i := 0; i < 32; i++ {
			sqe := getSQE(t, r)
			sqe.PrepNop()
			sqe.UserData = uint64(round*100 + i + 1)
		}
		n, err := r.SubmitAndWait(32)
		if err != nil || n != 32 {
			t.Fatalf("SubmitAndWait = %d, %v", n, err)
		}
		var cqes [64]ring.CQE
		got := r.PeekBatch(cqes[:])
		if got != 32 {
			t.Fatalf("PeekBatch = %d, want 32", got)
		}
		for i, c := range cqes[:got] {
			if c.Res != 0 || c.UserData != uint64(round*100+i+1) {
				t.Fatalf("round %d cqe %d = %+v", round, i, c)
			}
		}
		r.CQAdvance(uint32(got))
		if r.CQReady() != 0 {
			t.Fatalf("CQReady after advance = %d", r.CQReady())
		}
	}
}

func TestPeekAndWaitCQE(t *testing.T) {
	r := newRing(t, 4, nil)
	if _, ok := r.PeekCQE(); ok {
		t.Fatal("PeekCQE on an empty ring returned a CQE")
	}
	sqe := getSQE(t, r)
	sqe.PrepNop()
	sqe.UserData = 42
	if n, err := r.Submit(); err != nil || n != 1 {
		t.Fatalf("Submit = %d, %v", n, err)
	}
	c, err := r.WaitCQETimeout(5 * time.Second)
	if err != nil || c.UserData != 42 || c.Res != 0 {
		t.Fatalf("WaitCQETimeout = %+v, %v", c, err)
	}
	r.CQESeen()
	if _, ok := r.PeekCQE(); ok {
		t.Fatal("CQE still there after CQESeen")
	}
}

func TestSQFull(t *testing.T) {
	r := newRing(t, 4, nil)
	for i := 0; i < 4; i++ {
		getSQE(t, r).PrepNop()
	}
	for i := 0; i < 3; i++ {
		sqe, err := r.GetSQE()
		if sqe != nil || !errors.Is(err, ring.ErrSQFull) {
			t.Fatalf("GetSQE on a full SQ = %v, %v; want nil, ErrSQFull", sqe, err)
		}
	}
	if n, err := r.Submit(); err != nil || n != 4 {
		t.Fatalf("Submit = %d, %v", n, err)
	}
	sqe := getSQE(t, r)
	if *sqe != (ring.SQE{}) {
		t.Fatalf("GetSQE returned a dirty entry: %+v", *sqe)
	}
	sqe.PrepNop()
	reap(t, r, 5, 5*time.Second)
}

// TestCQOverflow keeps 64 NOPs in flight against a 4-entry CQ: the kernel
// parks 60 on its overflow list (FeatNoDrop) and every CQE must still be
// reaped exactly once.
func TestCQOverflow(t *testing.T) {
	p := ring.Params{Flags: ring.SetupCQSize, CQEntries: 4}
	r := newRing(t, 4, &p)
	if p.CQEntries != 4 {
		t.Fatalf("CQ entries %d, want 4", p.CQEntries)
	}
	if r.Features()&ring.FeatNoDrop == 0 {
		t.Skip("kernel without IORING_FEAT_NODROP drops overflowing CQEs")
	}
	const total = 64
	for i := 0; i < total; i++ {
		sqe, err := r.GetSQE()
		if errors.Is(err, ring.ErrSQFull) {
			if _, err := r.Submit(); err != nil {
				t.Fatalf("Submit with %d in flight: %v", i, err)
			}
			sqe, err = r.GetSQE()
		}
		if err != nil {
			t.Fatalf("GetSQE %d: %v", i, err)
		}
		sqe.PrepNop()
		sqe.UserData = uint64(i + 1)
	}
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	if r.SQFlags()&ring.SQCQOverflow == 0 {
		t.Fatalf("SQ flags %#x: overflow not flagged with %d CQEs in a 4-entry CQ", r.SQFlags(), total)
	}
	seen := make(map[uint64]int)
	var buf [3]ring.CQE // smaller than the CQ, to mix partial batches
	for rounds := 0; len(seen) < total && rounds < 10*total; rounds++ {
		n := r.PeekBatch(buf[:])
		for _, c := range buf[:n] {
			if c.Res != 0 {
				t.Fatalf("cqe %+v", c)
			}
			seen[c.UserData]++
		}
		r.CQAdvance(uint32(n))
	}
	if len(seen) != total {
		t.Fatalf("reaped %d distinct CQEs of %d", len(seen), total)
	}
	for ud, k := range seen {
		if k != 1 || ud < 1 || ud > total {
			t.Fatalf("user_data %d reaped %d times", ud, k)
		}
	}
	if r.Overflow() != 0 {
		t.Fatalf("kernel dropped %d CQEs", r.Overflow())
	}
	if _, ok := r.PeekCQE(); ok || r.SQFlags()&ring.SQCQOverflow != 0 {
		t.Fatalf("leftovers: flags %#x", r.SQFlags())
	}
}

func TestWaitTimeout(t *testing.T) {
	r := newRing(t, 4, nil)
	start := time.Now()
	c, err := r.WaitCQETimeout(30 * time.Millisecond)
	if c != nil || !errors.Is(err, unix.ETIME) {
		t.Fatalf("WaitCQETimeout on an idle ring = %v, %v; want ETIME", c, err)
	}
	if el := time.Since(start); el < 25*time.Millisecond || el > 5*time.Second {
		t.Fatalf("timed wait took %v", el)
	}
	// A real completion still arrives, and the wait adds no
	// completion of its own.
	for i := 0; i < 3; i++ {
		sqe := getSQE(t, r)
		sqe.PrepNop()
		sqe.UserData = 7
		c, err = r.WaitCQETimeout(5 * time.Second)
		if err != nil || c.UserData != 7 {
			t.Fatalf("WaitCQETimeout after submit = %+v, %v", c, err)
		}
		r.CQESeen()
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := r.SubmitAndWaitTimeout(1, 20*time.Millisecond); !errors.Is(err, unix.ETIME) {
		t.Fatalf("second idle wait: %v", err)
	}
	var buf [8]ring.CQE
	if n := r.PeekBatch(buf[:]); n != 0 {
		t.Fatalf("the wait left CQEs of its own: %+v", buf[:n])
	}
	// d <= 0 polls.
	if _, err := r.SubmitAndWaitTimeout(1, 0); !errors.Is(err, unix.ETIME) {
		t.Fatalf("zero wait: %v", err)
	}
}

// TestEventfdReadArmed arms a READ of an eventfd in the ring and completes
// it from another goroutine, as the loop's wakeup does.
func TestEventfdReadArmed(t *testing.T) {
	r := newRing(t, 4, nil)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	buf := make([]byte, 8)
	sqe := getSQE(t, r)
	sqe.PrepRead(efd, buf, 0)
	sqe.UserData = 99
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	expectNoCQE(t, r, 20*time.Millisecond)
	// The write comes once this thread sleeps in the wait.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	done := make(chan error, 1)
	go func() {
		if !testutil.Eventually(10*time.Second, func() bool { return testutil.Blocked(tid) }) {
			t.Errorf("the wait did not sleep within 10s")
		}
		_, err := unix.Write(efd, []byte{5, 0, 0, 0, 0, 0, 0, 0})
		done <- err
	}()
	c, err := r.WaitCQETimeout(5 * time.Second)
	if err != nil || c.UserData != 99 || c.Res != 8 {
		t.Fatalf("eventfd read CQE = %+v, %v", c, err)
	}
	r.CQESeen()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if buf[0] != 5 {
		t.Fatalf("read %v, want counter 5", buf)
	}
	runtime.KeepAlive(buf)
}

func TestRegisterEventfd(t *testing.T) {
	r := newRing(t, 4, nil)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	if err := r.RegisterEventfd(efd); err != nil {
		t.Fatal(err)
	}
	var v [8]byte
	if _, err := unix.Read(efd, v[:]); err != unix.EAGAIN {
		t.Fatalf("eventfd signalled before any completion: %v", err)
	}
	getSQE(t, r).PrepNop()
	reap(t, r, 1, 5*time.Second)
	if n, err := unix.Read(efd, v[:]); err != nil || n != 8 || v[0] == 0 {
		t.Fatalf("eventfd after a completion: %d, %v, %v", n, err, v)
	}
}

func TestRegisterRingFd(t *testing.T) {
	// The registration belongs to the calling thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newRing(t, 8, nil)
	if err := r.RegisterRingFd(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		getSQE(t, r).PrepNop()
	}
	if n, err := r.SubmitAndWait(8); err != nil || n != 8 {
		t.Fatalf("SubmitAndWait through the registered ring fd = %d, %v", n, err)
	}
	reap(t, r, 8, 5*time.Second)
	if _, err := r.WaitCQETimeout(time.Millisecond); !errors.Is(err, unix.ETIME) {
		t.Fatalf("timed wait through the registered ring fd: %v", err)
	}
	if err := r.RegisterRingFd(); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("second RegisterRingFd: %v, want EEXIST", err)
	}
	// Close unregisters it.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSingleIssuerDeferTaskrun(t *testing.T) {
	testutil.RequireSetupFlags(t, ring.SetupSingleIssuer|ring.SetupDeferTaskrun)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newRing(t, 8, &ring.Params{Flags: ring.SetupSingleIssuer | ring.SetupDeferTaskrun | ring.SetupTaskrunFlag})
	a, b := testutil.SocketPair(t)
	buf := make([]byte, 16)
	sqe := getSQE(t, r)
	sqe.PrepRecv(a, buf, 0)
	sqe.UserData = 1
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(b, []byte("deferred")); err != nil {
		t.Fatal(err)
	}
	// The completion is deferred task work: only an enter with GETEVENTS
	// (issued by the wait) runs it.
	c := reapOne(t, r)
	if c.UserData != 1 || string(buf[:max(c.Res, 0)]) != "deferred" {
		t.Fatalf("recv CQE %+v, buf %q", c, buf)
	}
}

func TestUseAfterClose(t *testing.T) {
	r := newRing(t, 4, nil)
	getSQE(t, r).PrepNop() // prepared, never submitted
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if sqe, err := r.GetSQE(); sqe != nil || !errors.Is(err, ring.ErrClosed) {
		t.Fatalf("GetSQE after Close = %v, %v", sqe, err)
	}
	if _, err := r.Submit(); !errors.Is(err, ring.ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	if _, err := r.SubmitAndWait(1); !errors.Is(err, ring.ErrClosed) {
		t.Fatalf("SubmitAndWait after Close: %v", err)
	}
	if _, err := r.WaitCQETimeout(time.Millisecond); !errors.Is(err, ring.ErrClosed) {
		t.Fatalf("WaitCQETimeout after Close: %v", err)
	}
	var buf [4]ring.CQE
	if n := r.PeekBatch(buf[:]); n != 0 {
		t.Fatalf("PeekBatch after Close = %d", n)
	}
	if _, ok := r.PeekCQE(); ok {
		t.Fatal("PeekCQE after Close returned a CQE")
	}
	r.CQAdvance(0)
	if r.CQReady() != 0 {
		t.Fatalf("CQReady %d after Close", r.CQReady())
	}
	if err := r.RegisterEventfd(0); !errors.Is(err, ring.ErrClosed) {
		t.Fatalf("RegisterEventfd after Close: %v", err)
	}
	if _, err := r.NewBufRing(1, 4, 64); !errors.Is(err, ring.ErrClosed) {
		t.Fatalf("NewBufRing after Close: %v", err)
	}
}

// TestCloseReleasesEverything checks /proc/self/fd and /proc/self/maps:
// after Close nothing of the ring, its buffer ring or its registrations
// remains.
func TestCloseReleasesEverything(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 20*time.Second)
	fds, maps := testutil.FdCount(), len(testutil.MapsLines("io_uring"))
	for i := 0; i < 3; i++ {
		r, err := ring.New(64, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(testutil.MapsLines("io_uring")); got <= maps {
			t.Fatalf("no io_uring mapping visible while the ring is open (%d)", got)
		}
		br, err := r.NewBufRing(3, 16, 4096)
		if err != nil {
			t.Fatal(err)
		}
		addr := br.MemAddr()
		if !testutil.Mapped(addr) {
			t.Fatal("buffer ring not mapped")
		}
		getSQE(t, r).PrepNop()
		if _, err := r.SubmitAndWait(1); err != nil {
			t.Fatal(err)
		}
		getSQE(t, r).PrepNop() // left unsubmitted on purpose
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if testutil.Mapped(addr) {
			t.Fatal("buffer ring still mapped after Close")
		}
		if err := br.Close(); err != nil {
			t.Fatalf("BufRing.Close after Ring.Close: %v", err)
		}
		if got := testutil.FdCount(); got != fds {
			t.Fatalf("fds: %d before, %d after Close", fds, got)
		}
		if got := len(testutil.MapsLines("io_uring")); got != maps {
			t.Fatalf("io_uring mappings: %d before, %d after Close:\n%v", maps, got, testutil.MapsLines("io_uring"))
		}
	}
}

func TestSetupErrors(t *testing.T) {
	for _, tc := range []struct {
		errno       unix.Errno
		unsupported bool
	}{
		{unix.ENOSYS, true},
		{unix.EPERM, true},
		{unix.ENOMEM, true},
		{unix.EINVAL, false},
		{unix.EMFILE, false},
	} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			restore := ring.SetSysSetup(func(uint32, *ring.Params) (int, error) { return -1, tc.errno })
			defer restore()
			r, err := ring.New(8, nil)
			if r != nil || err == nil {
				t.Fatal("New succeeded with a failing io_uring_setup")
			}
			if !errors.Is(err, tc.errno) {
				t.Fatalf("%v does not match %v", err, tc.errno)
			}
			if errors.Is(err, ring.ErrNotSupported) != tc.unsupported {
				t.Fatalf("errors.Is(%v, ErrNotSupported) = %v", err, !tc.unsupported)
			}
			var se *ring.SetupError
			if !errors.As(err, &se) || se.Errno != tc.errno {
				t.Fatalf("not a *SetupError: %T", err)
			}
		})
	}
	// A kernel without SINGLE_MMAP, NODROP and EXT_ARG is refused, and
	// the ring fd it gave is closed.
	fd := -1
	restore := ring.SetSysSetup(func(uint32, *ring.Params) (int, error) {
		var err error
		fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC)
		return fd, err
	})
	r, err := ring.New(8, nil)
	restore()
	if r != nil || !errors.Is(err, ring.ErrNotSupported) {
		t.Fatalf("New on a kernel without the floor's features: %v, %v", r, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fd %d still open after the refusal: %v", fd, err)
	}
	uerr := error(&ring.UnsupportedError{Op: "IORING_OP_SEND_ZC", MinKernel: "6.0"})
	if !errors.Is(uerr, ring.ErrNotSupported) || uerr.Error() != "ring: IORING_OP_SEND_ZC not supported (requires Linux 6.0)" {
		t.Fatalf("UnsupportedError: %v", uerr)
	}
}

func TestErrno(t *testing.T) {
	if ring.Errno(0) != nil || ring.Errno(5) != nil {
		t.Fatal("Errno of a success is not nil")
	}
	err := ring.Errno(-int32(unix.ECANCELED))
	if e, ok := err.(unix.Errno); !ok || e != unix.ECANCELED || !errors.Is(err, unix.ECANCELED) {
		t.Fatalf("Errno(-ECANCELED) = %#v", err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		_ = ring.Errno(-int32(unix.ECONNRESET))
		_ = ring.Errno(-int32(unix.ENOBUFS))
	}); allocs != 0 {
		t.Fatalf("Errno allocates %v times", allocs)
	}
}

// TestNopBatchAllocs asserts the submit/reap hot path does not allocate.
func TestNopBatchAllocs(t *testing.T) {
	r := newRing(t, 32, nil)
	var cqes [32]ring.CQE
	allocs := testing.AllocsPerRun(200, func() { nopBatch(r, cqes[:]) })
	if allocs != 0 {
		t.Fatalf("NOP batch allocates %v times per batch", allocs)
	}
}

// nopBatch submits len(cqes) NOPs and reaps them; shared with the benchmark.
func nopBatch(r *ring.Ring, cqes []ring.CQE) {
	for i := range cqes {
		sqe, err := r.GetSQE()
		if err != nil {
			panic(err)
		}
		sqe.PrepNop()
		sqe.UserData = uint64(i)
	}
	if _, err := r.SubmitAndWait(uint32(len(cqes))); err != nil {
		panic(err)
	}
	for got := 0; got < len(cqes); {
		n := r.PeekBatch(cqes[got:])
		r.CQAdvance(uint32(n))
		got += n
	}
}

func TestRDisabledEnableRings(t *testing.T) {
	testutil.RequireSetupFlags(t, ring.SetupRDisabled)
	r := newRing(t, 4, &ring.Params{Flags: ring.SetupRDisabled})
	getSQE(t, r).PrepNop()
	if _, err := r.Submit(); !errors.Is(err, unix.EBADFD) {
		t.Fatalf("Submit on a disabled ring: %v, want EBADFD", err)
	}
	if err := r.EnableRings(); err != nil {
		t.Fatal(err)
	}
	reap(t, r, 1, 5*time.Second)
}
