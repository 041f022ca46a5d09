//go:build linux

package ring_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// rawSockaddr encodes an IPv4 address for CONNECT without package unsafe.
func rawSockaddr(sa *unix.SockaddrInet4) (*unix.RawSockaddrAny, uint32) {
	raw := new(unix.RawSockaddrAny)
	raw.Addr.Family = unix.AF_INET
	raw.Addr.Data[0] = int8(sa.Port >> 8)
	raw.Addr.Data[1] = int8(sa.Port)
	for i, b := range sa.Addr {
		raw.Addr.Data[2+i] = int8(b)
	}
	return raw, unix.SizeofSockaddrInet4
}

// byUserData indexes CQEs by user_data, failing on duplicates.
func byUserData(t *testing.T, cqes []ring.CQE) map[uint64]*ring.CQE {
	t.Helper()
	m := make(map[uint64]*ring.CQE, len(cqes))
	for i := range cqes {
		c := &cqes[i]
		if _, dup := m[c.UserData]; dup {
			t.Fatalf("user_data %d completed twice: %+v", c.UserData, cqes)
		}
		m[c.UserData] = c
	}
	return m
}

func TestMultishotAccept(t *testing.T) {
	r := newRing(t, 16, nil)
	lfd, addr := testutil.ListenFd(t)
	sqe := getSQE(t, r)
	sqe.PrepMultishotAccept(lfd, nil, nil, unix.SOCK_CLOEXEC)
	sqe.UserData = 1
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	const conns = 8
	for i := 0; i < conns; i++ {
		testutil.Dial(t, addr)
	}
	for i, c := range reap(t, r, conns, 10*time.Second) {
		if c.UserData != 1 || c.Res < 0 || !c.More() {
			t.Fatalf("accept CQE %d = %+v (%v): want an fd with F_MORE", i, c, c.Err())
		}
		unix.Close(int(c.Res))
	}
	// One more connection after the batch: the op is still armed.
	testutil.Dial(t, addr)
	c := reapOne(t, r)
	if c.Res < 0 || !c.More() {
		t.Fatalf("ninth accept = %+v", c)
	}
	unix.Close(int(c.Res))

	sqe = getSQE(t, r)
	sqe.PrepCancel64(1, 0)
	sqe.UserData = 2
	got := byUserData(t, reap(t, r, 2, 5*time.Second))
	if acc := got[1]; !errors.Is(acc.Err(), unix.ECANCELED) || acc.More() {
		t.Fatalf("final accept CQE = %+v: want ECANCELED without F_MORE", acc)
	}
	if got[2].Res != 0 {
		t.Fatalf("cancel CQE = %+v", got[2])
	}
}

func TestConnectSendRecvClose(t *testing.T) {
	r := newRing(t, 8, nil)
	lfd, addr := testutil.ListenFd(t)
	cfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			unix.Close(cfd)
		}
	}()

	// CONNECT and ACCEPT in the same submission.
	sa, salen := rawSockaddr(addr)
	sqe := getSQE(t, r)
	sqe.PrepConnect(cfd, sa, salen)
	sqe.UserData = 1
	sqe = getSQE(t, r)
	sqe.PrepAccept(lfd, nil, nil, unix.SOCK_CLOEXEC)
	sqe.UserData = 2
	got := byUserData(t, reap(t, r, 2, 5*time.Second))
	if got[1].Res != 0 {
		t.Fatalf("connect = %+v (%v)", got[1], got[1].Err())
	}
	sfd := int(got[2].Res)
	if sfd < 0 {
		t.Fatalf("accept = %+v (%v)", got[2], got[2].Err())
	}
	defer unix.Close(sfd)
	runtime.KeepAlive(sa)

	// SEND on one end, RECV on the other.
	msg := []byte("hello over io_uring")
	in := make([]byte, 64)
	sqe = getSQE(t, r)
	sqe.PrepRecv(sfd, in, 0)
	sqe.UserData = 3
	sqe = getSQE(t, r)
	sqe.PrepSend(cfd, msg, 0)
	sqe.UserData = 4
	got = byUserData(t, reap(t, r, 2, 5*time.Second))
	if got[4].Res != int32(len(msg)) {
		t.Fatalf("send = %+v (%v)", got[4], got[4].Err())
	}
	if n := got[3].Res; n != int32(len(msg)) || !bytes.Equal(in[:n], msg) {
		t.Fatalf("recv = %+v, %q", got[3], in[:max(n, 0)])
	}

	// CLOSE through the ring; the peer sees EOF.
	sqe = getSQE(t, r)
	sqe.PrepClose(cfd)
	sqe.UserData = 6
	if c := reapOne(t, r); c.UserData != 6 || c.Res != 0 {
		t.Fatalf("close = %+v (%v)", c, c.Err())
	}
	closed = true
	if _, err := unix.FcntlInt(uintptr(cfd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fd still open after CLOSE: %v", err)
	}
	if n, err := unix.Read(sfd, in); n != 0 || err != nil {
		t.Fatalf("peer read after close = %d, %v; want EOF", n, err)
	}
}

func TestCancelInflightRecv(t *testing.T) {
	r := newRing(t, 8, nil)
	_, server := testutil.TCPPair(t)
	buf := make([]byte, 128)
	sqe := getSQE(t, r)
	sqe.PrepRecv(server, buf, 0)
	sqe.UserData = 10
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	expectNoCQE(t, r, 20*time.Millisecond)
	sqe = getSQE(t, r)
	sqe.PrepCancel64(10, 0)
	sqe.UserData = 11
	got := byUserData(t, reap(t, r, 2, 5*time.Second))
	if !errors.Is(got[10].Err(), unix.ECANCELED) {
		t.Fatalf("canceled recv = %+v (%v), want ECANCELED", got[10], got[10].Err())
	}
	if got[11].Res != 0 {
		t.Fatalf("cancel = %+v (%v)", got[11], got[11].Err())
	}
	runtime.KeepAlive(buf)
}

// TestMultishotRecvBufRing drives a multishot RECV over a provided-buffer
// ring: exact bytes and buffer ids, recycling, ENOBUFS when the buffers run
// out, and no byte lost across re-arming.
func TestMultishotRecvBufRing(t *testing.T) {
	r := newRing(t, 8, nil)
	client, server := testutil.TCPPair(t)
	const (
		bgid    = 7
		nbufs   = 8
		bufSize = 64
	)
	br, err := r.NewBufRing(bgid, nbufs, bufSize)
	if err != nil {
		t.Fatal(err)
	}
	if br.Entries() != nbufs || br.BufSize() != bufSize || br.Group() != bgid {
		t.Fatalf("buffer ring %d × %d group %d", br.Entries(), br.BufSize(), br.Group())
	}
	arm := func(ud uint64) {
		sqe := getSQE(t, r)
		sqe.PrepRecvMultishot(server, 0)
		sqe.SetBufferGroup(bgid)
		sqe.UserData = ud
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
	}
	arm(1)

	// Phase 1: one message at a time, each buffer given back at once.
	for i := 0; i < 3*nbufs; i++ { // 3 laps of the ring: recycling works
		msg := []byte(fmt.Sprintf("message %02d of the recv test", i))
		if _, err := unix.Write(client, msg); err != nil {
			t.Fatal(err)
		}
		c := reapOne(t, r)
		data, bid, ok := br.Take(&c)
		if !ok || !c.More() || !bytes.Equal(data, msg) {
			t.Fatalf("recv %d = %+v, data %q: want %q with F_MORE", i, c, data, msg)
		}
		if id, has := c.BufferID(); !has || id != bid || int(bid) >= nbufs {
			t.Fatalf("buffer id %d/%v outside the ring", id, has)
		}
		br.Recycle(bid)
	}

	// Phase 2: more data than buffers, none given back: ENOBUFS ends the op.
	pattern := make([]byte, nbufs*bufSize+bufSize)
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	if _, err := unix.Write(client, pattern); err != nil {
		t.Fatal(err)
	}
	var got []byte
	var bids []uint16
	seenBid := make(map[uint16]bool)
	for i := 0; ; i++ {
		if i > 2*nbufs {
			t.Fatal("multishot recv never ran out of buffers")
		}
		c := reapOne(t, r)
		if c.Res < 0 {
			if !errors.Is(c.Err(), unix.ENOBUFS) || c.More() {
				t.Fatalf("terminal CQE = %+v (%v): want ENOBUFS without F_MORE", c, c.Err())
			}
			break
		}
		data, bid, ok := br.Take(&c)
		if !ok || seenBid[bid] {
			t.Fatalf("CQE %+v: buffer %d missing or reused before recycling", c, bid)
		}
		seenBid[bid] = true
		bids = append(bids, bid)
		got = append(got, data...)
	}
	if len(bids) != nbufs || !bytes.Equal(got, pattern[:len(got)]) {
		t.Fatalf("received %d bytes in %d buffers; prefix intact: %v", len(got), len(bids), bytes.Equal(got, pattern[:len(got)]))
	}

	// Give everything back, re-arm, and the rest of the stream arrives.
	for i, bid := range bids {
		br.Add(bid, i)
	}
	br.Advance(len(bids))
	arm(2)
	for len(got) < len(pattern) {
		c := reapOne(t, r)
		data, bid, ok := br.Take(&c)
		if !ok || c.UserData != 2 {
			t.Fatalf("after re-arm: %+v (%v)", c, c.Err())
		}
		got = append(got, data...)
		br.Recycle(bid)
	}
	if !bytes.Equal(got, pattern) {
		t.Fatal("stream corrupted across ENOBUFS and re-arm")
	}

	sqe := getSQE(t, r)
	sqe.PrepCancel64(2, 0)
	sqe.UserData = 3
	final := byUserData(t, reap(t, r, 2, 5*time.Second))
	if !errors.Is(final[2].Err(), unix.ECANCELED) || final[2].More() {
		t.Fatalf("canceled multishot recv = %+v", final[2])
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if br.Buf(0) != nil {
		t.Fatal("Buf after Close")
	}
}

func TestNewBufRingValidation(t *testing.T) {
	r := newRing(t, 4, nil)
	for _, tc := range []struct{ entries, size uint32 }{{0, 64}, {3, 64}, {65536, 64}, {8, 0}, {8, 1<<30 + 1}} {
		if br, err := r.NewBufRing(1, tc.entries, tc.size); err == nil {
			br.Close()
			t.Fatalf("NewBufRing(%d, %d) succeeded", tc.entries, tc.size)
		}
	}
	br, err := r.NewBufRing(1, 4, 32)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewBufRing(1, 4, 32); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("duplicate group: %v, want EEXIST", err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestRecvBundle receives with IORING_RECVSEND_BUNDLE (6.10): one
// completion for several buffers, which TakeBundle names in order and
// Bundle views as one slice when they lie together; every byte arrives in
// order across laps of the ring, whatever the kernel puts in each
// completion (the first receive of a bundle may take a single buffer).
func TestRecvBundle(t *testing.T) {
	r := newRing(t, 8, nil)
	if r.Params().Features&ring.FeatRecvSendBundle == 0 {
		t.Skip("kernel without IORING_FEAT_RECVSEND_BUNDLE (6.10)")
	}
	client, server := testutil.TCPPair(t)
	const (
		bgid    = 9
		nbufs   = 16
		bufSize = 256
	)
	br, err := r.NewBufRing(bgid, nbufs, bufSize)
	if err != nil {
		t.Fatal(err)
	}
	var sent, got []byte
	var bids []uint16
	multi, whole, pieces := 0, 0, 0
	for round := range 12 {
		msg := make([]byte, 700+round*97) // up to 1,767 bytes: 3 to 7 buffers
		for i := range msg {
			msg[i] = byte(round*31 + i*7)
		}
		if _, err := unix.Write(client, msg); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, msg...)
		for len(got) < len(sent) {
			sqe := getSQE(t, r)
			sqe.PrepRecv(server, nil, 0)
			sqe.IoPrio |= ring.RecvsendBundle
			sqe.SetBufferGroup(bgid)
			sqe.UserData = uint64(round)
			if _, err := r.Submit(); err != nil {
				t.Fatal(err)
			}
			c := reapOne(t, r)
			if c.Res <= 0 {
				t.Fatalf("round %d: bundle recv = %+v (%v)", round, c, c.Err())
			}
			var ok bool
			bids, ok = br.TakeBundle(&c, bids[:0])
			if !ok || len(bids) != (int(c.Res)+bufSize-1)/bufSize {
				t.Fatalf("round %d: %d bytes in %d buffers (ok %v)", round, c.Res, len(bids), ok)
			}
			if len(bids) > 1 {
				multi++
			}
			if v := br.Bundle(bids, int(c.Res)); v != nil {
				got = append(got, v...)
				whole++
			} else {
				pieces++
				left := int(c.Res)
				for _, bid := range bids {
					k := min(left, bufSize)
					got = append(got, br.Buf(bid)[:k]...)
					left -= k
				}
			}
			for i, bid := range bids {
				if !br.Held(bid) {
					t.Fatalf("buffer %d of the bundle not held", bid)
				}
				if round%2 == 1 {
					i = len(bids) - 1 - i // back in reverse: later bundles are scattered
				}
				br.Add(bid, i)
			}
			br.Advance(len(bids))
		}
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("received %d bytes, sent %d: not the same in order", len(got), len(sent))
	}
	if multi == 0 || whole == 0 || pieces == 0 {
		t.Fatalf("%d completions of several buffers, %d read as one slice, %d buffer by buffer: a path was not exercised", multi, whole, pieces)
	}
	if br.Misuse() != 0 {
		t.Fatalf("%d refused takes or recycles", br.Misuse())
	}
	// A completion naming buffers the caller holds already is refused
	// whole: nothing more is taken, and it is counted.
	c := ring.CQE{Res: 3 * bufSize, Flags: ring.CQEFBuffer | uint32(bids[0])<<ring.CQEBufferShift}
	held, ok := br.TakeBundle(&c, nil)
	if !ok || len(held) != 3 {
		t.Fatalf("TakeBundle of a fabricated 3-buffer completion: %v %v", held, ok)
	}
	if again, ok := br.TakeBundle(&c, nil); ok || len(again) != 0 || br.Misuse() != 1 {
		t.Fatalf("second TakeBundle of held buffers: %v %v, misuse %d", again, ok, br.Misuse())
	}
	for _, bid := range held {
		if !br.Recycle(bid) {
			t.Fatalf("buffer %d was not held once", bid)
		}
	}
}
