//go:build linux

package loop

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// The driver contract (the driver interface in driver.go, and
// docs/op-lifecycle.md) is tested once, here, the way testing/fstest.TestFS
// tests a file system: testDriverContract runs every case against a
// harness made by its caller, and TestDriverContract (contract_kinds_test.go)
// calls it for epoll, for uring on the running kernel and for uring under
// each kernel profile. The cases never ask which backend they run on; what
// may differ is in driverKind, or in Features. The backend files keep only
// the tests of what one backend does and the other cannot.

// driverKind is what varies by backend.
type driverKind struct {
	name      string      // "epoll", "uring", "uring/kernel=6.1"
	be        Backend     // what features().Backend must say
	kernel    ring.Kernel // the profile the driver keeps to (zero: the running kernel)
	open      func(driverConfig) (driver, error)
	skip      func(testing.TB) // skips where the backend cannot run
	errClosed error            // what the driver's methods return after close
	// recvBufYields: a provided-buffer receive that finds the pool empty
	// waits for a buffer instead of ending with -ENOBUFS (epoll), so a
	// multishot one stays armed until end of stream.
	recvBufYields bool
	// handle returns the fd of the driver's current instance (the ring,
	// the epoll instance), which rebuild replaces and closes.
	handle func(driver) int
	// idle reports what the driver still holds once no op is live ("" if
	// nothing).
	idle func(driver) string
}

// harnessOpt edits a harness's driver: it is called with d nil on the
// config before the driver is made, then with the driver before start.
type harnessOpt func(cfg *driverConfig, d driver)

// withBufs sets the provided-buffer pool.
func withBufs(count, size uint32) harnessOpt {
	return func(cfg *driverConfig, d driver) {
		if d == nil {
			cfg.bufCount, cfg.bufSize = count, size
		}
	}
}

// cqe is one completion the harness saw, in delivery order.
type cqe struct {
	ud    uint64
	tag   opTag
	res   int32
	flags uint32
	data  []byte // a copy of the provided-buffer bytes
	quar  bool   // Completion.Quarantined
	at    time.Time
}

func (c cqe) more() bool { return c.flags&ring.CQEFMore != 0 }

func (c cqe) String() string {
	return fmt.Sprintf("{%v res=%d (%v) flags=%#x len=%d}", c.tag, c.res, ring.Errno(c.res), c.flags, len(c.data))
}

// driverHarness drives one started driver the way the loop does: ops come
// from an op table, the harness is the completion sink, calls each op's
// Completer and frees its record on its final completion, and every driver
// method but wake is called from the test goroutine, locked to its thread
// (the ring's single issuer).
type driverHarness struct {
	tb  testing.TB
	k   driverKind
	d   driver
	tab *opTable
	max int   // completions per poll; 0: all
	log []cqe // every completion, in delivery order

	stale      int  // completions naming no live op
	allowStale bool // else a stale completion fails the test

	quarantined, quarantinedBytes uint64 // abandoned ops and their bytes
	allowAbandon                  bool   // else an abandoned op fails the test

	closed bool       // the test closed the driver itself
	c      Completion // reused, so delivering allocates nothing
}

// contractConfig is the driver configuration of the driver tests: a
// locked thread, whatever RINGLOOP says. The shared-thread ring differs by
// design (no single issuer, single-shot receives, the eventfd always
// signalled); the group-level suites cover it under RINGLOOP=thread=shared.
func contractConfig(tb testing.TB, k ring.Kernel) driverConfig {
	return driverConfig{
		name:        "ringloop-t-0",
		ringEntries: 64,
		bufCount:    16,
		bufSize:     4096,
		dgramCount:  16,
		dgramSize:   4096,
		logger:      slog.New(slog.NewTextHandler(logWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		kernel:      k,
	}
}

// newDriverHarness checks for leaks and hangs, locks the calling goroutine
// to its thread until the test ends, and makes and starts a driver of kind
// k with its op table, which the driver has from its config before it is
// made (the uring driver looks ops up there to re-arm them). Create every
// fd of the test after it, so the leak check sees them closed.
func newDriverHarness(tb testing.TB, k driverKind, opts ...harnessOpt) *driverHarness {
	tb.Helper()
	if k.skip != nil {
		k.skip(tb)
	}
	testutil.CheckLeaks(tb)
	testutil.Watchdog(tb, 60*time.Second)
	runtime.LockOSThread()
	tb.Cleanup(runtime.UnlockOSThread)
	h := &driverHarness{tb: tb, k: k, tab: newOpTable(0), max: 64}
	cfg := contractConfig(tb, k.kernel)
	cfg.ops = h.tab
	for _, o := range opts {
		o(&cfg, nil)
	}
	d, err := k.open(cfg)
	if err != nil {
		tb.Fatalf("open %s driver: %v", k.name, err)
	}
	h.d = d
	tb.Cleanup(h.finish)
	for _, o := range opts {
		o(&cfg, d)
	}
	if err := d.start(); err != nil {
		tb.Fatalf("start: %v", err)
	}
	if f := d.features(); f.Backend != k.be || f.Kernel != k.kernel.String() {
		tb.Fatalf("%s driver reports backend %v, kernel profile %q", k.name, f.Backend, f.Kernel)
	}
	return h
}

// finish checks the driver's counters and, when no op is live, that it
// holds nothing, then closes it.
func (h *driverHarness) finish() {
	if h.closed {
		return
	}
	var s Stats
	h.d.counters(&s)
	if s.LostCompletions != 0 || s.BufferMisuse != 0 {
		h.tb.Errorf("%s: %d completions lost, %d naming a buffer not the kernel's", h.k.name, s.LostCompletions, s.BufferMisuse)
	}
	if h.k.idle != nil && h.tab.inFlight == 0 && !h.tb.Failed() {
		if what := h.k.idle(h.d); what != "" {
			h.tb.Errorf("%s: no op live, but the driver holds %s", h.k.name, what)
		}
	}
	if err := h.d.close(); err != nil {
		h.tb.Errorf("close: %v", err)
	}
}

// close closes the driver (the test's own close, which finish then skips).
func (h *driverHarness) close() error {
	h.closed = true
	return h.d.close()
}

// complete implements completionSink, as the loop does: look the op up,
// keep the completion, call the Completer, free the record on the final
// completion.
func (h *driverHarness) complete(ud uint64, res int32, flags uint32, data []byte) {
	o := h.tab.lookup(ud)
	if o == nil {
		h.stale++
		if !h.allowStale {
			h.tb.Errorf("stale completion ud=%#x res=%d flags=%#x", ud, res, flags)
		}
		return
	}
	c := cqe{ud: ud, tag: o.tag, res: res, flags: flags, at: time.Now()}
	if data != nil {
		if int(res) != len(data) {
			h.tb.Errorf("%v: res %d but %d bytes of data", o.tag, res, len(data))
		}
		c.data = bytes.Clone(data)
	}
	h.log = append(h.log, c)
	h.c = Completion{Res: res, Flags: flags, Data: data}
	if o.completer != nil {
		o.completer.Complete(&h.c)
	}
	if flags&ring.CQEFMore == 0 {
		h.tab.release(o)
	}
}

// abandon implements completionSink, as IO.abandon: the record is
// quarantined and retired, and the Completer sees Quarantined.
func (h *driverHarness) abandon(ud uint64, res int32, flags uint32, extra uint64) {
	o := h.tab.lookup(ud)
	if o == nil {
		h.stale++
		h.tb.Errorf("abandoned op %#x is not live", ud)
		return
	}
	if !h.allowAbandon {
		h.tb.Errorf("%s driver abandoned op %v %#x (res %d)", h.k.name, o.tag, ud, res)
	}
	h.quarantined++
	h.quarantinedBytes += quarantine(o, extra)
	h.tab.retire(o)
	h.log = append(h.log, cqe{ud: ud, tag: o.tag, res: res, flags: flags, quar: true, at: time.Now()})
	h.c = Completion{Res: res, Flags: flags, Quarantined: true}
	if o.completer != nil {
		o.completer.Complete(&h.c)
	}
}

// tryStart allocates an op of tag, lets set fill it and submits it. A
// refused op is released again.
func (h *driverHarness) tryStart(tag opTag, set func(o *op)) (uint64, error) {
	h.tb.Helper()
	o := h.tab.alloc(tag)
	if set != nil {
		set(o)
	}
	ud := o.userData()
	if err := h.d.submit(o); err != nil {
		h.tab.release(o)
		return 0, err
	}
	if o.state != opInFlight {
		h.tb.Fatalf("submit %v left state %d, want opInFlight", tag, o.state)
	}
	return ud, nil
}

// start is tryStart failing the test on a refused op.
func (h *driverHarness) start(tag opTag, set func(o *op)) uint64 {
	h.tb.Helper()
	ud, err := h.tryStart(tag, set)
	if err != nil {
		h.tb.Fatalf("submit %v: %v", tag, err)
	}
	return ud
}

// poll polls once, and again after a signal interrupted the wait (the
// runtime's preemption signal does, now and then), summing what was
// delivered.
func (h *driverHarness) poll(timeout time.Duration) pollResult {
	h.tb.Helper()
	var sum pollResult
	for {
		r, err := h.d.poll(timeout, h.max, h)
		if err != nil {
			h.tb.Fatalf("poll: %v", err)
		}
		sum.completions += r.completions
		sum.woken = sum.woken || r.woken
		if !r.interrupted {
			sum.timedOut = r.timedOut
			return sum
		}
	}
}

// until polls until cond holds (10 s at most).
func (h *driverHarness) until(what string, cond func() bool) {
	h.tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.tb.Fatalf("timed out waiting for %s; %d completions, the last: %v",
				what, len(h.log), h.log[max(0, len(h.log)-8):])
		}
		h.poll(5 * time.Millisecond)
	}
}

// of returns the completions of ud, in order.
func (h *driverHarness) of(ud uint64) []cqe {
	var out []cqe
	for _, c := range h.log {
		if c.ud == ud {
			out = append(out, c)
		}
	}
	return out
}

// done reports whether ud has had its final completion.
func (h *driverHarness) done(ud uint64) bool {
	for _, c := range h.log {
		if c.ud == ud && !c.more() {
			return true
		}
	}
	return false
}

// final waits for ud's final completion and returns it.
func (h *driverHarness) final(what string, ud uint64) cqe {
	h.tb.Helper()
	h.until(what, func() bool { return h.done(ud) })
	cs := h.of(ud)
	return cs[len(cs)-1]
}

// waitN waits for n completions of ud and returns them all.
func (h *driverHarness) waitN(what string, ud uint64, n int) []cqe {
	h.tb.Helper()
	h.until(what, func() bool { return len(h.of(ud)) >= n })
	return h.of(ud)
}

// wakeWhenAsleep wakes the driver from another goroutine once the calling
// goroutine's thread, the harness's, sleeps in the driver's wait (after
// 10 s without, it fails the test and wakes it anyway).
func (h *driverHarness) wakeWhenAsleep(t *testing.T) {
	tid := unix.Gettid()
	go func() {
		if !testutil.Eventually(10*time.Second, func() bool { return testutil.Blocked(tid) }) {
			t.Errorf("the poll did not sleep in its wait within 10s")
		}
		if err := h.d.wake(); err != nil {
			t.Errorf("wake: %v", err)
		}
	}()
}

// quiet polls for d and fails if ud completes meanwhile.
func (h *driverHarness) quiet(what string, ud uint64, d time.Duration) {
	h.tb.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		h.poll(5 * time.Millisecond)
	}
	if cs := h.of(ud); len(cs) > 0 {
		h.tb.Fatalf("%s: completed early: %v", what, cs)
	}
}

// live reports whether ud names a live op.
func (h *driverHarness) live(ud uint64) bool { return h.tab.lookup(ud) != nil }

// cancel cancels the op ud names and marks it canceling, as IO.Cancel.
func (h *driverHarness) cancel(ud uint64) {
	h.tb.Helper()
	o := h.tab.lookup(ud)
	if o == nil {
		h.tb.Fatalf("cancel: op %#x not live", ud)
	}
	if err := h.d.cancel(o); err != nil {
		h.tb.Fatalf("cancel: %v", err)
	}
	if o.state == opInFlight {
		o.state = opCanceling
	}
}

// rebuild replaces the driver's instance and checks that the old one is
// closed. It returns how many ops it moved and how many reached their
// final completion during it (a real result the old instance had). The
// others live before it are those whose result the driver had already
// queued for the next poll.
func (h *driverHarness) rebuild() (moved, ended int) {
	h.tb.Helper()
	live, seen, old := h.tab.inFlight, len(h.log), h.k.handle(h.d)
	moved, err := h.d.rebuild(h.tab, h)
	if err != nil {
		h.tb.Fatalf("rebuild: %v", err)
	}
	for _, c := range h.log[seen:] {
		if !c.more() {
			ended++
		}
	}
	if moved+ended > live {
		h.tb.Fatalf("rebuild moved %d ops and ended %d, of %d live", moved, ended, live)
	}
	if now := h.k.handle(h.d); now == old {
		h.tb.Fatalf("rebuild kept instance fd %d", old)
	}
	if _, err := unix.FcntlInt(uintptr(old), unix.F_GETFD, 0); err != unix.EBADF {
		h.tb.Fatalf("the old instance's fd %d is still open: %v", old, err)
	}
	return moved, ended
}

// big reports whether the big stream cases run at full size: not under
// -short, nor under a kernel profile (the running kernel already moves the
// bytes; a profile changes how the driver arms, not what it moves).
func (h *driverHarness) big() bool { return !testing.Short() && h.k.kernel.IsZero() }

// uring and epoll return the driver, for the backend-only tests.
func (h *driverHarness) uring() *uringDriver { return h.d.(*uringDriver) }
func (h *driverHarness) epoll() *epollDriver { return h.d.(*epollDriver) }

func wantCQE(tb testing.TB, what string, c cqe, res int32, more bool) {
	tb.Helper()
	if c.res != res || c.more() != more {
		tb.Fatalf("%s: got %v, want res %d (%v), more %v", what, c, res, ring.Errno(res), more)
	}
}

// testDriverContract runs the driver contract's cases against the drivers
// mk makes. mk must return a started driver (newDriverHarness).
func testDriverContract(t *testing.T, mk mkHarness) {
	for _, c := range contractCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, mk) })
	}
}

// mkHarness makes a started driver of the kind under test.
type mkHarness func(tb testing.TB, opts ...harnessOpt) *driverHarness

type contractCase struct {
	name string
	run  func(t *testing.T, mk mkHarness)
}

// contractCases are the cases of the driver contract, in the order they
// run.
var contractCases = []contractCase{
	{"Nop", contractNop},
	{"PollMax", contractPollMax},
	{"PollZero", contractPollZero},
	{"Recv", contractRecv},
	{"Send", contractSend},
	{"Sendmsg", contractSendmsg},
	{"Connect", contractConnect},
	{"Close", contractClose},
	{"Shutdown", contractShutdown},
	{"WaitPrecision", contractWaitPrecision},
	{"AcceptMultishot", contractAcceptMultishot},
	{"AcceptEMFILE", contractAcceptEMFILE},
	{"Cancel", contractCancel},
	{"Wake", contractWake},
	{"InjectStall", contractInjectStall},
	{"RecvProvided", contractRecvProvided},
	{"RecvProvidedBlockingFd", contractRecvProvidedBlockingFd},
	{"Rebuild", contractRebuild},
	{"RebuildStream", contractRebuildStream},
	{"CloseTwice", contractCloseTwice},
	{"SteadyStateAllocs", contractSteadyStateAllocs},
}

// contractNop: a nop completes with 0 on a later poll, never from inside
// submit, and frees its record.
func contractNop(t *testing.T, mk mkHarness) {
	h := mk(t)
	ud := h.start(tagNop, nil)
	if len(h.log) != 0 {
		t.Fatalf("completion delivered from submit: %v", h.log)
	}
	r := h.poll(time.Second)
	if r.completions != 1 || r.timedOut || r.woken {
		t.Fatalf("poll: %+v", r)
	}
	wantCQE(t, "nop", h.of(ud)[0], 0, false)
	if h.live(ud) || h.tab.inFlight != 0 {
		t.Fatalf("nop record not freed: %d live", h.tab.inFlight)
	}
}

// contractPollMax: poll delivers at most max completions and keeps the
// rest, in order, for the next calls, which do not block.
func contractPollMax(t *testing.T, mk mkHarness) {
	h := mk(t)
	h.max = 3
	var uds []uint64
	for range 10 {
		uds = append(uds, h.start(tagNop, nil))
	}
	var got []int
	start := time.Now()
	for len(h.log) < 10 {
		got = append(got, h.poll(time.Second).completions)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("polls blocked %v with completions queued", el)
	}
	if fmt.Sprint(got) != "[3 3 3 1]" {
		t.Fatalf("completions per poll %v, want [3 3 3 1]", got)
	}
	for i, c := range h.log {
		if c.ud != uds[i] {
			t.Fatalf("completion %d is %#x, want %#x", i, c.ud, uds[i])
		}
	}
}

// contractPollZero: a poll with timeout 0 delivers what is ready without
// waiting (io_uring's DEFER_TASKRUN posts completions only in an enter
// that asks for them), and an empty one reports timedOut.
func contractPollZero(t *testing.T, mk mkHarness) {
	h := mk(t)
	a, b := testutil.SocketPair(t)
	ud := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = make([]byte, 8) })
	h.poll(0)
	writeAll(t, b, []byte("now")) // a socket pair: the recv is ready when the write returns
	if r := h.poll(0); r.completions != 1 || r.timedOut {
		t.Fatalf("poll(0) after the data arrived: %+v, %v; want the recv", r, h.log)
	}
	wantCQE(t, "recv", h.of(ud)[0], 3, false)
	if r := h.poll(0); r.completions != 0 || !r.timedOut {
		t.Fatalf("empty poll(0): %+v, want timedOut", r)
	}
}

// contractRecv: a recv completes with the bytes once they arrive, on a
// later poll (never from submit) when they are there already, two queued
// recvs are served in order, and end of stream gives 0.
func contractRecv(t *testing.T, mk mkHarness) {
	for _, p := range streamPairs {
		t.Run("net="+p.name, func(t *testing.T) {
			h := mk(t)
			a, b := p.pair(t)
			buf := make([]byte, 64)
			ud := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = buf })
			h.quiet("recv with no data", ud, 20*time.Millisecond)
			writeAll(t, b, []byte("hello"))
			wantCQE(t, "recv", h.final("recv", ud), 5, false)
			if string(buf[:5]) != "hello" {
				t.Fatalf("buf %q", buf[:5])
			}

			writeAll(t, b, []byte("world!"))
			testutil.WaitReadable(t, a, 10*time.Second)
			ud = h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = buf })
			if len(h.of(ud)) != 0 {
				t.Fatal("completion delivered from submit")
			}
			wantCQE(t, "recv ready", h.final("recv ready", ud), 6, false)
			if string(buf[:6]) != "world!" {
				t.Fatalf("buf %q", buf[:6])
			}

			// Two recvs queued on one fd share the bytes; which gets
			// the first ones is the backend's (TestEpollDriverRecvOrder).
			b1, b2 := make([]byte, 3), make([]byte, 3)
			ud1 := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = b1 })
			ud2 := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = b2 })
			h.poll(0)
			writeAll(t, b, []byte("abcdef"))
			wantCQE(t, "recv 1", h.final("recv 1", ud1), 3, false)
			wantCQE(t, "recv 2", h.final("recv 2", ud2), 3, false)
			if got := string(b1) + string(b2); got != "abcdef" && got != "defabc" {
				t.Fatalf("two queued recvs got %q and %q", b1, b2)
			}

			ud = h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = buf })
			if err := unix.Shutdown(b, unix.SHUT_WR); err != nil {
				t.Fatal(err)
			}
			wantCQE(t, "recv EOF", h.final("recv EOF", ud), 0, false)
		})
	}
}

// contractSend: when the peer does not read, a send completes with what
// the socket took (a short write), the next one waits for room, and
// everything resumes once the peer reads.
func contractSend(t *testing.T, mk mkHarness) {
	for _, p := range streamPairs {
		t.Run("net="+p.name, func(t *testing.T) {
			h := mk(t)
			a, b := p.pair(t)
			size := 32 << 20
			if !h.big() {
				size = 16 << 20 // still more than a loopback socket holds
			}
			want := pattern(size, 2)
			sent, shorts := 0, 0
			var pending uint64
			for pending == 0 {
				chunk := want[sent:]
				ud := h.start(tagSend, func(o *op) { o.fd = int32(a); o.buf = chunk })
				for end := time.Now().Add(50 * time.Millisecond); !h.done(ud) && time.Now().Before(end); {
					h.poll(5 * time.Millisecond)
				}
				if !h.done(ud) {
					pending = ud
					break
				}
				c := h.of(ud)[0]
				if c.res <= 0 {
					t.Fatalf("send: %v", c)
				}
				if int(c.res) < len(chunk) {
					shorts++
				}
				sent += int(c.res)
				if sent == len(want) {
					t.Fatalf("%d MiB went out with no reader", size>>20)
				}
			}
			if shorts == 0 {
				t.Fatalf("no short write before the socket filled")
			}
			done := make(chan []byte)
			go func() {
				got, err := readN(b, len(want), false)
				if err != nil {
					t.Error(err)
				}
				done <- got
			}()
			for {
				c := h.final("send after the reader started", pending)
				if c.res <= 0 {
					t.Fatalf("send: %v", c)
				}
				sent += int(c.res)
				if sent == len(want) {
					break
				}
				chunk := want[sent:]
				pending = h.start(tagSend, func(o *op) { o.fd = int32(a); o.buf = chunk })
			}
			if got := <-done; !bytes.Equal(got, want) {
				t.Fatalf("peer got a different stream (first difference at %d)", commonPrefix(got, want))
			}
		})
	}
}

// contractSendmsg: a sendmsg writes its buffers in order in one
// completion, empty ones keeping their place, with or without flags; to a
// peer that stopped reading it fails with -EPIPE (no SIGPIPE).
func contractSendmsg(t *testing.T, mk mkHarness) {
	for _, p := range streamPairs {
		for _, n := range []int{3, 12} {
			t.Run(fmt.Sprintf("net=%s/bufs=%d", p.name, n), func(t *testing.T) {
				h := mk(t)
				a, b := p.pair(t)
				var bufs [][]byte
				var want []byte
				for i := range n {
					s := []byte(fmt.Sprintf("<%d:%s>", i, bytes.Repeat([]byte{'x'}, i)))
					switch i {
					case 1:
						s = nil
					case 2:
						s = []byte{}
					}
					bufs = append(bufs, s)
					want = append(want, s...)
				}
				// The op keeps its own list, as IO.Sendmsg makes it: freeing the
				// record clears it.
				ud := h.start(tagSendmsg, func(o *op) { o.fd = int32(a); o.extras().bufs = append(o.extras().bufs[:0], bufs...) })
				wantCQE(t, "sendmsg", h.final("sendmsg", ud), int32(len(want)), false)
				if got := readFull(t, b, len(want)); !bytes.Equal(got, want) {
					t.Fatalf("got %q, want %q", got, want)
				}
				ud = h.start(tagSendmsg, func(o *op) {
					o.fd, o.arg = int32(a), unix.MSG_NOSIGNAL|unix.MSG_WAITALL
					o.extras().bufs = append(o.extras().bufs[:0], bufs[:2]...)
				})
				wantCQE(t, "sendmsg flags", h.final("sendmsg flags", ud), int32(len(bufs[0])), false)
				if got := readFull(t, b, len(bufs[0])); !bytes.Equal(got, bufs[0]) || len(got) == 0 {
					t.Fatalf("got %q, want %q", got, bufs[0])
				}
			})
		}
	}
	t.Run("epipe", func(t *testing.T) {
		h := mk(t)
		a, b := testutil.SocketPair(t)
		if err := unix.Shutdown(b, unix.SHUT_RDWR); err != nil {
			t.Fatal(err)
		}
		ud := h.start(tagSendmsg, func(o *op) { o.fd = int32(a); o.extras().bufs = [][]byte{[]byte("a"), []byte("b")} })
		wantCQE(t, "sendmsg", h.final("sendmsg", ud), -int32(unix.EPIPE), false)
	})
}

// contractConnect: connect on TCP (IPv4, IPv6), AF_UNIX path and abstract
// addresses; a refused one gives -ECONNREFUSED, an unknown family
// -EAFNOSUPPORT, an address too short for its family -EINVAL.
func contractConnect(t *testing.T, mk mkHarness) {
	connect := func(t *testing.T, h *driverHarness, fd int, sa unix.Sockaddr) cqe {
		t.Helper()
		var raw unix.RawSockaddrAny
		n := putSockaddr(&raw, sa)
		ud := h.start(tagConnect, func(o *op) { o.fd = int32(fd); o.extras().connectTo = raw; o.extras().connectToLen = n })
		return h.final("connect", ud)
	}
	t.Run("tcp4", func(t *testing.T) {
		h := mk(t)
		lfd, addr := testutil.ListenFd(t)
		fd := newSocket(t, unix.AF_INET)
		wantCQE(t, "connect", connect(t, h, fd, addr), 0, false)
		peer, err := unix.Getpeername(fd)
		if err != nil || peer.(*unix.SockaddrInet4).Port != addr.Port {
			t.Fatalf("peer %v, %v", peer, err)
		}
		nfd, _, err := unix.Accept(lfd)
		if err != nil {
			t.Fatalf("accept after connect: %v", err)
		}
		defer unix.Close(nfd)
		ud := h.start(tagSend, func(o *op) { o.fd = int32(fd); o.buf = []byte("hi") })
		wantCQE(t, "send", h.final("send", ud), 2, false)
		if got := readFull(t, nfd, 2); string(got) != "hi" {
			t.Fatalf("peer read %q", got)
		}
	})
	t.Run("refused", func(t *testing.T) {
		h := mk(t)
		probe := newSocket(t, unix.AF_INET)
		if err := unix.Bind(probe, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		sa, _ := unix.Getsockname(probe) // bound, not listening: refused
		fd := newSocket(t, unix.AF_INET)
		wantCQE(t, "connect", connect(t, h, fd, sa), -int32(unix.ECONNREFUSED), false)
	})
	t.Run("tcp6", func(t *testing.T) {
		h := mk(t)
		lfd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Skipf("no IPv6: %v", err)
		}
		t.Cleanup(func() { unix.Close(lfd) })
		if err := unix.Bind(lfd, &unix.SockaddrInet6{Addr: [16]byte{15: 1}}); err != nil {
			t.Skipf("no ::1: %v", err)
		}
		unix.Listen(lfd, 8)
		sa, _ := unix.Getsockname(lfd)
		fd := newSocket(t, unix.AF_INET6)
		wantCQE(t, "connect", connect(t, h, fd, sa), 0, false)
	})
	for _, name := range []string{"path", "@abstract"} {
		t.Run("unix="+name, func(t *testing.T) {
			h := mk(t)
			path := filepath.Join(t.TempDir(), "s")
			if name[0] == '@' {
				path = fmt.Sprintf("@ringloop-driver-test-%d", os.Getpid())
			}
			lfd := newSocket(t, unix.AF_UNIX)
			if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: path}); err != nil {
				t.Fatal(err)
			}
			unix.Listen(lfd, 8)
			fd := newSocket(t, unix.AF_UNIX)
			wantCQE(t, "connect", connect(t, h, fd, &unix.SockaddrUnix{Name: path}), 0, false)
		})
	}
	t.Run("family", func(t *testing.T) {
		h := mk(t)
		fd := newSocket(t, unix.AF_INET)
		ud := h.start(tagConnect, func(o *op) {
			o.fd = int32(fd)
			o.extras().connectTo.Addr.Family = unix.AF_APPLETALK
			o.extras().connectToLen = 16
		})
		wantCQE(t, "connect", h.final("connect", ud), -int32(unix.EAFNOSUPPORT), false)
	})
	t.Run("short", func(t *testing.T) {
		h := mk(t)
		fd := newSocket(t, unix.AF_INET)
		ud := h.start(tagConnect, func(o *op) {
			o.fd = int32(fd)
			o.extras().connectTo.Addr.Family = unix.AF_INET
			o.extras().connectToLen = 8
		})
		wantCQE(t, "connect", h.final("connect", ud), -int32(unix.EINVAL), false)
	})
}

// contractClose: a close op closes the fd and gives 0; closing a bad fd
// gives -EBADF.
func contractClose(t *testing.T, mk mkHarness) {
	h := mk(t)
	a, _ := testutil.SocketPair(t)
	fd := dupFd(t, a)
	ud := h.start(tagClose, func(o *op) { o.fd = int32(fd) })
	wantCQE(t, "close", h.final("close", ud), 0, false)
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("fd after the close op: %v, want EBADF", err)
	}
	ud = h.start(tagClose, func(o *op) { o.fd = int32(fd) })
	wantCQE(t, "close again", h.final("close again", ud), -int32(unix.EBADF), false)
}

// contractShutdown: shutdown(SHUT_WR) gives 0 and the peer's waiting recv
// sees end of stream; on a file it gives -ENOTSOCK.
func contractShutdown(t *testing.T, mk mkHarness) {
	for _, p := range streamPairs {
		t.Run("net="+p.name, func(t *testing.T) {
			h := mk(t)
			a, b := p.pair(t)
			recv := h.start(tagRecv, func(o *op) { o.fd = int32(b); o.buf = make([]byte, 8) })
			sd := h.start(tagShutdown, func(o *op) { o.fd = int32(a); o.arg = unix.SHUT_WR })
			wantCQE(t, "shutdown", h.final("shutdown", sd), 0, false)
			wantCQE(t, "recv", h.final("recv after shutdown", recv), 0, false)
			f, err := os.CreateTemp(t.TempDir(), "f")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sd = h.start(tagShutdown, func(o *op) { o.fd = int32(f.Fd()); o.arg = unix.SHUT_RDWR })
			wantCQE(t, "shutdown file", h.final("shutdown file", sd), -int32(unix.ENOTSOCK), false)
		})
	}
}

// contractWaitPrecision: a wait with a sub-millisecond part ends on time,
// not rounded up to the next millisecond; an unbounded wait after a timed
// one is not ended by the timer of the timed one.
func contractWaitPrecision(t *testing.T, mk mkHarness) {
	h := mk(t)
	const wait = 1500 * time.Microsecond
	var els []time.Duration
	for len(els) < 21 {
		start := time.Now()
		r := h.poll(wait)
		el := time.Since(start)
		if el < wait || !r.timedOut {
			t.Fatalf("poll(%v): %+v after %v", wait, r, el)
		}
		els = append(els, el)
	}
	slices.Sort(els)
	if med := els[len(els)/2]; med >= 1950*time.Microsecond {
		t.Fatalf("median wait %v for %v: rounded up to milliseconds?", med, wait)
	}
	h.poll(wait / 3)
	h.wakeWhenAsleep(t)
	if r := h.poll(-1); !r.woken {
		t.Fatalf("unbounded poll: %+v", r)
	}
}

// contractAcceptMultishot: one multishot accept yields a completion with
// F_MORE per connection (non-blocking, close-on-exec fds) and stays armed;
// cancel ends it with -ECANCELED. A single-shot accept completes once.
func contractAcceptMultishot(t *testing.T, mk mkHarness) {
	h := mk(t)
	lfd, addr := testutil.ListenFd(t)
	ud := h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	h.quiet("accept with no client", ud, 20*time.Millisecond)
	const conns = 12
	for range conns {
		testutil.Dial(t, addr)
	}
	for i, c := range h.waitN("accepts", ud, conns) {
		if c.res < 0 || !c.more() {
			t.Fatalf("accept %d: %v, want an fd with F_MORE", i, c)
		}
		fl, err := unix.FcntlInt(uintptr(c.res), unix.F_GETFL, 0)
		fdfl, err2 := unix.FcntlInt(uintptr(c.res), unix.F_GETFD, 0)
		unix.Close(int(c.res))
		if err != nil || err2 != nil || fl&unix.O_NONBLOCK == 0 || fdfl&unix.FD_CLOEXEC == 0 {
			t.Fatalf("accepted fd flags %#x fd flags %#x (%v, %v); want O_NONBLOCK, FD_CLOEXEC", fl, fdfl, err, err2)
		}
	}
	if !h.live(ud) {
		t.Fatal("multishot accept freed while armed")
	}
	h.cancel(ud)
	wantCQE(t, "canceled accept", h.final("accept end", ud), -int32(unix.ECANCELED), false)
	if n := len(h.of(ud)); n != conns+1 || h.live(ud) || h.tab.inFlight != 0 {
		t.Fatalf("%d completions (want %d), live %v, %d ops live", n, conns+1, h.live(ud), h.tab.inFlight)
	}

	// Single shot. (Not a subtest: the driver must stay on this thread.)
	ud = h.start(tagAccept, func(o *op) { o.fd = int32(lfd) })
	testutil.Dial(t, addr)
	c := h.final("single accept", ud)
	if c.res >= 0 {
		unix.Close(int(c.res))
	}
	if c.res < 0 || c.more() || len(h.of(ud)) != 1 {
		t.Fatalf("single accept: %v", h.of(ud))
	}
}

// contractAcceptEMFILE: running out of fds ends a multishot accept with
// -EMFILE (no F_MORE), so the layer above can back off.
func contractAcceptEMFILE(t *testing.T, mk mkHarness) {
	h := mk(t)
	lfd, addr := testutil.ListenFd(t)
	testutil.Dial(t, addr)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// One client waits already, so lower the limit before the op exists:
	// to the lowest free fd number.
	probe := dupFd(t, lfd)
	unix.Close(probe)
	lim := old
	lim.Cur = uint64(probe)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	ud := h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	c := h.final("accept under EMFILE", ud)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if c.res >= 0 {
		unix.Close(int(c.res))
	}
	wantCQE(t, "accept", c, -int32(unix.EMFILE), false)
}

// contractCancel: cancel ends a waiting op with -ECANCELED through a later
// poll (never from cancel itself), once however often it is asked; an op
// that already completed keeps its result; a multishot accept with
// connections queued delivers each accepted fd with F_MORE, then either
// -ECANCELED or, where the cancel came after a last single shot, that
// shot's real result, as its final completion.
func contractCancel(t *testing.T, mk mkHarness) {
	h := mk(t)
	a, _ := testutil.SocketPair(t)
	ud := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = make([]byte, 8) })
	h.cancel(ud)
	h.cancel(ud)
	if len(h.log) != 0 {
		t.Fatalf("completion delivered from cancel: %v", h.log)
	}
	wantCQE(t, "canceled recv", h.final("canceled recv", ud), -int32(unix.ECANCELED), false)
	h.poll(0)
	h.poll(0)
	if cs := h.of(ud); len(cs) != 1 || h.live(ud) {
		t.Fatalf("canceled recv: completions %v, live %v", cs, h.live(ud))
	}

	ud = h.start(tagNop, nil)
	h.cancel(ud)
	wantCQE(t, "canceled nop", h.final("canceled nop", ud), 0, false)
	h.poll(0)
	if cs := h.of(ud); len(cs) != 1 {
		t.Fatalf("canceled nop: %v", cs)
	}

	lfd, addr := testutil.ListenFd(t)
	testutil.Dial(t, addr)
	testutil.Dial(t, addr)
	testutil.WaitAcceptQueue(t, lfd, 2, 10*time.Second)
	ud = h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	h.cancel(ud)
	c := h.final("canceled accept", ud)
	cs := h.of(ud)
	for _, c := range cs {
		if c.res >= 0 {
			unix.Close(int(c.res))
		}
	}
	for _, c := range cs[:len(cs)-1] {
		if c.res < 0 || !c.more() {
			t.Fatalf("accept completions %v: before the final one, accepted fds with F_MORE", cs)
		}
	}
	if len(cs) > 3 || c.res < 0 && c.res != -int32(unix.ECANCELED) {
		t.Fatalf("accept completions %v: want at most the 2 connections, then -ECANCELED or an fd", cs)
	}
	if h.tab.inFlight != 0 {
		t.Fatalf("%d ops live", h.tab.inFlight)
	}
}

// contractWake: wake from another goroutine ends a blocking poll promptly;
// wakeups before a poll are sticky and coalesce into one woken poll; the
// next poll then runs its full timeout.
func contractWake(t *testing.T, mk mkHarness) {
	h := mk(t)
	h.wakeWhenAsleep(t)
	start := time.Now()
	if r := h.poll(10 * time.Second); !r.woken || time.Since(start) > 2*time.Second {
		t.Fatalf("poll %+v after %v, want woken promptly", r, time.Since(start))
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if err := h.d.wake(); err != nil {
					t.Errorf("wake: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if r := h.poll(10 * time.Second); !r.woken || r.timedOut {
		t.Fatalf("poll after 1600 wakes: %+v, want woken", r)
	}
	start = time.Now()
	if r := h.poll(20 * time.Millisecond); r.woken || !r.timedOut || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("poll after the wakeup was consumed: %+v after %v, want a plain timeout", r, time.Since(start))
	}
}

// contractInjectStall: stalled polls return at once with nothing, not even
// a completion that is ready, and timedOut false; the next poll delivers
// it.
func contractInjectStall(t *testing.T, mk mkHarness) {
	h := mk(t)
	ud := h.start(tagNop, nil)
	h.d.injectStall(3)
	start := time.Now()
	for i := range 3 {
		if r := h.poll(time.Second); r != (pollResult{}) {
			t.Fatalf("stalled poll %d: %+v, want empty", i, r)
		}
	}
	if el := time.Since(start); el > 500*time.Millisecond || len(h.log) != 0 {
		t.Fatalf("3 stalled polls took %v and delivered %v, want at once and nothing", el, h.log)
	}
	if r := h.poll(time.Second); r.completions != 1 || !h.done(ud) {
		t.Fatalf("poll after the stall: %+v", r)
	}
	if r := h.poll(20 * time.Millisecond); !r.timedOut {
		t.Fatalf("idle poll after the stall: %+v, want timedOut", r)
	}
}

// recvStream keeps a provided-buffer receive armed on fd, as the conn
// layer does: it arms it again after -ENOBUFS (no buffer was free) and
// after a final completion that still carried data. Every completion with
// data must name a buffer of the pool.
type recvStream struct {
	h    *driverHarness
	fd   int
	ud   uint64
	data []byte
	eof  bool
	errs []int32
	arms int
}

func (s *recvStream) arm() {
	s.ud = s.h.start(tagRecvBuf, func(o *op) { o.fd, o.multishot, o.completer = int32(s.fd), true, s })
	s.arms++
}

func (s *recvStream) Complete(c *Completion) {
	switch {
	case c.Res > 0:
		if n := s.h.d.features().BufCount; c.Flags&ring.CQEFBuffer == 0 || c.Flags>>ring.CQEBufferShift >= n {
			s.h.tb.Errorf("provided recv of %d bytes: flags %#x, want F_BUFFER and a buffer id below %d", c.Res, c.Flags, n)
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

// sendStream sends data over fd one SEND of at most chunk bytes at a time,
// continuing short writes from where they stopped, as the conn layer does.
type sendStream struct {
	h     *driverHarness
	fd    int
	data  []byte
	chunk int
	off   int
	done  bool
	errs  []int32
}

func (w *sendStream) next() {
	if w.off == len(w.data) {
		w.done = true
		return
	}
	p := w.data[w.off:min(w.off+w.chunk, len(w.data))]
	w.h.start(tagSend, func(o *op) { o.fd, o.buf, o.completer = int32(w.fd), p, w })
}

func (w *sendStream) Complete(c *Completion) {
	if c.Res <= 0 {
		w.errs = append(w.errs, c.Res)
		return
	}
	w.off += int(c.Res)
	w.next()
}

// contractRecvProvided: a provided-buffer receive delivers a byte stream of
// many MiB exactly and in order, one pool buffer per completion, then 0
// without F_MORE at end of stream. The pool is 8 buffers and poll takes 3
// completions at a time, so reads outpace delivery and the pool runs dry
// often: a backend whose receive waits for buffers (recvBufYields) keeps
// its multishot receive armed throughout; others end it with -ENOBUFS and
// it is armed again.
func contractRecvProvided(t *testing.T, mk mkHarness) {
	for _, p := range streamPairs {
		t.Run("net="+p.name, func(t *testing.T) {
			h := mk(t, withBufs(8, 4096))
			h.max = 3
			a, b := p.pair(t)
			nonblocking(t, a) // a blocking one: RecvProvidedBlockingFd
			total := 8 << 20
			if !h.big() {
				total = 1 << 20
			}
			want := pattern(total, 1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for off, step := 0, 1; off < len(want); step = step*3%65521 + 1 {
					end := min(off+step, len(want))
					if err := writeN(b, want[off:end]); err != nil {
						t.Error(err)
						return
					}
					off = end
				}
				unix.Shutdown(b, unix.SHUT_WR)
			}()
			s := &recvStream{h: h, fd: a}
			s.arm()
			h.until("provided recv EOF", func() bool { return s.eof || len(s.errs) > 0 })
			wg.Wait()
			if len(s.errs) > 0 {
				t.Fatalf("provided recv errors: %v", s.errs)
			}
			if !bytes.Equal(s.data, want) {
				t.Fatalf("stream differs: got %d bytes, want %d, first difference at %d",
					len(s.data), len(want), commonPrefix(s.data, want))
			}
			f := h.d.features()
			if h.live(s.ud) || h.k.recvBufYields && s.arms != 1 {
				t.Fatalf("after EOF: live %v; armed %d times", h.live(s.ud), s.arms)
			}
			t.Logf("%d MiB through %d×%d B buffers, %d arms", total>>20, f.BufCount, f.BufSize, s.arms)
		})
	}
}

// contractRecvProvidedBlockingFd: a provided-buffer receive on a blocking
// socket never blocks the loop thread in recv(2) (epoll makes every fd it
// is given non-blocking; io_uring needs no O_NONBLOCK): once a buffer's
// worth of bytes has come, its completion follows while the peer waits. A
// driver stuck in recv(2) is freed after 2 s by one more byte, and fails.
func contractRecvProvidedBlockingFd(t *testing.T, mk mkHarness) {
	h := mk(t, withBufs(8, 4096))
	a, b := testutil.SocketPair(t)
	s := &recvStream{h: h, fd: a}
	s.arm()
	h.poll(0)
	want := pattern(4096, 5)
	delivered := make(chan struct{})
	rescued := make(chan bool, 1)
	go func() {
		if err := writeN(b, want); err != nil {
			t.Error(err)
		}
		select {
		case <-delivered:
			rescued <- false
		case <-time.After(2 * time.Second):
			writeN(b, []byte{0})
			rescued <- true
		}
	}()
	h.until("a buffer's worth of bytes", func() bool { return len(s.data) >= len(want) || len(s.errs) > 0 })
	close(delivered)
	if <-rescued {
		t.Fatalf("the receive blocked the loop thread in recv(2) on a blocking fd until more bytes came (%d bytes, errors %v)", len(s.data), s.errs)
	}
	if len(s.errs) > 0 || !bytes.Equal(s.data, want) {
		t.Fatalf("received %d bytes (equal prefix %d), errors %v", len(s.data), commonPrefix(s.data, want), s.errs)
	}
}

// contractRebuild replaces the instance with ops of every kind in flight
// (recv, provided-buffer recv, multishot accept, a send blocked on a full
// socket, a connect still in SYN_SENT): every op moves, the rebuild
// delivers nothing of its own, and afterwards every op completes with the
// right result. A result the old instance had but nobody reaped, and a
// wakeup written just before, are not lost.
func contractRebuild(t *testing.T, mk mkHarness) {
	h := mk(t)
	a1, b1 := testutil.SocketPair(t)
	buf := make([]byte, 32)
	recv := h.start(tagRecv, func(o *op) { o.fd = int32(a1); o.buf = buf })

	a2, b2 := testutil.SocketPair(t)
	nonblocking(t, a2)
	s := &recvStream{h: h, fd: a2}
	s.arm()

	a3, b3 := testutil.SocketPair(t)
	early := make([]byte, 16)
	er := h.start(tagRecv, func(o *op) { o.fd = int32(a3); o.buf = early })

	lfd, addr := testutil.ListenFd(t)
	acc := h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })

	a5, b5 := testutil.SocketPair(t)
	filled := fillSocket(t, a5)
	payload := pattern(100<<10, 4)
	snd := h.start(tagSend, func(o *op) { o.fd = int32(a5); o.buf = payload })

	// A connect that cannot finish yet: the listener's accept queue
	// (backlog 0: one connection) is full, so its SYNs are dropped until
	// room is made (then the retransmission, after about 1 s, gets in).
	var conn uint64
	var slfd int
	if !testing.Short() {
		slfd = rawListener(t, 0)
		saddr, _ := unix.Getsockname(slfd)
		testutil.Dial(t, saddr.(*unix.SockaddrInet4)) // fills the queue
		cfd := newSocket(t, unix.AF_INET)
		conn = h.start(tagConnect, func(o *op) { o.fd = int32(cfd); o.extras().connectToLen = putSockaddr(&o.extras().connectTo, saddr) })
	}

	h.poll(0)
	writeAll(t, b2, []byte("before|"))
	h.until("provided recv before the rebuild", func() bool { return len(s.data) == 7 })
	waiting := []uint64{recv, er, acc, snd, conn}
	for _, ud := range waiting {
		if cs := h.of(ud); len(cs) != 0 {
			t.Fatalf("op completed before the rebuild: %v", cs)
		}
	}
	// A result for the old instance that nobody reaps, and a wakeup.
	writeAll(t, b3, []byte("early")) // a socket pair: ready when the write returns
	if err := h.d.wake(); err != nil {
		t.Fatal(err)
	}

	seen, live := len(h.log), h.tab.inFlight
	if moved, ended := h.rebuild(); moved+ended != live {
		t.Fatalf("rebuild moved %d ops and ended %d, of %d live with nothing queued", moved, ended, live)
	}
	for _, c := range h.log[seen:] {
		if c.ud != er {
			t.Fatalf("the rebuild delivered %v, of an op with nothing to report", c)
		}
	}
	if s.arms != 1 {
		t.Fatalf("provided recv armed %d times", s.arms)
	}
	if r := h.poll(5 * time.Second); !r.woken {
		t.Fatalf("first poll after the rebuild: %+v; the wakeup written before it was lost", r)
	}
	wantCQE(t, "recv with data before the rebuild", h.final("early recv", er), 5, false)
	if string(early[:5]) != "early" {
		t.Fatalf("early recv buffer %q", early[:5])
	}

	writeAll(t, b1, []byte("after-1"))
	wantCQE(t, "recv after the rebuild", h.final("recv", recv), 7, false)
	if string(buf[:7]) != "after-1" {
		t.Fatalf("recv buffer %q", buf[:7])
	}

	writeAll(t, b2, []byte("after-2"))
	h.until("provided recv after the rebuild", func() bool { return len(s.data) == 14 })
	if string(s.data) != "before|after-2" || len(s.errs) != 0 {
		t.Fatalf("provided recv stream %q, errors %v", s.data, s.errs)
	}

	testutil.Dial(t, addr)
	testutil.Dial(t, addr)
	for _, c := range h.waitN("accepts", acc, 2) {
		if c.res >= 0 {
			unix.Close(int(c.res))
		}
		if c.res < 0 || !c.more() {
			t.Fatalf("accept after the rebuild: %v", c)
		}
	}

	got := make(chan []byte, 1)
	go func() {
		b, err := readN(b5, len(filled)+len(payload), false)
		if err != nil {
			t.Errorf("drain: %v", err)
		}
		got <- b
	}()
	c := h.final("send", snd)
	if c.res <= 0 {
		t.Fatalf("send after the rebuild: %v", c)
	}
	if sent := int(c.res); sent < len(payload) {
		// A short write: send the rest, as the conn layer would.
		rest := h.start(tagSend, func(o *op) { o.fd = int32(a5); o.buf = payload[sent:] })
		wantCQE(t, "rest of the send", h.final("rest of send", rest), int32(len(payload)-sent), false)
	}
	if b := <-got; !bytes.Equal(b, append(filled, payload...)) {
		t.Fatalf("peer read %d bytes, want %d; equal prefix %d", len(b), len(filled)+len(payload),
			commonPrefix(b, append(filled, payload...)))
	}

	if conn != 0 {
		nfd, _, err := unix.Accept(slfd)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(nfd)
		wantCQE(t, "connect continued across the rebuild", h.final("connect", conn), 0, false)
	}

	h.wakeWhenAsleep(t)
	if r := h.poll(10 * time.Second); !r.woken {
		t.Fatalf("wake after the rebuild: %+v", r)
	}
}

// contractRebuildStream: byte streams through the driver arrive complete,
// unduplicated and in order while the instance is replaced again and again.
func contractRebuildStream(t *testing.T, mk mkHarness) {
	t.Run("every15th", func(t *testing.T) { rebuildAtStops(t, mk(t)) })
	t.Run("every2ndPoll", func(t *testing.T) { rebuildEveryOtherPoll(t, mk(t, withBufs(8, 16<<10))) })
}

// rebuildAtStops runs a 4 MiB stream each way over one TCP connection,
// the driver receiving into provided buffers and sending one SEND at a
// time, while the instance is replaced 15 times, and features and wake are
// called from another goroutine throughout. The inbound peer stops at
// each rebuild point until the rebuild is done, so the receive is idle
// (moved) while the send is mid-transfer (real results from the old
// instance).
func rebuildAtStops(t *testing.T, h *driverHarness) {
	client, server := testutil.TCPPair(t)
	nonblocking(t, server)
	size := 4 << 20
	if !h.big() {
		size = 1 << 20
	}
	in, out := pattern(size, 1), pattern(size, 2)
	const rebuildsWanted = 15

	s := &recvStream{h: h, fd: server}
	s.arm()
	w := &sendStream{h: h, fd: server, data: out, chunk: 64 << 10}
	w.next()

	// One token per rebuild. The peer waits for it at each rebuild point
	// (a timed pause is not enough: a loaded machine lets the peer run
	// ahead, and a receive that keeps finding data ends with -ENOBUFS, a
	// real result, instead of being moved).
	rebuilt := make(chan struct{}, rebuildsWanted)
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	go func() {
		rng := rand.New(rand.NewPCG(3, 4))
		seg := size / (rebuildsWanted + 1)
		stop := seg
		for off := 0; off < size; {
			if off == stop {
				select {
				case <-rebuilt:
				case <-quit:
					return
				}
				stop += seg
			}
			n := min(seg-off%seg, 1+rng.IntN(20000))
			if err := writeN(client, in[off:off+n]); err != nil {
				t.Errorf("peer write: %v", err)
				return
			}
			off += n
		}
		unix.Shutdown(client, unix.SHUT_WR)
	}()
	got := make(chan []byte, 1)
	go func() {
		b, err := readN(client, size, true)
		if err != nil {
			t.Errorf("peer read: %v", err)
		}
		got <- b
	}()

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if f := h.d.features(); f.Backend != h.k.be {
				t.Errorf("features during rebuilds: %+v", f)
				return
			}
			h.d.wake()
			time.Sleep(100 * time.Microsecond)
		}
	}()
	defer func() { close(stop); bg.Wait() }()

	rebuilds, migrated := 0, 0
	h.until("both streams", func() bool {
		if rebuilds < rebuildsWanted && len(s.data) >= (rebuilds+1)*size/(rebuildsWanted+1) {
			n, _ := h.rebuild()
			migrated += n
			rebuilds++
			rebuilt <- struct{}{}
		}
		return (s.eof || len(s.errs) > 0) && (w.done || len(w.errs) > 0)
	})
	if len(s.errs) > 0 || len(w.errs) > 0 {
		t.Fatalf("errors: recv %v, send %v", s.errs, w.errs)
	}
	if !bytes.Equal(s.data, in) {
		t.Fatalf("inbound: %d bytes, want %d; equal prefix %d", len(s.data), len(in), commonPrefix(s.data, in))
	}
	if b := <-got; !bytes.Equal(b, out) {
		t.Fatalf("outbound: %d bytes, want %d; equal prefix %d", len(b), len(out), commonPrefix(b, out))
	}
	if rebuilds != rebuildsWanted || migrated == 0 {
		t.Fatalf("%d rebuilds moved %d ops", rebuilds, migrated)
	}
	t.Logf("%d rebuilds moved %d ops; provided recv armed %d times", rebuilds, migrated, s.arms)
}

// rebuildEveryOtherPoll sends a 4 MiB stream through the driver to itself
// over TCP, replacing the instance after every second poll.
func rebuildEveryOtherPoll(t *testing.T, h *driverHarness) {
	cl, sv := testutil.TCPPair(t)
	nonblocking(t, cl, sv)
	size := 4 << 20
	if !h.big() {
		size = 1 << 20
	}
	want := pattern(size, 3)
	w := &sendStream{h: h, fd: cl, data: want, chunk: 32 << 10}
	w.next()
	s := &recvStream{h: h, fd: sv}
	s.arm()
	rebuilds := 0
	deadline := time.Now().Add(30 * time.Second)
	for polls := 1; len(s.data) < len(want) && len(s.errs) == 0 && len(w.errs) == 0 && !s.eof; polls++ {
		if time.Now().After(deadline) {
			t.Fatalf("stalled at %d of %d bytes", len(s.data), len(want))
		}
		h.poll(10 * time.Millisecond)
		if polls%2 == 0 {
			h.rebuild()
			rebuilds++
		}
	}
	if len(s.errs) > 0 || len(w.errs) > 0 || s.eof {
		t.Fatalf("recv errors %v, send errors %v, EOF %v", s.errs, w.errs, s.eof)
	}
	if !bytes.Equal(s.data, want) {
		t.Fatalf("stream differs at %d (got %d bytes)", commonPrefix(s.data, want), len(s.data))
	}
	if rebuilds < 5 {
		t.Fatalf("only %d rebuilds", rebuilds)
	}
	t.Logf("%d bytes across %d rebuilds; provided recv armed %d times", len(s.data), rebuilds, s.arms)
}

// contractCloseTwice: close, with ops in flight after a rebuild, releases
// every fd and mapping (the leak check), is idempotent, and every method
// but features fails afterwards with the backend's closed error.
func contractCloseTwice(t *testing.T, mk mkHarness) {
	h := mk(t)
	lfd, _ := testutil.ListenFd(t)
	a, _ := testutil.SocketPair(t)
	acc := h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	h.start(tagRecvBuf, func(o *op) { o.fd, o.multishot = int32(a), true })
	h.poll(0)
	h.rebuild()
	h.poll(0)
	if err := h.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := h.close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, h.k.errClosed) {
			t.Errorf("%s after close: %v, want %v", what, err, h.k.errClosed)
		}
	}
	closed("submit", h.d.submit(h.tab.alloc(tagNop)))
	closed("cancel", h.d.cancel(h.tab.lookup(acc)))
	_, err := h.d.poll(0, 1, h)
	closed("poll", err)
	closed("wake", h.d.wake())
	_, err = h.d.rebuild(h.tab, h)
	closed("rebuild", err)
}

// countSink frees records and counts completions, allocating nothing.
type countSink struct {
	tab  *opTable
	n    int
	last int32
}

func (s *countSink) complete(ud uint64, res int32, flags uint32, data []byte) {
	if o := s.tab.lookup(ud); o != nil && flags&ring.CQEFMore == 0 {
		s.tab.release(o)
	}
	s.n++
	s.last = res
}

func (s *countSink) abandon(ud uint64, res int32, flags uint32, extra uint64) {
	panic(fmt.Sprintf("driver abandoned op %#x (res %d)", ud, res))
}

// await polls into sink until it counted n completions (10 s at most).
func (h *driverHarness) await(sink *countSink, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for sink.n < n {
		if _, err := h.d.poll(time.Second, 64, sink); err != nil {
			h.tb.Fatalf("poll: %v", err)
		}
		if time.Now().After(deadline) {
			var live []string
			h.tab.each(func(o *op) { live = append(live, fmt.Sprintf("%v fd %d state %d", o.tag, o.fd, o.state)) })
			h.tb.Fatalf("%d of %d completions after 10 s; live ops: %v", sink.n, n, live)
		}
	}
}

// contractSteadyStateAllocs: once the tables have grown, a nop, a send
// and a recv, a sendmsg and a recv, a provided-buffer recv, and a wake
// with its poll allocate nothing.
func contractSteadyStateAllocs(t *testing.T, mk mkHarness) {
	h := mk(t)
	sink := &countSink{tab: h.tab}
	a, b := testutil.SocketPair(t)
	msg := []byte("ping-pong-ping-pong")
	rbuf := make([]byte, 64)
	gather := [][]byte{msg[:4], msg[4:9], msg[9:]}
	submit := func(tag opTag, fd int) *op {
		o := h.tab.alloc(tag)
		o.fd = int32(fd)
		switch tag {
		case tagSend:
			o.buf = msg
		case tagSendmsg:
			o.extras().bufs = append(o.extras().bufs[:0], gather...) // the op's own list, as IO.Sendmsg makes it
		case tagRecv:
			o.buf = rbuf
		case tagRecvBuf:
			o.multishot = true
		}
		if err := h.d.submit(o); err != nil {
			t.Fatalf("submit %v: %v", tag, err)
		}
		return o
	}
	var prov uint64
	cases := []struct {
		name string
		f    func()
	}{
		{"nop", func() {
			n := sink.n + 1
			submit(tagNop, -1)
			h.await(sink, n)
		}},
		{"send-recv", func() {
			n := sink.n + 2
			submit(tagSend, a)
			submit(tagRecv, b)
			h.await(sink, n)
		}},
		{"sendmsg-recv", func() {
			n := sink.n + 2
			submit(tagSendmsg, a)
			submit(tagRecv, b)
			h.await(sink, n)
		}},
		{"recv-provided", func() {
			if h.tab.lookup(prov) == nil { // ended (a single shot): arm again
				prov = submit(tagRecvBuf, b).userData()
			}
			n := sink.n + 1
			unix.Write(a, msg)
			h.await(sink, n)
		}},
		{"wake-poll", func() {
			h.d.wake()
			h.d.poll(time.Second, 64, sink)
		}},
	}
	for _, c := range cases {
		c.f() // grow the tables
		if n := testing.AllocsPerRun(200, c.f); n != 0 {
			t.Errorf("%s: %v allocs per round trip", c.name, n)
		}
	}
	if sink.last < 0 {
		t.Fatalf("last completion: %d (%v)", sink.last, ring.Errno(sink.last))
	}
}

// BenchmarkDriver measures a nop and a 64-byte send with its recv, each
// submitted and delivered through poll, on each backend (the running
// kernel).
func BenchmarkDriver(b *testing.B) {
	for _, k := range []driverKind{epollKind(), uringKind(ring.Kernel{})} {
		b.Run("Nop/backend="+k.be.String(), func(b *testing.B) {
			h := newDriverHarness(b, k)
			sink := &countSink{tab: h.tab}
			b.ReportAllocs()
			for b.Loop() {
				if err := h.d.submit(h.tab.alloc(tagNop)); err != nil {
					b.Fatal(err)
				}
				h.await(sink, sink.n+1)
			}
		})
		b.Run("PingPong/backend="+k.be.String(), func(b *testing.B) {
			h := newDriverHarness(b, k)
			sink := &countSink{tab: h.tab}
			x, y := testutil.SocketPair(b)
			msg, rbuf := make([]byte, 64), make([]byte, 64)
			b.SetBytes(64)
			b.ReportAllocs()
			for b.Loop() {
				s := h.tab.alloc(tagSend)
				s.fd, s.buf = int32(x), msg
				r := h.tab.alloc(tagRecv)
				r.fd, r.buf = int32(y), rbuf
				if h.d.submit(s) != nil || h.d.submit(r) != nil {
					b.Fatal("submit refused")
				}
				h.await(sink, sink.n+2)
			}
		})
	}
}

// Helpers the driver tests share: sockets, byte streams and addresses.

// logWriter sends a driver's log lines to the test log.
type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// streamPairs are the two stream transports every data op is checked on.
var streamPairs = []struct {
	name string
	pair func(testing.TB) (int, int)
}{
	{"tcp", testutil.TCPPair},
	{"unix", testutil.SocketPair},
}

// writeN writes all of p to the blocking fd; safe off the test goroutine.
func writeN(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func writeAll(tb testing.TB, fd int, p []byte) {
	tb.Helper()
	if err := writeN(fd, p); err != nil {
		tb.Fatalf("write: %v", err)
	}
}

// readN reads exactly n bytes from the blocking fd; safe off the test
// goroutine. slow pauses now and then, so that the sender's socket fills.
func readN(fd int, n int, slow bool) ([]byte, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, 64<<10)
	for i := 0; len(out) < n; i++ {
		k, err := unix.Read(fd, buf[:min(len(buf), n-len(out))])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if k == 0 {
			return out, io.ErrUnexpectedEOF
		}
		out = append(out, buf[:k]...)
		if slow && i%8 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return out, nil
}

func readFull(tb testing.TB, fd int, n int) []byte {
	tb.Helper()
	out, err := readN(fd, n, false)
	if err != nil {
		tb.Fatalf("read after %d of %d bytes: %v", len(out), n, err)
	}
	return out
}

// pattern returns n pseudo-random bytes: a lost, duplicated or reordered
// chunk of it cannot go unnoticed.
func pattern(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// commonPrefix returns how many leading bytes a and b share.
func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// fillSocket writes into fd (made non-blocking for the purpose) until its
// send buffer is full, and returns the bytes written.
func fillSocket(tb testing.TB, fd int) []byte {
	tb.Helper()
	if err := unix.SetNonblock(fd, true); err != nil {
		tb.Fatal(err)
	}
	defer unix.SetNonblock(fd, false)
	var sent []byte
	chunk := pattern(4096, 99)
	for {
		n, err := unix.Write(fd, chunk)
		if err == unix.EAGAIN {
			return sent
		}
		if err != nil {
			tb.Fatalf("fill: %v", err)
		}
		sent = append(sent, chunk[:n]...)
	}
}

// newSocket returns a new blocking stream socket closed by tb.Cleanup.
func newSocket(tb testing.TB, family int) int {
	tb.Helper()
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socket: %v", err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	return fd
}

// nonblocking sets O_NONBLOCK on fds, as the conn layer's sockets have it.
func nonblocking(tb testing.TB, fds ...int) {
	tb.Helper()
	for _, fd := range fds {
		if err := unix.SetNonblock(fd, true); err != nil {
			tb.Fatal(err)
		}
	}
}

// rawListener returns a blocking TCP listener on 127.0.0.1:0 with backlog.
func rawListener(tb testing.TB, backlog int) int {
	tb.Helper()
	fd := newSocket(tb, unix.AF_INET)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		tb.Fatal(err)
	}
	return fd
}

// dupFd returns a dup of fd that the test hands to a close op.
func dupFd(tb testing.TB, fd int) int {
	tb.Helper()
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("dup: %v", err)
	}
	return n
}

// putSockaddr encodes sa into raw and returns its length
// (sock.PutSockaddr, which cannot fail on the addresses these tests use).
func putSockaddr(raw *unix.RawSockaddrAny, sa unix.Sockaddr) uint32 {
	n, err := sock.PutSockaddr(raw, sa)
	if err != nil {
		panic(err)
	}
	return n
}
