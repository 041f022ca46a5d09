//go:build linux

package loop

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
)

// What only the epoll driver does; the driver contract (contract_test.go)
// covers the rest.

func TestEpollDriverFeatures(t *testing.T) {
	h := newDriverHarness(t, epollKind())
	if h.d.backend() != BackendEpoll {
		t.Fatalf("backend %v", h.d.backend())
	}
	f := h.d.features()
	if f.Backend != BackendEpoll || f.RingFeatures != 0 || f.SetupFlags != 0 || f.RecvBundle {
		t.Fatalf("features %+v", f)
	}
	if err := h.d.start(); err != nil {
		t.Fatalf("start: %v", err)
	}
}

// TestEpollDriverCloseWithdraws: a close op ends every op waiting on the fd
// with -ECANCELED before its own result, and closes the fd.
func TestEpollDriverCloseWithdraws(t *testing.T) {
	h := newDriverHarness(t, epollKind())
	a, _ := testutil.SocketPair(t)
	fd := dupFd(t, a)
	recv := h.start(tagRecv, func(o *op) { o.fd = int32(fd); o.buf = make([]byte, 8) })
	prov := h.start(tagRecvBuf, func(o *op) { o.fd = int32(fd) })
	// Fill the send buffer so a send waits.
	junk := make([]byte, 64<<10)
	for {
		if _, err := unix.Write(fd, junk); err == unix.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	send := h.start(tagSend, func(o *op) { o.fd = int32(fd); o.buf = junk })
	h.quiet("ops before close", send, 20*time.Millisecond)
	if len(h.log) != 0 {
		t.Fatalf("completions before close: %v", h.log)
	}
	cl := h.start(tagClose, func(o *op) { o.fd = int32(fd) })
	c := h.final("close", cl)
	wantCQE(t, "close", c, 0, false)
	if h.log[len(h.log)-1].ud != cl {
		t.Fatalf("close result is not last: %v", h.log)
	}
	for _, ud := range []uint64{recv, prov, send} {
		cs := h.of(ud)
		if len(cs) != 1 {
			t.Fatalf("completions %v", cs)
		}
		wantCQE(t, cs[0].tag.String(), cs[0], -int32(unix.ECANCELED), false)
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
	h := newDriverHarness(t, epollKind())
	a, b := testutil.SocketPair(t)
	bufs := make([][]byte, 4)
	uds := make([]uint64, len(bufs))
	for i := range bufs {
		bufs[i] = make([]byte, 2)
		uds[i] = h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = bufs[i] })
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
	h := newDriverHarness(t, epollKind())
	a, b := testutil.SocketPair(t)
	writeAll(t, b, []byte("x"))
	ud := h.start(tagRecv, func(o *op) { o.fd = int32(a); o.buf = make([]byte, 1) })
	h.poll(0)
	wantCQE(t, "recv", h.final("recv", ud), 1, false)

	writeAll(t, b, []byte("y")) // an edge nobody waits for
	start := time.Now()
	r := h.poll(60 * time.Millisecond)
	if el := time.Since(start); el < 60*time.Millisecond || !r.timedOut || r.completions != 0 {
		t.Fatalf("poll with an empty event: %+v after %v", r, el)
	}

	// Each edge comes while the poll sleeps in epoll_wait, once it went
	// back to sleep after the edge before (a thread woken but not yet
	// run still shows the wait, and two edges then make one wakeup): one
	// wakeup each, until the poll gives up and returns.
	tid := unix.Gettid() // the harness keeps to this thread
	done, returned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		slept := -1
		for range 4 * epollRewaits {
			asleep := testutil.Eventually(10*time.Second, func() bool {
				select {
				case <-returned:
					return true
				default:
					n := testutil.Sleeps(tid)
					if testutil.Blocked(tid) && (n > slept || n < 0) {
						slept = n
						return true
					}
					return false
				}
			})
			select {
			case <-returned:
				return
			default:
			}
			if !asleep {
				t.Errorf("the poll did not sleep again")
				return
			}
			unix.Write(b, []byte("z"))
		}
	}()
	start = time.Now()
	r = h.poll(5 * time.Second)
	el := time.Since(start)
	close(returned)
	<-done
	if el > 2*time.Second || r.timedOut || r.completions != 0 || r.woken {
		t.Fatalf("poll with only empty events: %+v after %v", r, el)
	}
}

// TestEpollDriverCloseClosesQueuedAccepts: close closes the fds of accepts
// whose completions were queued but never delivered (the harness's leak
// check sees them). The epoll driver accepts at submit, so the fd exists
// before any poll; io_uring posts it only in a poll, which delivers it.
func TestEpollDriverCloseClosesQueuedAccepts(t *testing.T) {
	h := newDriverHarness(t, epollKind())
	lfd, addr := testutil.ListenFd(t)
	testutil.Dial(t, addr)
	testutil.WaitAcceptQueue(t, lfd, 1, 10*time.Second)
	h.start(tagAccept, func(o *op) { o.fd = int32(lfd); o.multishot = true })
	if h.epoll().ready.n == 0 {
		t.Fatal("accept did not run at submit")
	}
	if err := h.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// epollEvents reads the events fd is registered for in the epoll instance
// epfd, from /proc/self/fdinfo.
func epollEvents(t *testing.T, epfd, fd int) uint32 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", epfd))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var tfd int
		var ev uint32
		if n, _ := fmt.Sscanf(line, "tfd: %d events: %x", &tfd, &ev); n == 2 && tfd == fd {
			return ev
		}
	}
	t.Fatalf("fd %d is not in epoll instance %d:\n%s", fd, epfd, b)
	return 0
}

// TestEpollDriverAsksForRoomOnlyWhileWaiting: an fd's registration asks
// for room to write (EPOLLOUT) only once a send found none; the send
// completes when room comes, and the first report of room that finds no
// send waiting drops EPOLLOUT again. So sends that go through at once, and
// the room each one frees later, never wake the loop.
func TestEpollDriverAsksForRoomOnlyWhileWaiting(t *testing.T) {
	h := newDriverHarness(t, epollKind())
	epfd := h.epoll().epollFd
	a, b := testutil.SocketPair(t)
	fd := a
	h.start(tagRecv, func(o *op) { o.fd = int32(fd); o.buf = make([]byte, 8) })
	msg := []byte("hello")
	ud := h.start(tagSend, func(o *op) { o.fd = int32(fd); o.buf = msg })
	h.poll(0)
	wantCQE(t, "send", h.final("send", ud), int32(len(msg)), false)
	if ev := epollEvents(t, epfd, fd); ev&unix.EPOLLOUT != 0 || ev&unix.EPOLLIN == 0 {
		t.Fatalf("after a send that went through: events %#x, want EPOLLIN without EPOLLOUT", ev)
	}

	// Fill the socket, so that the next send waits for room.
	junk := make([]byte, 64<<10)
	queued := 0
	for {
		n, err := unix.Write(fd, junk)
		if err == unix.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		queued += n
	}
	ud = h.start(tagSend, func(o *op) { o.fd = int32(fd); o.buf = msg })
	h.quiet("a send into a full socket", ud, 20*time.Millisecond)
	if ev := epollEvents(t, epfd, fd); ev&unix.EPOLLOUT == 0 {
		t.Fatalf("with a send waiting for room: events %#x, want EPOLLOUT", ev)
	}
	// The peer reads everything: the send completes.
	buf := make([]byte, 64<<10)
	got := 0
	for got < queued+len(msg) {
		if got >= queued {
			h.poll(10 * time.Millisecond)
		}
		unix.SetNonblock(b, true)
		n, err := unix.Read(b, buf)
		if err == unix.EAGAIN {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	h.until("the waiting send", func() bool { return h.done(ud) })
	wantCQE(t, "send", h.final("send", ud), int32(len(msg)), false)

	// Room reported now finds no send waiting: EPOLLOUT goes.
	ud = h.start(tagSend, func(o *op) { o.fd = int32(fd); o.buf = msg })
	h.poll(0)
	wantCQE(t, "send", h.final("send", ud), int32(len(msg)), false)
	if _, err := unix.Read(b, buf); err != nil {
		t.Fatal(err)
	}
	h.poll(20 * time.Millisecond)
	if ev := epollEvents(t, epfd, fd); ev&unix.EPOLLOUT != 0 {
		t.Fatalf("after room nobody waited for: events %#x, want no EPOLLOUT", ev)
	}
}
