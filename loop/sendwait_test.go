package loop_test

import (
	"bytes"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// fullUnixPeer returns a Unix datagram socket connected to a peer that
// does not connect back, and the peer, whose receive queue holds n
// datagrams of 100 bytes and has no room for more: the sender's sends
// are refused (EAGAIN), which a socket pair's ends never are.
func fullUnixPeer(t *testing.T) (w, r, n int) {
	t.Helper()
	sa := &unix.SockaddrUnix{Name: fmt.Sprintf("@ringloop-sendwait-%d-%d", os.Getpid(), fullPeers.Add(1))}
	r, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(r) })
	if err := unix.Bind(r, sa); err != nil {
		t.Fatal(err)
	}
	w, err = unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(w) })
	if err := unix.Connect(w, sa); err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte{'f'}, 100)
	for {
		if err := unix.Send(w, msg, unix.MSG_DONTWAIT); err == unix.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if n++; n > 100000 {
			t.Fatal("the peer's queue never filled")
		}
	}
	return w, r, n
}

var fullPeers atomic.Int64

// TestSendToFullUnixPeer: SendTo with MSG_DONTWAIT on a Unix datagram
// socket whose peer's queue is full completes with -EAGAIN and sends
// nothing (no empty datagram reaches the peer); PollWritable waits until
// the peer has read one, and the datagram handed over again arrives
// whole. On both backends.
func TestSendToFullUnixPeer(t *testing.T) {
	forEachDgramMode(t, func(t *testing.T, b loop.Backend, opts []loop.Option) {
		testutil.CheckLeaks(t)
		g := newGroup(t, b, append([]loop.Option{loop.WithLoops(1)}, opts...)...)
		l := g.Loop(0)
		w, r, n := fullUnixPeer(t)
		payload := bytes.Repeat([]byte{'p'}, 200)
		sendRes := make(chan int32, 1)
		send := func() {
			runOn(t, l, func() {
				if _, err := l.IO().SendTo(w, payload, nil, unix.MSG_DONTWAIT, completerFunc(func(c *loop.Completion) { sendRes <- c.Res })); err != nil {
					t.Fatal(err)
				}
			})
		}
		send()
		select {
		case res := <-sendRes:
			if res != -int32(unix.EAGAIN) {
				t.Fatalf("SendTo to a full peer: %d, want -EAGAIN", res)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("SendTo with MSG_DONTWAIT to a full peer did not complete")
		}
		polled := make(chan int32, 1)
		runOn(t, l, func() {
			if _, err := l.IO().PollWritable(w, completerFunc(func(c *loop.Completion) { polled <- c.Res })); err != nil {
				t.Fatal(err)
			}
		})
		runOn(t, l, func() {}) // a turn later the peer is still full
		select {
		case res := <-polled:
			t.Fatalf("PollWritable completed (%#x) while the peer is full", res)
		default:
		}
		buf := make([]byte, 512)
		if k, err := unix.Read(r, buf); err != nil || k != 100 {
			t.Fatalf("read from the peer: %d, %v", k, err)
		}
		select {
		case res := <-polled:
			if res <= 0 || res&unix.POLLOUT == 0 {
				t.Fatalf("PollWritable: %#x, want POLLOUT", res)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("PollWritable did not complete once the peer read")
		}
		send()
		if res := <-sendRes; res != int32(len(payload)) {
			t.Fatalf("SendTo once the peer read: %d, want %d", res, len(payload))
		}
		for i := range n - 1 { // one was read above
			if k, err := unix.Read(r, buf); err != nil || k != 100 {
				t.Fatalf("datagram %d: %d bytes, %v", i, k, err)
			}
		}
		if k, err := unix.Read(r, buf); err != nil || !bytes.Equal(buf[:k], payload) {
			t.Fatalf("last datagram: %d bytes, %v", k, err)
		}
		if k, err := unix.Read(r, buf); err != unix.EAGAIN {
			t.Fatalf("a datagram more (%d bytes, %v): the refused send left something", k, err)
		}
	})
}

// TestPollWritableCanceled: a PollWritable on a socket that never becomes
// writable ends with -ECANCELED when canceled.
func TestPollWritableCanceled(t *testing.T) {
	forEachDgramMode(t, func(t *testing.T, b loop.Backend, opts []loop.Option) {
		testutil.CheckLeaks(t)
		g := newGroup(t, b, append([]loop.Option{loop.WithLoops(1)}, opts...)...)
		l := g.Loop(0)
		w, _, _ := fullUnixPeer(t)
		polled := make(chan int32, 1)
		var id loop.OpID
		runOn(t, l, func() {
			var err error
			if id, err = l.IO().PollWritable(w, completerFunc(func(c *loop.Completion) { polled <- c.Res })); err != nil {
				t.Fatal(err)
			}
		})
		runOn(t, l, func() {
			if err := l.IO().Cancel(id); err != nil {
				t.Error(err)
			}
		})
		select {
		case res := <-polled:
			if res != -int32(unix.ECANCELED) {
				t.Fatalf("canceled PollWritable: %d, want -ECANCELED", res)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("canceled PollWritable did not complete")
		}
	})
}
