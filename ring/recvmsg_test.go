//go:build linux

package ring_test

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// sockaddrPort decodes a raw IPv4 sockaddr's port (network order).
func sockaddrPort(name []byte) int { return int(name[2])<<8 | int(name[3]) }

func TestRecvmsgMultishot(t *testing.T) {
	r := newRing(t, 8, nil)
	a, b, aAddr, bAddr := testutil.UDPPair(t)
	const (
		bgid    = 3
		bufSize = 128
		nameLen = unix.SizeofSockaddrInet6
	)
	br, err := r.NewBufRing(bgid, 4, bufSize)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	msg := unix.Msghdr{Namelen: nameLen}
	sqe := getSQE(t, r)
	sqe.PrepRecvmsgMultishot(b, &msg, unix.MSG_TRUNC)
	sqe.SetBufferGroup(bgid)
	sqe.UserData = 9
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	room := bufSize - ring.SizeofRecvmsgOut - nameLen
	for i, size := range []int{1, 30, room, room + 1, 1000} {
		dgram := bytes.Repeat([]byte{byte('a' + i)}, size)
		if err := unix.Sendto(a, dgram, 0, bAddr); err != nil {
			t.Fatal(err)
		}
		c := reapOne(t, r)
		data, bid, ok := br.Take(&c)
		if !ok || !c.More() {
			t.Fatalf("datagram %d: %+v (%v)", i, c, c.Err())
		}
		h, name, _, payload, ok := ring.ParseRecvmsgOut(data, nameLen, 0)
		if !ok {
			t.Fatalf("datagram %d: %d bytes do not hold the header", i, len(data))
		}
		want := dgram
		trunc := size > room
		if trunc {
			want = dgram[:room]
		}
		if !bytes.Equal(payload, want) || int(h.PayloadLen) != size || (h.Flags&unix.MSG_TRUNC != 0) != trunc {
			t.Fatalf("datagram %d of %d B: payload %d B (len %d, flags %#x), want %d B, truncated %v",
				i, size, len(payload), h.PayloadLen, h.Flags, len(want), trunc)
		}
		if h.NameLen != unix.SizeofSockaddrInet4 || len(name) != unix.SizeofSockaddrInet4 || sockaddrPort(name) != aAddr.Port {
			t.Fatalf("datagram %d: source %d B, port %d; want port %d", i, h.NameLen, sockaddrPort(name), aAddr.Port)
		}
		br.Recycle(bid)
	}
	if _, _, _, _, ok := ring.ParseRecvmsgOut(make([]byte, 20), nameLen, 0); ok {
		t.Fatal("ParseRecvmsgOut accepted a buffer shorter than its header and name")
	}
}

// TestPutRecvmsgOut: a header written by PutRecvmsgOut parses back as
// the kernel's would.
func TestPutRecvmsgOut(t *testing.T) {
	var h [ring.SizeofRecvmsgOut + 4]byte
	ring.PutRecvmsgOut(h[:], ring.RecvmsgOut{NameLen: 0, PayloadLen: 4, Flags: unix.MSG_TRUNC})
	copy(h[ring.SizeofRecvmsgOut:], "abcd")
	if got, _, _, p, ok := ring.ParseRecvmsgOut(h[:], 0, 0); !ok || got.PayloadLen != 4 || got.Flags != unix.MSG_TRUNC || string(p) != "abcd" {
		t.Fatalf("PutRecvmsgOut/ParseRecvmsgOut round trip: %+v %q %v", got, p, ok)
	}
}
