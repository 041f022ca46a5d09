//go:build linux

package sock_test

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/internal/testutil"
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
	n, err := sock.Sendmsg(a, msg, unix.MSG_NOSIGNAL)
	if err != nil || n != 15 {
		t.Fatalf("Sendmsg = %d, %v", n, err)
	}
	got := make([]byte, 64)
	m, err := unix.Read(b, got)
	if err != nil || string(got[:m]) != "one-two-three-4" {
		t.Fatalf("read %q, %v", got[:max(m, 0)], err)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if n, err := sock.Sendmsg(a, msg, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT); n != 15 || err != nil {
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
	if _, err := sock.Sendmsg(-1, msg, 0); err != unix.EBADF {
		t.Fatalf("bad fd: %v, want the bare EBADF", err)
	}
	// Fill the (non-blocking) pair: EAGAIN.
	big := make([]byte, 1<<16)
	msghdrOf(msg, iov, [][]byte{big})
	var err error
	for err == nil {
		_, err = sock.Sendmsg(a, msg, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
	}
	if !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("full socket: %v, want EAGAIN", err)
	}
	// Peer gone: EPIPE, and no SIGPIPE with MSG_NOSIGNAL.
	if err := unix.Shutdown(b, unix.SHUT_RDWR); err != nil {
		t.Fatal(err)
	}
	msghdrOf(msg, iov, [][]byte{buf})
	if _, err := sock.Sendmsg(a, msg, unix.MSG_NOSIGNAL); !errors.Is(err, unix.EPIPE) {
		t.Fatalf("closed peer: %v, want EPIPE", err)
	}
}

// sockaddrPort decodes a raw IPv4 sockaddr's port (network order).
func sockaddrPort(name []byte) int { return int(name[2])<<8 | int(name[3]) }

func TestSendmmsgRecvmmsg(t *testing.T) {
	a, b, aAddr, bAddr := testutil.UDPPair(t)
	var to [unix.SizeofSockaddrInet4]byte
	to[0], to[1] = byte(unix.AF_INET), 0 // little-endian family
	to[2], to[3] = byte(bAddr.Port>>8), byte(bAddr.Port)
	copy(to[4:8], bAddr.Addr[:])
	payloads := [][]byte{[]byte("one"), {}, []byte("three, which will not fit")}
	out := make([]sock.Mmsghdr, len(payloads))
	iovs := make([]unix.Iovec, len(payloads))
	for i, p := range payloads {
		if len(p) > 0 {
			iovs[i].Base = &p[0]
			iovs[i].SetLen(len(p))
		}
		out[i].Hdr = unix.Msghdr{Name: &to[0], Namelen: uint32(len(to)), Iov: &iovs[i], Iovlen: 1}
	}
	if n, err := sock.Sendmmsg(a, out, 0); n != 3 || err != nil {
		t.Fatalf("Sendmmsg = %d, %v", n, err)
	}
	bufs := make([][]byte, 4)
	names := make([][]byte, 4)
	in := make([]sock.Mmsghdr, 4)
	riov := make([]unix.Iovec, 4)
	for i := range in {
		bufs[i], names[i] = make([]byte, 8), make([]byte, unix.SizeofSockaddrInet6)
		riov[i].Base = &bufs[i][0]
		riov[i].SetLen(8)
		in[i].Hdr = unix.Msghdr{Name: &names[i][0], Namelen: uint32(len(names[i])), Iov: &riov[i], Iovlen: 1}
	}
	n, err := sock.Recvmmsg(b, in, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	if n != 3 || err != nil {
		t.Fatalf("Recvmmsg = %d, %v", n, err)
	}
	for i, p := range payloads {
		got := bufs[i][:min(int(in[i].Len), 8)]
		trunc := in[i].Hdr.Flags&unix.MSG_TRUNC != 0
		if int(in[i].Len) != len(p) || !bytes.Equal(got, p[:len(got)]) || trunc != (len(p) > 8) || sockaddrPort(names[i]) != aAddr.Port {
			t.Fatalf("datagram %d: len %d flags %#x %q from port %d; want %q", i, in[i].Len, in[i].Hdr.Flags, got, sockaddrPort(names[i]), p)
		}
	}
	if _, err := sock.Recvmmsg(b, in, unix.MSG_DONTWAIT); err != unix.EAGAIN {
		t.Fatalf("Recvmmsg on an empty socket: %v, want EAGAIN", err)
	}
}

// TestSendNowNeverWaits: SendNow and SendmsgNow deliver what fits and, on a
// blocking socket whose buffer is full, return EAGAIN instead of waiting;
// a peer that shut down reading gives EPIPE (with MSG_NOSIGNAL, no signal); an empty slice
// sends nothing.
func TestSendNowNeverWaits(t *testing.T) {
	a, b := testutil.SocketPair(t)
	if n, err := sock.SendNow(a, nil, unix.MSG_NOSIGNAL); n != 0 || err != nil {
		t.Fatalf("SendNow(nil) = %d, %v", n, err)
	}
	n, err := sock.SendNow(a, []byte("hello"), unix.MSG_NOSIGNAL)
	if err != nil || n != 5 {
		t.Fatalf("SendNow = %d, %v", n, err)
	}
	got := make([]byte, 16)
	if m, err := unix.Read(b, got); err != nil || string(got[:m]) != "hello" {
		t.Fatalf("peer read %q, %v", got[:m], err)
	}
	// Fill a's send buffer (the socket itself blocks).
	big := make([]byte, 1<<16)
	total := 0
	for i := 0; ; i++ {
		n, err := sock.SendNow(a, big, unix.MSG_NOSIGNAL)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil || i > 10000 {
			t.Fatalf("SendNow after %d B: %d, %v", total, n, err)
		}
		total += n
	}
	bufs := [][]byte{[]byte("x")}
	iov := make([]unix.Iovec, 1)
	msg := new(unix.Msghdr)
	msghdrOf(msg, iov, bufs)
	if _, err := sock.SendmsgNow(a, msg, unix.MSG_NOSIGNAL); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("SendmsgNow on a full socket: %v, want EAGAIN", err)
	}
	if err := unix.Shutdown(b, unix.SHUT_RD); err != nil {
		t.Fatal(err)
	}
	if _, err := sock.SendNow(a, []byte("x"), unix.MSG_NOSIGNAL); !errors.Is(err, unix.EPIPE) && !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("SendNow to a peer that stopped reading: %v, want EPIPE", err)
	}
}
