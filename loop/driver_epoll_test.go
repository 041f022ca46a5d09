//go:build linux

package loop

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// The epoll driver is driven directly here: ops come from an opTable, the
// harness is the completion sink and releases a record on its final
// completion, as the loop does.

// epCQE is one completion the harness saw.
type epCQE struct {
	ud    uint64
	tag   opTag
	res   int32
	flags uint32
	data  []byte // copy of the provided-buffer bytes
	at    time.Time
}

func (c epCQE) more() bool { return c.flags&ring.CQEFMore != 0 }

func (c epCQE) String() string {
	return fmt.Sprintf("{%v res=%d flags=%#x len=%d}", c.tag, c.res, c.flags, len(c.data))
}

type epHarness struct {
	tb    testing.TB
	d     *epollDriver
	tab   *opTable
	cqes  []epCQE
	stale int
	max   int // completions per poll
}

// epConfig is a driver configuration with a small receive pool.
func epConfig(bufCount, bufSize uint32) driverConfig {
	return driverConfig{
		name:        "ringloop-test-0",
		ringEntries: 64,
		bufCount:    bufCount,
		bufSize:     bufSize,
		bufGroup:    1,
		logger:      slog.New(slog.DiscardHandler),
		wait:        testWaitMode(),
	}
}

// newEpHarness starts a leak check and a watchdog, then creates a driver;
// create every fd of the test after it, so the leak check sees them closed.
func newEpHarness(tb testing.TB, cfg ...driverConfig) *epHarness {
	tb.Helper()
	testutil.CheckLeaks(tb)
	testutil.Watchdog(tb, 60*time.Second)
	c := epConfig(16, 4096)
	if len(cfg) > 0 {
		c = cfg[0]
	}
	tab := newOpTable(0)
	c.ops = tab
	d, err := newEpollDriver(c)
	if err != nil {
		tb.Fatalf("newEpollDriver: %v", err)
	}
	tb.Cleanup(func() {
		if err := d.close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return &epHarness{tb: tb, d: d, tab: tab, max: 64}
}

func (h *epHarness) complete(ud uint64, res int32, flags uint32, data []byte) {
	o := h.tab.lookup(ud)
	if o == nil {
		h.stale++
		h.tb.Errorf("stale completion ud=%#x res=%d flags=%#x", ud, res, flags)
		return
	}
	c := epCQE{ud: ud, tag: o.tag, res: res, flags: flags, at: time.Now()}
	if data != nil {
		if int(res) != len(data) {
			h.tb.Errorf("%v: res %d but %d bytes of data", o.tag, res, len(data))
		}
		c.data = append([]byte(nil), data...)
	}
	if flags&ring.CQEFMore == 0 {
		h.tab.release(o)
	}
	h.cqes = append(h.cqes, c)
}

// start submits a new op of tag, set up by set.
func (h *epHarness) start(tag opTag, set func(o *op)) (*op, uint64) {
	h.tb.Helper()
	o := h.tab.alloc(tag)
	if set != nil {
		set(o)
	}
	ud := o.userData()
	if err := h.d.submit(o); err != nil {
		h.tb.Fatalf("submit %v: %v", tag, err)
	}
	return o, ud
}

// poll polls once, and again after a signal interrupted the wait (the
// runtime's preemption signal does, now and then), summing what was
// delivered.
func (h *epHarness) poll(timeout time.Duration) pollResult {
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
func (h *epHarness) until(what string, cond func() bool) {
	h.tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.tb.Fatalf("timed out waiting for %s; %d completions, the last: %v",
				what, len(h.cqes), h.cqes[max(0, len(h.cqes)-8):])
		}
		h.poll(5 * time.Millisecond)
	}
}

// of returns the completions of ud, in order.
func (h *epHarness) of(ud uint64) []epCQE {
	var out []epCQE
	for _, c := range h.cqes {
		if c.ud == ud {
			out = append(out, c)
		}
	}
	return out
}

// done reports whether ud has had its final completion.
func (h *epHarness) done(ud uint64) bool {
	for _, c := range h.cqes {
		if c.ud == ud && !c.more() {
			return true
		}
	}
	return false
}

// final waits for ud's final completion and returns it.
func (h *epHarness) final(what string, ud uint64) epCQE {
	h.tb.Helper()
	h.until(what, func() bool { return h.done(ud) })
	cs := h.of(ud)
	return cs[len(cs)-1]
}

// quiet polls for d and fails if ud completes meanwhile.
func (h *epHarness) quiet(what string, ud uint64, d time.Duration) {
	h.tb.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		h.poll(5 * time.Millisecond)
	}
	if cs := h.of(ud); len(cs) > 0 {
		h.tb.Fatalf("%s: completed early: %v", what, cs)
	}
}

func epWant(tb testing.TB, what string, c epCQE, res int32, more bool) {
	tb.Helper()
	if c.res != res || c.more() != more {
		tb.Fatalf("%s: got %v, want res %d more %v", what, c, res, more)
	}
}

func TestEpollDriverFeatures(t *testing.T) {
	h := newEpHarness(t)
	if h.d.backend() != BackendEpoll {
		t.Fatalf("backend %v", h.d.backend())
	}
	f := h.d.features()
	if f.Backend != BackendEpoll || !f.MultishotAccept || !f.MultishotRecv || f.BufRing || f.SendZC {
		t.Fatalf("features %+v", f)
	}
	if err := h.d.start(); err != nil {
		t.Fatalf("start: %v", err)
	}
}

// TestEpollDriverRecvProvidedNoPool: with no receive pool, a provided recv
// fails with -ENOBUFS, as io_uring does for an empty buffer group.
func TestEpollDriverRecvProvidedNoPool(t *testing.T) {
	h := newEpHarness(t, epConfig(0, 0))
	a, _ := testutil.SocketPair(t)
	_, ud := h.start(tagRecvBuf, func(o *op) { o.fd = int32(a) })
	epWant(t, "recv-provided", h.final("recv-provided", ud), -int32(unix.ENOBUFS), false)
}

// TestEpollDriverCloseWithdraws: a close op ends every op waiting on the fd
// with -ECANCELED before its own result, and closes the fd.
func TestEpollDriverCloseWithdraws(t *testing.T) {
	h := newEpHarness(t)
	a, _ := testutil.SocketPair(t)
	fd := dupFd(t, a)
	_, recv := h.start(tagRecv, func(o *op) { o.fd = int32(fd); o.buf = make([]byte, 8) })
	_, prov := h.start(tagRecvBuf, func(o *op) { o.fd = int32(fd) })
	_, pl := h.start(tagPoll, func(o *op) { o.fd = int32(fd); o.arg = unix.POLLIN; o.multishot = true })
	// Fill the send buffer so a send waits.
	junk := make([]byte, 64<<10)
	for {
		if _, err := unix.Write(fd, junk); err == unix.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	_, send := h.start(tagSend, func(o *op) { o.fd = int32(fd); o.buf = junk })
	h.quiet("ops before close", send, 20*time.Millisecond)
	if len(h.cqes) != 0 {
		t.Fatalf("completions before close: %v", h.cqes)
	}
	_, cl := h.start(tagClose, func(o *op) { o.fd = int32(fd) })
	c := h.final("close", cl)
	epWant(t, "close", c, 0, false)
	if h.cqes[len(h.cqes)-1].ud != cl {
		t.Fatalf("close result is not last: %v", h.cqes)
	}
	for _, ud := range []uint64{recv, prov, pl, send} {
		cs := h.of(ud)
		if len(cs) != 1 {
			t.Fatalf("completions %v", cs)
		}
		epWant(t, cs[0].tag.String(), cs[0], -int32(unix.ECANCELED), false)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("fd still open: %v", err)
	}
	if h.tab.inFlight != 0 {
		t.Fatalf("%d records live", h.tab.inFlight)
	}
}

// TestEpollDriverRecvOrder: recvs queued on one fd are served in the order
// they were submitted, each from the bytes after the previous one's. The
// contract leaves this order open (io_uring wakes the waiters of a socket
// newest first, and the conn layer keeps one recv per fd in flight); the
// epoll driver keeps a FIFO list of waiters per fd.
func TestEpollDriverRecvOrder(t *testing.T) {
	h := newEpHarness(t)
	a, b := testutil.SocketPair(t)
	bufs := make([][]byte, 4)
	uds := make([]uint64, len(bufs))
	for i := range bufs {
		bufs[i] = make([]byte, 2)
		_, uds[i] = h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = bufs[i] })
	}
	h.poll(0)
	writeAll(t, b, []byte("aabbccdd"))
	h.until("four recvs", func() bool { return h.done(uds[len(uds)-1]) })
	if got := bytes.Join(bufs, []byte("|")); string(got) != "aa|bb|cc|dd" {
		t.Fatalf("queued recvs got %q, want aa|bb|cc|dd", got)
	}
}

// TestEpollDriverEmptyEvents: readiness that completes nothing (data for
// an fd with no recv waiting) does not end a blocking poll early; a poll
// that keeps getting only such events returns early, empty-handed and not
// timed out, so the loop's stall detector can see an instance that spins.
func TestEpollDriverEmptyEvents(t *testing.T) {
	h := newEpHarness(t)
	a, b := testutil.SocketPair(t)
	writeAll(t, b, []byte("x"))
	_, ud := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = make([]byte, 1) })
	h.poll(0)
	epWant(t, "recv", h.final("recv", ud), 1, false)

	writeAll(t, b, []byte("y")) // an edge nobody waits for
	start := time.Now()
	r := h.poll(60 * time.Millisecond)
	if el := time.Since(start); el < 60*time.Millisecond || !r.timedOut || r.completions != 0 {
		t.Fatalf("poll with an empty event: %+v after %v", r, el)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 4 * epollRewaits {
			time.Sleep(2 * time.Millisecond)
			unix.Write(b, []byte("z"))
		}
	}()
	start = time.Now()
	r = h.poll(5 * time.Second)
	el := time.Since(start)
	<-done
	if el > 2*time.Second || r.timedOut || r.completions != 0 || r.woken {
		t.Fatalf("poll with only empty events: %+v after %v", r, el)
	}
}

// abandon implements completionSink; the epoll driver never gives up an op.
func (h *epHarness) abandon(ud uint64, res int32, flags uint32, extra uint64) {
	h.tb.Errorf("epoll driver abandoned op %#x (res %d)", ud, res)
}

// TestEpollDriverCloseClosesQueuedAccepts: close closes the fds of accepts
// whose completions were queued but never delivered (the harness's leak
// check sees them). The epoll driver accepts at submit, so the fd exists
// before any poll; io_uring posts it only in a poll, which delivers it.
func TestEpollDriverCloseClosesQueuedAccepts(t *testing.T) {
	h := newDriverHarness(t, epollKind())
	lfd, addr := testutil.ListenFd(t)
	testutil.Dial(t, addr)
	time.Sleep(20 * time.Millisecond)
	h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	if h.epoll().ready.n == 0 {
		t.Fatal("accept did not run at submit")
	}
	if err := h.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}
