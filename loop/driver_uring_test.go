//go:build linux

package loop

import (
	"bytes"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// These tests drive the uring driver directly, the way the loop does: an op
// table, a sink that looks completions up in it and frees slots on final
// completions, and the driver's methods called from one goroutine locked to
// its OS thread (the ring's single issuer).

// testSink is the loop's half of completionSink, reduced to what the
// driver contract needs.
type testSink struct {
	tab   *opTable
	stale int        // completions naming no live op
	c     Completion // reused, so delivering allocates nothing

	quarantined, quarantinedBytes uint64 // abandoned ops and their bytes
}

func (s *testSink) complete(ud uint64, res int32, flags uint32, data []byte) {
	o := s.tab.lookup(ud)
	if o == nil {
		s.stale++
		return
	}
	s.c = Completion{Res: res, Flags: flags, Data: data}
	if o.c != nil {
		o.c.Complete(&s.c)
	}
	if flags&ring.CQEFMore == 0 {
		s.tab.release(o)
	}
}

// abandon is the loop's quarantine path, as Loop.abandon: the record is
// quarantined and retired, and the Completer sees Quarantined.
func (s *testSink) abandon(ud uint64, res int32, flags uint32, extra uint64) {
	o := s.tab.lookup(ud)
	if o == nil {
		s.stale++
		return
	}
	s.quarantined++
	s.quarantinedBytes += quarantine(o, extra)
	s.tab.retire(o)
	s.c = Completion{Res: res, Flags: flags, Quarantined: true}
	if o.c != nil {
		o.c.Complete(&s.c)
	}
}

// rec is one completion as a recorder saw it.
type rec struct {
	res   int32
	flags uint32
	data  []byte
	quar  bool // Completion.Quarantined
	at    time.Time
}

func (r rec) more() bool { return r.flags&ring.CQEFMore != 0 }

// recorder is a Completer that keeps every completion (data copied).
type recorder struct{ got []rec }

func (r *recorder) Complete(c *Completion) {
	r.got = append(r.got, rec{res: c.Res, flags: c.Flags, data: bytes.Clone(c.Data), quar: c.Quarantined, at: time.Now()})
}

func (r *recorder) last() rec { return r.got[len(r.got)-1] }

// counter is a Completer that only counts, for allocation checks.
type counter struct{ n int }

func (c *counter) Complete(*Completion) { c.n++ }

// harness is one started driver with its table and sink.
type harness struct {
	tb   testing.TB
	d    *uringDriver
	tab  *opTable
	sink *testSink
}

func testDriverConfig(tb testing.TB) driverConfig {
	return driverConfig{
		name:        "ringloop-t-0",
		ringEntries: 64,
		bufCount:    16,
		bufSize:     4096,
		bufGroup:    7,
		logger:      slog.New(slog.NewTextHandler(logWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		wait:        testWaitMode(),
	}
}

// newHarness locks the calling goroutine to its thread (until the test
// ends), creates and starts a driver and checks for leaks at the end.
// edit, if given, changes the config or the driver before start.
func newHarness(tb testing.TB, edit ...func(*driverConfig, **uringDriver)) *harness {
	tb.Helper()
	testutil.SkipIfNoUring(tb)
	testutil.CheckLeaks(tb)
	testutil.Watchdog(tb, 60*time.Second)
	runtime.LockOSThread()
	tb.Cleanup(runtime.UnlockOSThread)
	cfg := testDriverConfig(tb)
	for _, e := range edit {
		e(&cfg, nil)
	}
	d, err := newUringDriver(cfg)
	if err != nil {
		tb.Fatalf("newUringDriver: %v", err)
	}
	tb.Cleanup(func() {
		if err := d.close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	for _, e := range edit {
		e(&cfg, &d)
	}
	if err := d.start(); err != nil {
		tb.Fatalf("start: %v", err)
	}
	tab := newOpTable(0)
	return &harness{tb: tb, d: d, tab: tab, sink: &testSink{tab: tab}}
}

// submit allocates an op of tag, lets set fill it, submits it and returns
// its user_data and recorder.
func (h *harness) submit(tag opTag, set func(o *op)) (uint64, *recorder) {
	h.tb.Helper()
	o := h.tab.alloc(tag)
	r := &recorder{}
	o.c = r
	if set != nil {
		set(o)
	}
	if err := h.d.submit(o); err != nil {
		h.tb.Fatalf("submit %v: %v", tag, err)
	}
	if o.state != opInFlight {
		h.tb.Fatalf("submit %v left state %d, want opInFlight", tag, o.state)
	}
	return o.userData(), r
}

// poll polls once, failing on errors.
func (h *harness) poll(timeout time.Duration) pollResult {
	h.tb.Helper()
	res, err := h.d.poll(timeout, 0, h.sink)
	if err != nil {
		h.tb.Fatalf("poll: %v", err)
	}
	return res
}

// until polls until cond holds, failing after 10 s.
func (h *harness) until(what string, cond func() bool) {
	h.tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.tb.Fatalf("timed out waiting for %s", what)
		}
		h.poll(20 * time.Millisecond)
	}
}

// waitN polls until r holds n completions.
func (h *harness) waitN(what string, r *recorder, n int) {
	h.tb.Helper()
	h.until(what, func() bool { return len(r.got) >= n })
}

// live reports whether ud names a live op.
func (h *harness) live(ud uint64) bool { return h.tab.lookup(ud) != nil }

// cancel cancels the op ud names.
func (h *harness) cancel(ud uint64) {
	h.tb.Helper()
	o := h.tab.lookup(ud)
	if o == nil {
		h.tb.Fatalf("cancel: op %#x not live", ud)
	}
	if err := h.d.cancel(o); err != nil {
		h.tb.Fatalf("cancel: %v", err)
	}
}

func wantRes(tb testing.TB, what string, got rec, res int32, more bool) {
	tb.Helper()
	if got.res != res || got.more() != more {
		tb.Fatalf("%s: res %d (%v) flags %#x; want res %d, more %v", what, got.res, ring.Errno(got.res), got.flags, res, more)
	}
}

// oldRecvStream keeps a provided-buffer receive armed on fd, as the conn layer
// does: it re-arms after -ENOBUFS (buffer ring ran dry) and after a final
// completion that still carried data.
type oldRecvStream struct {
	h    *harness
	fd   int
	ud   uint64
	data []byte
	eof  bool
	errs []int32
	arms int
}

func (s *oldRecvStream) arm() {
	o := s.h.tab.alloc(tagRecvBuf)
	o.fd, o.multishot = int32(s.fd), true
	o.c = s
	if err := s.h.d.submit(o); err != nil {
		s.h.tb.Fatalf("submit recv-provided: %v", err)
	}
	s.ud = o.userData()
	s.arms++
}

func (s *oldRecvStream) Complete(c *Completion) {
	switch {
	case c.Res > 0:
		if len(c.Data) != int(c.Res) {
			s.h.tb.Errorf("provided recv: res %d with %d bytes of data", c.Res, len(c.Data))
		}
		s.data = append(s.data, c.Data...)
	case c.Res == 0:
		s.eof = true
		return
	case c.Res == -int32(unix.ENOBUFS):
	default:
		s.errs = append(s.errs, c.Res)
		return
	}
	if !c.More() {
		s.arm()
	}
}

// TestUringDriverCancelInternals: the uring driver marks the op it cancels
// opCanceling itself (Loop.Cancel does it on epoll), so a completion of
// that op is never taken for its last re-armed shot, and it counts the
// ASYNC_CANCEL's own completion, which never reaches the sink.
func TestUringDriverCancelInternals(t *testing.T) {
	h := newDriverHarness(t, uringKind(ring.Kernel{}))
	d := h.uring()
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
	h := newHarness(t, func(_ *driverConfig, d **uringDriver) {
		if d != nil {
			(*d).wakeKind = wakePoll
		}
	})
	h.poll(0)
	if err := h.d.wake(); err != nil {
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
	h := newHarness(t, func(c *driverConfig, _ **uringDriver) { c.ringEntries = 4 })
	const n = 100
	seen := make(map[uint64]int)
	var recs []*recorder
	var uds []uint64
	for range n {
		ud, r := h.submit(tagNop, nil)
		uds = append(uds, ud)
		recs = append(recs, r)
	}
	res, err := h.d.poll(0, 10, h.sink)
	if err != nil {
		t.Fatal(err)
	}
	if res.completions != 10 {
		t.Fatalf("poll with max 10 delivered %d", res.completions)
	}
	total := 10
	h.until("all nops", func() bool {
		res, err := h.d.poll(0, 0, h.sink)
		if err != nil {
			t.Fatal(err)
		}
		total += res.completions
		return total >= n
	})
	for i, r := range recs {
		seen[uds[i]] += len(r.got)
	}
	for i, ud := range uds {
		if seen[ud] != 1 {
			t.Fatalf("nop %d completed %d times", i, seen[ud])
		}
	}
	if total != n || h.d.lostCQEs.Load() != 0 || h.sink.stale != 0 {
		t.Fatalf("delivered %d of %d, lost %d, stale %d", total, n, h.d.lostCQEs.Load(), h.sink.stale)
	}
}

// TestUringDriverStaleCQE releases slots before their completions arrive:
// the sink sees completions naming no live op and counts them; the driver
// neither crashes nor leaks the provided buffer.
func TestUringDriverStaleCQE(t *testing.T) {
	h := newHarness(t)
	o := h.tab.alloc(tagNop)
	if err := h.d.submit(o); err != nil {
		t.Fatal(err)
	}
	h.tab.release(o) // the loop lost track of it: an invariant break
	h.until("stale nop", func() bool { return h.sink.stale == 1 })

	client, server := testutil.TCPPair(t)
	ro := h.tab.alloc(tagRecvBuf)
	ro.fd, ro.multishot = int32(server), true
	if err := h.d.submit(ro); err != nil {
		t.Fatal(err)
	}
	h.tab.release(ro)
	// More messages than buffers: each stale completion still gives its
	// buffer back, or the kernel would run dry and end the receive.
	for i := range 40 {
		writeAll(t, client, []byte{byte(i)})
		h.until("stale recv", func() bool { return h.sink.stale == 2+i })
	}
}

func TestUringDriverSetupRefused(t *testing.T) {
	old := newRingFn
	t.Cleanup(func() { newRingFn = old })
	newRingFn = func(ring.Kernel, uint32, *ring.Params) (*ring.Ring, error) {
		return nil, &ring.SetupError{Errno: unix.EPERM}
	}
	_, err := newUringDriver(testDriverConfig(t))
	if !errors.Is(err, ring.ErrNotSupported) || !errors.Is(err, unix.EPERM) {
		t.Fatalf("newUringDriver with setup refused: %v; want ErrNotSupported and EPERM", err)
	}
	newRingFn = func(ring.Kernel, uint32, *ring.Params) (*ring.Ring, error) {
		return nil, &ring.SetupError{Errno: unix.EINVAL}
	}
	if _, err = newUringDriver(testDriverConfig(t)); errors.Is(err, ring.ErrNotSupported) || !errors.Is(err, unix.EINVAL) {
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
	_, err := newUringDriver(testDriverConfig(t))
	if !errors.Is(err, ring.ErrNotSupported) || !strings.Contains(err.Error(), "IORING_OP_NOP") {
		t.Fatalf("newUringDriver with an empty probe: %v; want ErrNotSupported naming IORING_OP_NOP", err)
	}
}

func TestUringDriverFeatures(t *testing.T) {
	h := newHarness(t)
	f := h.d.features()
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
	h := newHarness(t)
	h.d.rebuildSkipCancel = true
	h.d.rebuildTimeout = 50 * time.Millisecond
	a, b := testutil.SocketPair(t)
	buf := make([]byte, 16)
	ud, r := h.submit(tagRecv, func(o *op) { o.fd = int32(a); o.buf = buf })
	h.poll(0)
	n, err := h.d.rebuild(h.tab, h.sink)
	if err != nil || n != 0 {
		t.Fatalf("rebuild: %d, %v; want 0 ops moved", n, err)
	}
	if len(r.got) != 1 {
		t.Fatalf("%d completions for the unknown op, want 1", len(r.got))
	}
	wantRes(t, "op with unknown outcome", r.got[0], rebuildLostRes, false)
	if !r.got[0].quar || h.live(ud) || h.sink.quarantined != 1 || h.sink.quarantinedBytes != uint64(len(buf)) {
		t.Fatalf("given-up op: Quarantined %v, live %v, quarantined %d ops / %d bytes; want 1 op, %d bytes",
			r.got[0].quar, h.live(ud), h.sink.quarantined, h.sink.quarantinedBytes, len(buf))
	}
	// Its slot is never reused: the kernel may still write the record.
	_, _, slot := unpackUserData(ud)
	for range opChunk * 2 {
		if o := h.tab.alloc(tagNop); o.slot == slot {
			t.Fatalf("the given-up op's slot %d was reused", slot)
		}
	}
	// The new ring works, the old recv is gone: data stays in the socket.
	_, nr := h.submit(tagNop, nil)
	h.waitN("nop on the new ring", nr, 1)
	writeAll(t, b, []byte("z"))
	if err := h.d.wake(); err != nil {
		t.Fatal(err)
	}
	if res := h.poll(5 * time.Second); !res.woken || len(r.got) != 1 {
		t.Fatalf("poll: %+v, %d completions of the failed op", res, len(r.got))
	}
}
