//go:build linux

package ring_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// msghdrOf builds a msghdr gathering bufs, in the caller's iovec array.
func msghdrOf(msg *unix.Msghdr, iov []unix.Iovec, bufs [][]byte) {
	for i, b := range bufs {
		iov[i] = unix.Iovec{Base: &b[0]}
		iov[i].SetLen(len(b))
	}
	*msg = unix.Msghdr{Iov: &iov[0]}
	msg.SetIovlen(len(bufs))
}

// TestSendmsgGathers: the buffers go out in iovec order, as one write, and
// the call allocates nothing.
func TestSendmsgGathers(t *testing.T) {
	a, b := testutil.SocketPair(t)
	bufs := [][]byte{[]byte("one-"), []byte("two-"), []byte("three-"), []byte("4")}
	iov := make([]unix.Iovec, len(bufs))
	msg := new(unix.Msghdr)
	msghdrOf(msg, iov, bufs)
	n, err := ring.Sendmsg(a, msg, unix.MSG_NOSIGNAL)
	if err != nil || n != 15 {
		t.Fatalf("Sendmsg = %d, %v", n, err)
	}
	got := make([]byte, 64)
	m, err := unix.Read(b, got)
	if err != nil || string(got[:m]) != "one-two-three-4" {
		t.Fatalf("read %q, %v", got[:max(m, 0)], err)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if n, err := ring.Sendmsg(a, msg, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT); n != 15 || err != nil {
			t.Fatalf("Sendmsg = %d, %v", n, err)
		}
		if m, err := unix.Read(b, got); m != 15 || err != nil {
			t.Fatalf("read %d, %v", m, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Sendmsg", allocs)
	}
}

// TestSendmsgErrno: failures return the bare errno.
func TestSendmsgErrno(t *testing.T) {
	a, b := testutil.SocketPair(t)
	buf := []byte("x")
	iov := make([]unix.Iovec, 1)
	msg := new(unix.Msghdr)
	msghdrOf(msg, iov, [][]byte{buf})
	if _, err := ring.Sendmsg(-1, msg, 0); err != unix.EBADF {
		t.Fatalf("bad fd: %v, want the bare EBADF", err)
	}
	// Fill the (non-blocking) pair: EAGAIN.
	big := make([]byte, 1<<16)
	msghdrOf(msg, iov, [][]byte{big})
	var err error
	for err == nil {
		_, err = ring.Sendmsg(a, msg, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
	}
	if !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("full socket: %v, want EAGAIN", err)
	}
	// Peer gone: EPIPE, and no SIGPIPE with MSG_NOSIGNAL.
	if err := unix.Shutdown(b, unix.SHUT_RDWR); err != nil {
		t.Fatal(err)
	}
	msghdrOf(msg, iov, [][]byte{buf})
	if _, err := ring.Sendmsg(a, msg, unix.MSG_NOSIGNAL); !errors.Is(err, unix.EPIPE) {
		t.Fatalf("closed peer: %v, want EPIPE", err)
	}
}
