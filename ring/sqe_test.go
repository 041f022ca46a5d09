//go:build linux

package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pure tests of the SQE prep helpers and CQE flag helpers: no ring, no
// kernel. Each helper must write exactly the fields the kernel reads for its
// op (io_uring_enter(2), the io_prep functions of io_uring/*.c), zero every
// other field (a stale rw_flags, addr3 or __pad2 from an earlier use of the
// same ring slot makes the kernel fail the op with EINVAL or misread it) and
// leave UserData alone.

// testAddr is the address the kernel must receive for p; computed here
// with unsafe directly rather than through ptr.go's helpers under test.
func testAddr[T any](p *T) uint64 { return uint64(uintptr(unsafe.Pointer(p))) }

// kernelPoll32 is the poll32_events value the kernel turns into mask: it
// reads the field natively and, on big-endian machines, swaps its 16-bit
// halves (io_uring/poll.c); the swap is its own inverse.
func kernelPoll32(mask uint32) uint32 {
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		return mask<<16 | mask>>16
	}
	return mask
}

// prepCase is one prep helper call and the entry it must produce (with
// UserData left as the test put it).
type prepCase struct {
	name string
	prep func(e *SQE)
	want SQE
}

// prepFixture holds the Go memory the cases hand to the kernel, so that
// expected addresses are known.
type prepFixture struct {
	buf   []byte
	sa    unix.RawSockaddrAny
	saLen uint32
	msg   unix.Msghdr
	ts    Timespec
}

func newPrepFixture() *prepFixture {
	fx := &prepFixture{buf: make([]byte, 1500), saLen: unix.SizeofSockaddrAny}
	fx.ts = Timespec{Sec: 1, Nsec: 500}
	return fx
}

func prepCases(fx *prepFixture) []prepCase {
	const fd = 7
	bufA := testAddr(&fx.buf[0])
	bufN := uint32(len(fx.buf))
	saA, saLenA := testAddr(&fx.sa), testAddr(&fx.saLen)
	msgA, tsA := testAddr(&fx.msg), testAddr(&fx.ts)
	const ud = 0x0123_4567_89ab_cdef
	acceptFlags := uint32(unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC)

	return []prepCase{
		{"Nop", func(e *SQE) { e.PrepNop() },
			SQE{Opcode: OpNop, Fd: -1}},
		{"Accept", func(e *SQE) { e.PrepAccept(fd, &fx.sa, &fx.saLen, acceptFlags) },
			// accept: addr = sockaddr, addr2 (off) = &addrlen, accept_flags.
			SQE{Opcode: OpAccept, Fd: fd, Addr: saA, Off: saLenA, OpFlags: acceptFlags}},
		{"AcceptNoAddr", func(e *SQE) { e.PrepAccept(fd, nil, nil, 0) },
			SQE{Opcode: OpAccept, Fd: fd}},
		{"MultishotAccept", func(e *SQE) { e.PrepMultishotAccept(fd, nil, nil, acceptFlags) },
			// IORING_ACCEPT_MULTISHOT lives in ioprio.
			SQE{Opcode: OpAccept, Fd: fd, IoPrio: AcceptMultishot, OpFlags: acceptFlags}},
		{"Connect", func(e *SQE) { e.PrepConnect(fd, &fx.sa, unix.SizeofSockaddrInet4) },
			// connect: addr = sockaddr, addr2 (off) = addrlen by value.
			SQE{Opcode: OpConnect, Fd: fd, Addr: saA, Off: unix.SizeofSockaddrInet4}},
		{"Recv", func(e *SQE) { e.PrepRecv(fd, fx.buf, unix.MSG_WAITALL) },
			SQE{Opcode: OpRecv, Fd: fd, Addr: bufA, Len: bufN, OpFlags: unix.MSG_WAITALL}},
		{"RecvBufferGroup", func(e *SQE) { e.PrepRecv(fd, nil, 0); e.SetBufferGroup(3) },
			// IOSQE_BUFFER_SELECT with buf_group; no address, len 0 (the
			// group's buffer size applies).
			SQE{Opcode: OpRecv, Fd: fd, Flags: SQEBufferSelect, BufIndex: 3}},
		{"RecvMultishot", func(e *SQE) { e.PrepRecvMultishot(fd, unix.MSG_DONTWAIT); e.SetBufferGroup(0xfffe) },
			SQE{Opcode: OpRecv, Fd: fd, IoPrio: RecvMultishot, OpFlags: unix.MSG_DONTWAIT,
				Flags: SQEBufferSelect, BufIndex: 0xfffe}},
		{"Send", func(e *SQE) { e.PrepSend(fd, fx.buf, unix.MSG_NOSIGNAL) },
			SQE{Opcode: OpSend, Fd: fd, Addr: bufA, Len: bufN, OpFlags: unix.MSG_NOSIGNAL}},
		{"RecvmsgMultishot", func(e *SQE) { e.PrepRecvmsgMultishot(fd, &fx.msg, unix.MSG_TRUNC); e.SetBufferGroup(2) },
			SQE{Opcode: OpRecvmsg, Fd: fd, Addr: msgA, Len: 1, OpFlags: unix.MSG_TRUNC, IoPrio: RecvMultishot,
				Flags: SQEBufferSelect, BufIndex: 2}},
		{"Sendmsg", func(e *SQE) { e.PrepSendmsg(fd, &fx.msg, unix.MSG_NOSIGNAL) },
			// len is 1 for one msghdr, as liburing's io_uring_prep_sendmsg.
			SQE{Opcode: OpSendmsg, Fd: fd, Addr: msgA, Len: 1, OpFlags: unix.MSG_NOSIGNAL}},
		{"Read", func(e *SQE) { e.PrepRead(fd, fx.buf, 4096) },
			SQE{Opcode: OpRead, Fd: fd, Addr: bufA, Len: bufN, Off: 4096}},
		{"ReadCurrentPos", func(e *SQE) { e.PrepRead(fd, fx.buf, ^uint64(0)) },
			SQE{Opcode: OpRead, Fd: fd, Addr: bufA, Len: bufN, Off: ^uint64(0)}},
		{"Close", func(e *SQE) { e.PrepClose(fd) },
			SQE{Opcode: OpClose, Fd: fd}},
		{"Shutdown", func(e *SQE) { e.PrepShutdown(fd, unix.SHUT_WR) },
			// how in len.
			SQE{Opcode: OpShutdown, Fd: fd, Len: unix.SHUT_WR}},
		{"Timeout", func(e *SQE) { e.PrepTimeout(&fx.ts, 3, 5) }, // flags: IORING_TIMEOUT_ABS|BOOTTIME
			// addr = timespec, len must be 1, off = completion count.
			SQE{Opcode: OpTimeout, Fd: -1, Addr: tsA, Len: 1, Off: 3, OpFlags: 5}},
		{"PollAdd", func(e *SQE) { e.PrepPollAdd(fd, unix.POLLIN) },
			// poll32_events; len carries IORING_POLL_* and is 0 for one-shot.
			SQE{Opcode: OpPollAdd, Fd: fd, OpFlags: kernelPoll32(unix.POLLIN)}},
		{"PollMultishot", func(e *SQE) { e.PrepPollMultishot(fd, unix.POLLIN|unix.POLLRDHUP) },
			SQE{Opcode: OpPollAdd, Fd: fd, Len: PollAddMulti, OpFlags: kernelPoll32(unix.POLLIN | unix.POLLRDHUP)}},
		{"Cancel64", func(e *SQE) { e.PrepCancel64(ud, AsyncCancelAll) },
			SQE{Opcode: OpAsyncCancel, Fd: -1, Addr: ud, OpFlags: AsyncCancelAll}},
		{"CancelAll", func(e *SQE) { e.PrepCancelAll() },
			SQE{Opcode: OpAsyncCancel, Fd: -1, OpFlags: AsyncCancelAny}},
	}
}

// sqeBytes views e as the 64 bytes the kernel reads.
func sqeBytes(e *SQE) *[64]byte { return (*[64]byte)(unsafe.Pointer(e)) }

// sqeDiff names the fields in which got and want differ.
func sqeDiff(got, want *SQE) string {
	var s string
	add := func(name string, g, w any) {
		if g != w {
			s += fmt.Sprintf("\n\t%s = %#x, want %#x", name, g, w)
		}
	}
	add("Opcode", got.Opcode, want.Opcode)
	add("Flags", got.Flags, want.Flags)
	add("IoPrio", got.IoPrio, want.IoPrio)
	add("Fd", got.Fd, want.Fd)
	add("Off", got.Off, want.Off)
	add("Addr", got.Addr, want.Addr)
	add("Len", got.Len, want.Len)
	add("OpFlags", got.OpFlags, want.OpFlags)
	add("UserData", got.UserData, want.UserData)
	add("BufIndex", got.BufIndex, want.BufIndex)
	add("Personality", got.Personality, want.Personality)
	add("SpliceFdIn", got.SpliceFdIn, want.SpliceFdIn)
	add("Addr3", got.Addr3, want.Addr3)
	add("Pad2", got.Pad2, want.Pad2)
	return s
}

// TestPrepFields prepares each op on a zeroed entry and on an entry full
// of garbage, and checks every byte of the result.
func TestPrepFields(t *testing.T) {
	fx := newPrepFixture()
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range prepCases(fx) {
		t.Run(c.name, func(t *testing.T) {
			for _, start := range []string{"zero", "garbage"} {
				var e SQE
				if start == "garbage" {
					for i := range sqeBytes(&e) {
						sqeBytes(&e)[i] = byte(r.Uint32())
					}
				}
				ud := e.UserData
				c.prep(&e)
				want := c.want
				want.UserData = ud
				if e != want {
					t.Errorf("from a %s entry:%s", start, sqeDiff(&e, &want))
				}
			}
		})
	}
}

// TestPrepOverwritesPrevious prepares every op over every other op on the
// same entry, as ring slots are reused, and checks nothing of the first
// survives; UserData set in between must survive.
func TestPrepOverwritesPrevious(t *testing.T) {
	fx := newPrepFixture()
	cases := prepCases(fx)
	for _, first := range cases {
		for _, second := range cases {
			var e SQE
			first.prep(&e)
			e.Flags |= SQEIOLink | SQEAsync
			e.Personality = 3
			e.SpliceFdIn = 5
			e.Addr3, e.Pad2 = 0xdead, 0xbeef
			e.UserData = 0xfeed
			second.prep(&e)
			want := second.want
			want.UserData = 0xfeed
			if e != want {
				t.Errorf("%s after %s:%s", second.name, first.name, sqeDiff(&e, &want))
			}
		}
	}
}

// TestPrepLeavesUserData checks the contract that Prep never touches
// UserData, for every bit pattern class (0, all ones, random).
func TestPrepLeavesUserData(t *testing.T) {
	fx := newPrepFixture()
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range prepCases(fx) {
		for _, ud := range []uint64{0, ^uint64(0), r.Uint64(), 1 << 63} {
			e := SQE{UserData: ud}
			c.prep(&e)
			if e.UserData != ud {
				t.Errorf("%s: UserData %#x became %#x", c.name, ud, e.UserData)
			}
		}
	}
}

// TestPrepPollEvents checks the poll mask as the kernel decodes it, for
// every single-bit mask and the 16-bit boundary (EPOLLEXCLUSIVE and
// friends live in the upper half).
func TestPrepPollEvents(t *testing.T) {
	for bit := range 32 {
		mask := uint32(1) << bit
		var e SQE
		e.PrepPollAdd(3, mask)
		raw := sqeBytes(&e)[unsafe.Offsetof(e.OpFlags):][:4]
		if got := kernelPoll32(binary.NativeEndian.Uint32(raw)); got != mask {
			t.Errorf("PrepPollAdd(mask %#x): kernel reads %#x", mask, got)
		}
	}
}

// TestPrepEmptyBuffers checks that an empty or nil slice becomes address 0
// with length 0, never the address of a zero-length array.
func TestPrepEmptyBuffers(t *testing.T) {
	backing := make([]byte, 8)
	for _, buf := range [][]byte{nil, {}, backing[:0], backing[8:]} {
		var e SQE
		e.PrepSend(3, buf, 0)
		if e.Addr != 0 || e.Len != 0 {
			t.Errorf("PrepSend(len %d, cap %d): Addr %#x Len %d, want 0 0", len(buf), cap(buf), e.Addr, e.Len)
		}
		e.PrepRead(3, buf, 0)
		if e.Addr != 0 || e.Len != 0 {
			t.Errorf("PrepRead(len %d, cap %d): Addr %#x Len %d, want 0 0", len(buf), cap(buf), e.Addr, e.Len)
		}
	}
	var e SQE
	e.PrepTimeout(nil, 0, 0)
	if e.Addr != 0 {
		t.Errorf("PrepTimeout(nil): Addr %#x, want 0", e.Addr)
	}
}

// TestPrepFdTruncation pins the conversion of Go int fds to the kernel's
// __s32: negative fds stay negative (-1 is "no file").
func TestPrepFdTruncation(t *testing.T) {
	for _, fd := range []int{0, 1, -1, -100, 1<<31 - 1} {
		var e SQE
		e.PrepClose(fd)
		if int(e.Fd) != fd {
			t.Errorf("PrepClose(%d): Fd = %d", fd, e.Fd)
		}
	}
}

// TestSetBufferGroupKeepsOtherFlags checks that SetBufferGroup adds
// IOSQE_BUFFER_SELECT without clearing flags set before it.
func TestSetBufferGroupKeepsOtherFlags(t *testing.T) {
	var e SQE
	e.PrepRecv(4, nil, 0)
	e.Flags |= SQEIOLink
	e.SetBufferGroup(7)
	if e.Flags != SQEIOLink|SQEBufferSelect || e.BufIndex != 7 {
		t.Fatalf("Flags %#x BufIndex %d, want %#x 7", e.Flags, e.BufIndex, SQEIOLink|SQEBufferSelect)
	}
}

// TestCQEBufferID decodes every buffer id, with and without the other
// flag bits set beside IORING_CQE_F_BUFFER.
func TestCQEBufferID(t *testing.T) {
	for id := 0; id <= 0xffff; id++ {
		for _, low := range []uint32{0, CQEFMore, CQEFMore | CQEFSockNonempty | CQEFBufMore, 0xfffe} {
			c := CQE{Flags: uint32(id)<<CQEBufferShift | low | CQEFBuffer}
			got, ok := c.BufferID()
			if !ok || got != uint16(id) {
				t.Fatalf("flags %#x: BufferID() = %d, %v; want %d, true", c.Flags, got, ok, id)
			}
			// Without IORING_CQE_F_BUFFER the upper bits mean nothing.
			c.Flags &^= CQEFBuffer
			if got, ok := c.BufferID(); ok || got != 0 {
				t.Fatalf("flags %#x: BufferID() = %d, %v; want 0, false", c.Flags, got, ok)
			}
		}
	}
}

// TestCQEFlagHelpers checks More on every combination of the low flag bits and a buffer id in the high half.
func TestCQEFlagHelpers(t *testing.T) {
	for low := uint32(0); low < 1<<6; low++ {
		c := CQE{Flags: low | 0xabcd<<CQEBufferShift}
		if got, want := c.More(), low&CQEFMore != 0; got != want {
			t.Errorf("flags %#x: More() = %v", c.Flags, got)
		}
	}
}

// TestCQEErr checks that Err is nil for every non-negative res and keeps
// the errno for every negative one, for errors.Is against both unix and
// syscall errno values.
func TestCQEErr(t *testing.T) {
	for _, res := range []int32{0, 1, 4096, 1<<31 - 1} {
		c := CQE{Res: res}
		if err := c.Err(); err != nil {
			t.Errorf("res %d: Err() = %v, want nil", res, err)
		}
	}
	for e := 1; e < 4096; e++ {
		c := CQE{Res: int32(-e)}
		err := c.Err()
		if err == nil {
			t.Fatalf("res %d: Err() = nil", -e)
		}
		if !errors.Is(err, unix.Errno(e)) || !errors.Is(err, syscall.Errno(e)) {
			t.Fatalf("res %d: Err() = %v (%T), not errors.Is errno %d", -e, err, err, e)
		}
		var errno unix.Errno
		if !errors.As(err, &errno) || errno != unix.Errno(e) {
			t.Fatalf("res %d: errors.As errno = %d", -e, errno)
		}
	}
	for _, c := range []struct {
		res  int32
		want error
	}{
		{-int32(unix.ECANCELED), unix.ECANCELED},
		{-int32(unix.ETIME), unix.ETIME},
		{-int32(unix.ENOBUFS), unix.ENOBUFS},
		{-int32(unix.ECONNRESET), unix.ECONNRESET},
		{-int32(unix.EAGAIN), unix.EAGAIN},
	} {
		if err := (&CQE{Res: c.res}).Err(); !errors.Is(err, c.want) {
			t.Errorf("res %d: Err() = %v, want %v", c.res, err, c.want)
		}
	}
}
