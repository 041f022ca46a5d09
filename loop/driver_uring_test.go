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

// TestUringDriverCancelInternals: the uring driver marks the op it cancels
// opCanceling itself (Loop.Cancel does it on epoll), so a completion of
// that op is never taken for its last re-armed shot, and it counts the
// ASYNC_CANCEL's own completion, which never reaches the sink.
func TestUringDriverCancelInternals(t *testing.T) {
	h, d := newUringHarness(t)
	a, _ := testutil.SocketPair(t)
	lfd, _ := testutil.ListenFd(t)
	recv := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = make([]byte, 16) })
	acc := h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	h.poll(0)
	for i, ud := range []uint64{recv, acc} {
		o := h.tab.lookup(ud)
		if err := d.cancel(o); err != nil {
			t.Fatal(err)
		}
		if o.state != opCanceling {
			t.Fatalf("%v after cancel: state %d, want opCanceling until its final completion", o.tag, o.state)
		}
		wantCQE(t, o.tag.String(), h.final("canceled op", ud), -int32(unix.ECANCELED), false)
		h.until("the cancel's own completion", func() bool { return d.cancelCQEs == uint64(i+1) })
	}
	if len(h.log) != 2 || h.stale != 0 {
		t.Fatalf("completions %v: the cancels' own completions reached the sink", h.log)
	}
}

// TestUringDriverWakeByPoll runs the wakeup through the POLL_ADD fallback
// used where a READ of a non-blocking eventfd does not wait.
func TestUringDriverWakeByPoll(t *testing.T) {
	h, d := newUringHarness(t, func(_ *driverConfig, d driver) {
		if d != nil {
			d.(*uringDriver).wakeKind = wakePoll
		}
	})
	h.poll(0)
	if d.wakeKind != wakePoll {
		t.Skipf("the wakeup goes through wake kind %v (a shared-thread loop's netpoll wait)", d.wakeKind)
	}
	if err := d.wake(); err != nil {
		t.Fatal(err)
	}
	if res := h.poll(5 * time.Second); !res.woken {
		t.Fatalf("poll after wake: %+v, want woken", res)
	}
	if res := h.poll(30 * time.Millisecond); res.woken || !res.timedOut {
		t.Fatalf("second poll: %+v, want a plain timeout (counter consumed)", res)
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

// TestUringDriverMissingOp refuses a kernel whose probe lacks an opcode
// the op contract needs, naming it, with an error auto can fall back on.
func TestUringDriverMissingOp(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.CheckLeaks(t)
	old := getProbeFn
	t.Cleanup(func() { getProbeFn = old })
	getProbeFn = func() (*ring.Probe, error) { return new(ring.Probe), nil }
	_, err := newUringDriver(contractConfig(t, ring.Kernel{}))
	if !errors.Is(err, ring.ErrNotSupported) || !strings.Contains(err.Error(), "IORING_OP_NOP") {
		t.Fatalf("newUringDriver with an empty probe: %v; want ErrNotSupported naming IORING_OP_NOP", err)
	}
}

func TestUringDriverFeatures(t *testing.T) {
	_, d := newUringHarness(t)
	f := d.features()
	t.Logf("features: %+v", f)
	if f.Backend != BackendUring || f.RingFeatures == 0 || !f.BufRing {
		t.Fatalf("features %+v", f)
	}
	if f.SetupFlags&ring.SetupRDisabled != 0 {
		t.Fatal("ring still reported R_DISABLED after start")
	}
	if ring.SetupFlagSupported(ring.SetupSingleIssuer|ring.SetupDeferTaskrun) &&
		f.SetupFlags&(ring.SetupSingleIssuer|ring.SetupDeferTaskrun) != ring.SetupSingleIssuer|ring.SetupDeferTaskrun {
		t.Fatalf("setup flags %#x lack SINGLE_ISSUER|DEFER_TASKRUN", f.SetupFlags)
	}
	if ring.OpSupported(ring.OpSendZC) && !(f.ExtArg && f.MultishotAccept && f.MultishotRecv && f.SendZC) {
		t.Fatalf("6.0+ kernel but features %+v", f)
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
