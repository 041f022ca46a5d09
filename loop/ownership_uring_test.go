//go:build linux

package loop

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// Tests of who owns memory shared with the kernel (docs/op-lifecycle.md,
// "Memory and the kernel's final word"), on the uring driver.

// rawProvidedRecv receives once on fd from the driver's buffer group with
// an SQE of the test's own (not through the op table) and returns the
// real CQE the kernel posts.
func rawProvidedRecv(tb testing.TB, d *uringDriver, fd int, ud uint64) ring.CQE {
	tb.Helper()
	sqe, err := d.r.GetSQE()
	if err != nil {
		tb.Fatalf("GetSQE: %v", err)
	}
	sqe.PrepRecv(fd, nil, 0)
	sqe.SetBufferGroup(d.bufRing.Group())
	sqe.UserData = ud
	if _, err := d.r.Submit(); err != nil {
		tb.Fatalf("submit: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := d.r.WaitCQETimeout(100 * time.Millisecond)
		if err == nil {
			got := *c
			d.r.CQESeen()
			if got.UserData != ud {
				tb.Fatalf("unexpected CQE %+v", got)
			}
			return got
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no CQE for the raw receive: %v", err)
		}
	}
}

// TestUringDriverFailedRecvReturnsItsBuffer: a provided-buffer receive that
// fails after the kernel selected its buffer (res < 0 with F_BUFFER and the
// buffer id, as some kernels post) must give back that buffer, not
// buffer 0. Giving back the wrong one loses the right one and publishes
// the other twice, so the kernel hands one buffer to two receives at once.
// The failure CQE is a real one the kernel posted for a receive of one
// byte, with its result turned into -ECONNRESET (6.18 no longer posts
// F_BUFFER on failure); then the kernel is asked for every buffer of the
// ring and must hand each out exactly once.
func TestUringDriverFailedRecvReturnsItsBuffer(t *testing.T) {
	const nbufs = 4
	h, d := newUringHarness(t, withBufs(nbufs, 4096))
	a, b := testutil.SocketPair(t)
	send := func() { writeAll(t, b, []byte{'x'}) }

	// A table op stands for the receive whose completions the loop
	// delivers; the raw CQEs are rewritten to name it.
	deliver := func(c ring.CQE) cqe {
		o := h.tab.alloc(tagRecvBuf)
		o.fd, o.state, o.multishot = int32(a), opInFlight, true
		c.UserData = o.userData()
		d.deliver(&c, d.rings(), h)
		if cs := h.of(c.UserData); len(cs) != 1 {
			t.Fatalf("deliver: completions %v, want 1", cs)
		}
		return h.of(c.UserData)[0]
	}

	// Buffer 0 goes through the loop and back, so the next receive
	// selects a buffer other than 0.
	send()
	c0 := rawProvidedRecv(t, d, a, 1)
	bid0, ok := c0.BufferID()
	if c0.Res != 1 || !ok {
		t.Fatalf("first receive: %+v", c0)
	}
	deliver(c0)

	// The next receive selects another buffer, and fails.
	send()
	c1 := rawProvidedRecv(t, d, a, 2)
	bid1, ok := c1.BufferID()
	if c1.Res != 1 || !ok || bid1 == bid0 {
		t.Fatalf("second receive: %+v (first had buffer %d)", c1, bid0)
	}
	c1.Res = -int32(unix.ECONNRESET)
	got := deliver(c1)
	if got.res != c1.Res || got.data != nil {
		t.Fatalf("failed receive delivered as res %d with %d bytes; want %d, no data", got.res, len(got.data), c1.Res)
	}

	// The ring must now hold each buffer exactly once: nbufs receives get
	// nbufs distinct buffers, and one more finds the ring empty.
	seen := map[uint16]bool{}
	for i := range nbufs {
		send()
		c := rawProvidedRecv(t, d, a, uint64(10+i))
		bid, ok := c.BufferID()
		if c.Res != 1 || !ok {
			t.Fatalf("receive %d of %d: res %d (%v) flags %#x; want 1 byte in a buffer", i+1, nbufs, c.Res, ring.Errno(c.Res), c.Flags)
		}
		if seen[bid] {
			t.Fatalf("buffer %d handed out twice while held (buffers seen: %v): the failed receive gave back the wrong buffer", bid, seen)
		}
		seen[bid] = true
	}
	send()
	if c := rawProvidedRecv(t, d, a, 99); c.Res != -int32(unix.ENOBUFS) {
		bid, _ := c.BufferID()
		t.Fatalf("receive past the ring's %d buffers: res %d flags %#x (buffer %d); want ENOBUFS", nbufs, c.Res, c.Flags, bid)
	}
	if n := d.bufMisuse.Load(); n != 0 {
		t.Fatalf("buffer misuse counted %d times", n)
	}
}

// TestUringDriverRebuildBufRingRefused: when the new ring cannot register
// its provided-buffer ring (the old one could), rebuild fails cleanly: the
// old ring stays in use, the features do not change, and the armed
// provided-buffer receive keeps receiving. A later rebuild that can
// register it moves the receive over.
func TestUringDriverRebuildBufRingRefused(t *testing.T) {
	h, d := newUringHarness(t)
	client, server := testutil.SocketPair(t)
	s := &recvStream{h: h, fd: server}
	s.arm()
	h.poll(0)

	old, oldBR, feat := d.r, d.bufRing, d.features()
	refuse := true
	saved := newBufRingFn
	newBufRingFn = func(r *ring.Ring, bgid uint16, n, size uint32) (*ring.BufRing, error) {
		if refuse {
			return nil, unix.EINVAL
		}
		return saved(r, bgid, n, size)
	}
	t.Cleanup(func() { newBufRingFn = saved })

	n, err := d.rebuild(h.tab, h)
	if err == nil {
		t.Fatalf("rebuild without a buffer ring on the new ring succeeded (%d ops moved)", n)
	}
	t.Logf("refused rebuild: %v", err)
	if d.r != old || d.bufRing != oldBR || d.features() != feat {
		t.Fatalf("refused rebuild changed the driver: ring kept %v, buffer ring kept %v, features %+v (were %+v)",
			d.r == old, d.bufRing == oldBR, d.features(), feat)
	}
	msg := pattern(10<<10, 9)
	writeAll(t, client, msg[:5000])
	h.until("data after the refused rebuild", func() bool { return len(s.data) >= 5000 || len(s.errs) > 0 })

	refuse = false
	if n, err = d.rebuild(h.tab, h); err != nil || n != 1 {
		t.Fatalf("rebuild = %d, %v; want the receive moved", n, err)
	}
	writeAll(t, client, msg[5000:])
	h.until("data after the rebuild", func() bool { return len(s.data) >= len(msg) || len(s.errs) > 0 })
	if len(s.errs) > 0 || string(s.data) != string(msg) {
		t.Fatalf("received %d bytes (errors %v), want %d intact", len(s.data), s.errs, len(msg))
	}
}
