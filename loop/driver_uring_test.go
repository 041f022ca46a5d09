//go:build linux

package loop

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// What only the uring driver does, or does its own way; the driver
// contract (contract_test.go) covers the rest. These run on the running
// kernel.

// newUringHarness is a contract harness on the running kernel's uring
// driver.
func newUringHarness(tb testing.TB, opts ...harnessOpt) (*driverHarness, *uringDriver) {
	tb.Helper()
	h := newDriverHarness(tb, uringKind(ring.Kernel{}), opts...)
	return h, h.uring()
}

// TestUringDriverCancelInternals: the uring driver counts the
// ASYNC_CANCEL's own completion, which never reaches the sink, and the
// canceled op's final completion is -ECANCELED.
func TestUringDriverCancelInternals(t *testing.T) {
	h, d := newUringHarness(t)
	a, _ := testutil.SocketPair(t)
	lfd, _ := testutil.ListenFd(t)
	recv := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = make([]byte, 16) })
	acc := h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	h.poll(0)
	for i, ud := range []uint64{recv, acc} {
		o := h.tab.lookup(ud)
		h.cancel(ud)
		wantCQE(t, o.tag.String(), h.final("canceled op", ud), -int32(unix.ECANCELED), false)
		h.until("the cancel's own completion", func() bool { return d.cancelCQEs == uint64(i+1) })
	}
	if len(h.log) != 2 || h.stale != 0 {
		t.Fatalf("completions %v: the cancels' own completions reached the sink", h.log)
	}
}

// TestUringDriverSQFullAndCQOverflow submits far more ops than the SQ (4)
// and CQ (8) hold without reaping: submit flushes a full SQ, the kernel
// parks surplus CQEs, and polls deliver every one exactly once, honouring
// max.
func TestUringDriverSQFullAndCQOverflow(t *testing.T) {
	h, d := newUringHarness(t, func(c *driverConfig, d driver) { c.ringEntries = 4 })
	const n = 100
	uds := make(map[uint64]int, n)
	for range n {
		uds[h.start(tagNop, nil)] = 0
	}
	if res, err := d.poll(0, 10, h); err != nil || res.completions != 10 {
		t.Fatalf("poll with max 10: %+v, %v; want 10 delivered", res, err)
	}
	h.max = 0
	h.until("all nops", func() bool { return len(h.log) >= n })
	for _, c := range h.log {
		uds[c.ud]++
	}
	for ud, k := range uds {
		if k != 1 {
			t.Fatalf("nop %#x completed %d times", ud, k)
		}
	}
	if len(h.log) != n || d.lostCQEs.Load() != 0 {
		t.Fatalf("delivered %d of %d, lost %d", len(h.log), n, d.lostCQEs.Load())
	}
}

// TestUringDriverStaleCQE releases slots before their completions arrive:
// the sink sees completions naming no live op and counts them; the driver
// neither crashes nor leaks the provided buffer.
func TestUringDriverStaleCQE(t *testing.T) {
	h, d := newUringHarness(t)
	h.allowStale = true
	o := h.tab.alloc(tagNop)
	if err := d.submit(o); err != nil {
		t.Fatal(err)
	}
	h.tab.release(o) // the loop lost track of it: an invariant break
	h.until("stale nop", func() bool { return h.stale == 1 })

	client, server := testutil.TCPPair(t)
	ro := h.tab.alloc(tagRecvBuf)
	ro.fd, ro.multishot = int32(server), true
	if err := d.submit(ro); err != nil {
		t.Fatal(err)
	}
	h.tab.release(ro)
	// More messages than buffers: each stale completion still gives its
	// buffer back, or the kernel would run dry and end the receive.
	for i := range 40 {
		writeAll(t, client, []byte{byte(i)})
		h.until("stale recv", func() bool { return h.stale == 2+i })
	}
}

func TestUringDriverSetupRefused(t *testing.T) {
	old := newRingFn
	t.Cleanup(func() { newRingFn = old })
	newRingFn = func(ring.Kernel, uint32, *ring.Params) (*ring.Ring, error) {
		return nil, &ring.SetupError{Errno: unix.EPERM}
	}
	_, err := newUringDriver(contractConfig(t, ring.Kernel{}))
	if !errors.Is(err, ring.ErrNotSupported) || !errors.Is(err, unix.EPERM) {
		t.Fatalf("newUringDriver with setup refused: %v; want ErrNotSupported and EPERM", err)
	}
	newRingFn = func(ring.Kernel, uint32, *ring.Params) (*ring.Ring, error) {
		return nil, &ring.SetupError{Errno: unix.EINVAL}
	}
	if _, err = newUringDriver(contractConfig(t, ring.Kernel{})); errors.Is(err, ring.ErrNotSupported) || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("newUringDriver with EINVAL: %v; want EINVAL only", err)
	}
}

// TestUringDriverFloor refuses a kernel profile older than 6.1 before any
// ring is made, naming the release and what it lacks, with an error auto
// falls back on; 6.1 itself runs.
func TestUringDriverFloor(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.CheckLeaks(t)
	for _, c := range []struct{ kernel, lacks string }{
		{"5.10", "IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_SINGLE_ISSUER, multishot receive, multishot accept, provided-buffer rings, registered ring fds, IORING_ENTER_EXT_ARG"},
		{"5.19", "IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_SINGLE_ISSUER, multishot receive;"},
		{"6.0", "IORING_SETUP_DEFER_TASKRUN;"},
	} {
		_, err := newUringDriver(contractConfig(t, ring.MustKernel(c.kernel)))
		if !errors.Is(err, ring.ErrNotSupported) || !strings.Contains(err.Error(), "Linux "+c.kernel+" ") ||
			!strings.Contains(err.Error(), "lacks "+c.lacks) || !strings.Contains(err.Error(), "io_uring needs 6.1") {
			t.Errorf("kernel %s: %v; want ErrNotSupported naming the release and that it lacks %s", c.kernel, err, c.lacks)
		}
	}
	h := newDriverHarness(t, uringKind(ring.MustKernel("6.1")))
	if f := h.uring().features(); f.Kernel != "6.1" || f.SetupFlags&ring.SetupDeferTaskrun == 0 || f.SetupFlags&ring.SetupNoSQArray != 0 {
		t.Fatalf("under 6.1: %+v", f)
	}
}

func TestUringDriverFeatures(t *testing.T) {
	_, d := newUringHarness(t)
	f := d.features()
	t.Logf("features: %+v", f)
	if f.Backend != BackendUring || f.RingFeatures&ring.FeatExtArg == 0 || d.bufRing == nil {
		t.Fatalf("features %+v", f)
	}
	if f.SetupFlags&ring.SetupRDisabled != 0 {
		t.Fatal("ring still reported R_DISABLED after start")
	}
	if ring.SetupFlagSupported(ring.SetupSingleIssuer|ring.SetupDeferTaskrun) &&
		f.SetupFlags&(ring.SetupSingleIssuer|ring.SetupDeferTaskrun) != ring.SetupSingleIssuer|ring.SetupDeferTaskrun {
		t.Fatalf("setup flags %#x lack SINGLE_ISSUER|DEFER_TASKRUN", f.SetupFlags)
	}
}

// TestUringDriverRebuildDeadline makes the old ring keep an op past the
// rebuild's deadline (its cancel is never sent): the op is failed once with
// -ECANCELED, never resubmitted, and its buffer orphaned.
func TestUringDriverRebuildDeadline(t *testing.T) {
	h, d := newUringHarness(t)
	h.allowAbandon = true
	d.rebuildSkipCancel = true
	d.rebuildTimeout = 50 * time.Millisecond
	a, b := testutil.SocketPair(t)
	buf := make([]byte, 16)
	ud := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = buf })
	h.poll(0)
	n, err := d.rebuild(h.tab, h)
	if err != nil || n != 0 {
		t.Fatalf("rebuild: %d, %v; want 0 ops moved", n, err)
	}
	cs := h.of(ud)
	if len(cs) != 1 {
		t.Fatalf("completions for the unknown op: %v, want 1", cs)
	}
	wantCQE(t, "op with unknown outcome", cs[0], rebuildLostRes, false)
	if !cs[0].quar || h.live(ud) || h.quarantined != 1 || h.quarantinedBytes != uint64(len(buf)) {
		t.Fatalf("given-up op: Quarantined %v, live %v, quarantined %d ops / %d bytes; want 1 op, %d bytes",
			cs[0].quar, h.live(ud), h.quarantined, h.quarantinedBytes, len(buf))
	}
	// Its slot is never reused: the kernel may still write the record.
	_, _, slot := unpackUserData(ud)
	for range opChunk * 2 {
		if o := h.tab.alloc(tagNop); o.slot == slot {
			t.Fatalf("the given-up op's slot %d was reused", slot)
		}
	}
	// The new ring works, the old recv is gone: data stays in the socket.
	h.final("nop on the new ring", h.start(tagNop, nil))
	writeAll(t, b, []byte("z"))
	if err := d.wake(); err != nil {
		t.Fatal(err)
	}
	if res := h.poll(5 * time.Second); !res.woken || len(h.of(ud)) != 1 {
		t.Fatalf("poll: %+v, completions of the failed op %v", res, h.of(ud))
	}
}

// TestUringDriverRebuildCanceledBeforeRearm: an op canceled after the
// rebuild decided to move it (a callback run during the reap cancels it)
// is not re-armed on the new ring, where its cancel went first and found
// nothing: it ends with -ECANCELED, once, and nothing of it stays armed.
func TestUringDriverRebuildCanceledBeforeRearm(t *testing.T) {
	h, d := newUringHarness(t)
	a, b := testutil.SocketPair(t)
	buf := make([]byte, 16)
	ud := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = buf })
	keep := h.start(tagRecv, func(o *op) { o.fd = int32(b); o.buf = make([]byte, 16) })
	h.poll(0)
	d.rebuildReaped = func() { h.cancel(ud) }
	if n, err := d.rebuild(h.tab, h); err != nil || n != 1 {
		t.Fatalf("rebuild = %d, %v; want only the op not canceled moved", n, err)
	}
	d.rebuildReaped = nil
	wantCQE(t, "recv canceled before its re-arm", h.final("canceled recv", ud), -int32(unix.ECANCELED), false)
	writeAll(t, b, []byte("late"))
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
		h.poll(5 * time.Millisecond)
	}
	if n, _, _ := unix.Recvfrom(a, buf, unix.MSG_DONTWAIT); n != 4 {
		t.Fatalf("the canceled recv was armed on the new ring: the peer's bytes were taken (read %d)", n)
	}
	if len(h.of(ud)) != 1 || h.live(ud) || !h.live(keep) {
		t.Fatalf("completions %v; canceled op live %v, other op live %v", h.of(ud), h.live(ud), h.live(keep))
	}
	writeAll(t, a, []byte("moved"))
	wantCQE(t, "the recv moved", h.final("moved recv", keep), 5, false)
}
