//go:build giouring

// The giouring differential test: our SQE encodings against
// github.com/pawelgaczynski/giouring. giouring only links with
// -ldflags=-checklinkname=0:
//
//	go test -tags giouring -ldflags=-checklinkname=0 ./ring/
//
// For every prep helper both bindings have, both prepare the same entry from
// the same random garbage and the same arguments, and the 64 bytes must be
// equal except in the fields listed below, where giouring differs from the
// kernel ABI or from liburing and the test asserts the exact difference
// instead:
//
//   - UserData: giouring's prepareRW zeroes it; ours leaves it alone (the
//     caller sets it, as with liburing's io_uring_sqe_set_data). The kernel
//     just echoes it, so both are valid encodings; ours is our contract.
//   - Addr3 and Pad2 (addr3, __pad2[0]): giouring never clears them, so a
//     reused ring slot keeps stale values. liburing's io_uring_prep_rw
//     clears both, and the kernel reads them: READ reads them as
//     attr_ptr/attr_type_mask since 6.14.
//   - OpFlags (the rw_flags union): giouring's prepareRW does not clear it,
//     so helpers that do not set it (NOP, CONNECT, CLOSE, SHUTDOWN, READ)
//     keep a stale value. liburing clears it; the kernel rejects non-zero
//     rw_flags for CONNECT, CLOSE and SHUTDOWN with EINVAL, takes them as
//     RWF_* for READ and as nop_flags for NOP (6.10+).
//   - TIMEOUT Addr: giouring stores the address of its *syscall.Timespec
//     parameter (a pointer to the pointer) instead of the timespec.
//   - POLL_ADD OpFlags, on big-endian machines only: giouring stores the
//     mask as is; the kernel swaps the halves of poll32_events on read.
//   - CONNECT: giouring types the address as *syscall.Sockaddr, a pointer to
//     a Go interface value; the bytes agree only when that pointer is really
//     a raw sockaddr, which the test arranges (see TestGiouringConnectAddr).

package ring

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/pawelgaczynski/giouring"
	"golang.org/x/sys/unix"
)

type gSQE = giouring.SubmissionQueueEntry

// oracleIters is the number of random inputs each helper is compared on.
const oracleIters = 10_000

// oracleFixture is the Go memory whose addresses both bindings encode. It
// lives for the whole test, as the op table would keep it for the kernel.
type oracleFixture struct {
	backing []byte
	iovecs  []unix.Iovec
	sa      *unix.RawSockaddrAny
	saLen   *uint32
	msg     *unix.Msghdr
	ts      *Timespec
}

func newOracleFixture() *oracleFixture {
	fx := &oracleFixture{
		backing: make([]byte, 1<<16),
		iovecs:  make([]unix.Iovec, 16),
		sa:      new(unix.RawSockaddrAny),
		saLen:   new(uint32),
		msg:     new(unix.Msghdr),
		ts:      &Timespec{Sec: 1, Nsec: 2},
	}
	return fx
}

// oracleInput is one set of arguments, shared by both bindings.
type oracleInput struct {
	garbage        [64]byte // the entry's content before the prep
	fd             int
	flags          uint32
	a, b           uint64
	u32            uint32
	u16            uint16
	bufOff, bufLen int // window of fx.backing
	iovOff, iovLen int // window of fx.iovecs
}

func (in *oracleInput) String() string {
	return fmt.Sprintf("fd=%d flags=%#x a=%#x b=%#x u32=%#x u16=%#x buf=[%d:+%d] iov=[%d:+%d] garbage=%x",
		in.fd, in.flags, in.a, in.b, in.u32, in.u16, in.bufOff, in.bufLen, in.iovOff, in.iovLen, in.garbage)
}

// clamp makes the buffer and iovec windows valid for fx.
func (in *oracleInput) clamp(fx *oracleFixture) {
	in.bufOff %= len(fx.backing) + 1
	in.bufLen %= len(fx.backing) - in.bufOff + 1
	in.iovOff %= len(fx.iovecs) + 1
	in.iovLen %= len(fx.iovecs) - in.iovOff + 1
}

func randomOracleInput(r *rand.Rand, fx *oracleFixture) oracleInput {
	var in oracleInput
	for i := 0; i < len(in.garbage); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			in.garbage[i+j] = byte(v >> (8 * j))
		}
	}
	switch r.IntN(5) {
	case 0:
		in.fd = r.IntN(1024)
	case 1:
		in.fd = -1
	case 2:
		in.fd = int(int32(r.Uint32()))
	default:
		in.fd = int(r.Uint64()) // beyond int32: both truncate to __s32
	}
	if r.IntN(4) != 0 {
		in.flags = r.Uint32()
	}
	in.a, in.b = r.Uint64(), r.Uint64()
	in.u32, in.u16 = r.Uint32(), uint16(r.Uint32())
	in.bufOff = r.IntN(len(fx.backing))
	if r.IntN(8) != 0 {
		in.bufLen = r.IntN(len(fx.backing) - in.bufOff + 1)
	}
	in.iovOff = r.IntN(len(fx.iovecs))
	in.iovLen = r.IntN(len(fx.iovecs) - in.iovOff + 1)
	return in
}

func (fx *oracleFixture) buf(in *oracleInput) []byte {
	return fx.backing[in.bufOff : in.bufOff+in.bufLen]
}

// rawAddr is the address giouring's uintptr-taking helpers must be given
// for p: like ours, 0 for an empty slice (the kernel never dereferences a
// zero-length buffer).
func rawAddr[T any](p []T) uintptr {
	if len(p) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&p[0]))
}

// sqeField is a byte range of the 64-byte entry.
type sqeField struct {
	name      string
	off, size uintptr
}

var (
	fieldOff      = sqeField{"Off", unsafe.Offsetof(SQE{}.Off), 8}
	fieldAddr     = sqeField{"Addr", unsafe.Offsetof(SQE{}.Addr), 8}
	fieldLen      = sqeField{"Len", unsafe.Offsetof(SQE{}.Len), 4}
	fieldOpFlags  = sqeField{"OpFlags", unsafe.Offsetof(SQE{}.OpFlags), 4}
	fieldUserData = sqeField{"UserData", unsafe.Offsetof(SQE{}.UserData), 8}
	fieldAddr3    = sqeField{"Addr3", unsafe.Offsetof(SQE{}.Addr3), 8}
	fieldPad2     = sqeField{"Pad2", unsafe.Offsetof(SQE{}.Pad2), 8}
)

// oracleCase is one helper present in both bindings.
type oracleCase struct {
	name string
	prep func(fx *oracleFixture, in *oracleInput, ours *SQE, theirs *gSQE)
	// staleOpFlags: giouring's helper does not set the op-flags word and
	// its prepareRW does not clear it.
	staleOpFlags bool
	// differ are further fields where giouring's encoding is wrong; check
	// asserts what each side holds there and returns the problems found.
	differ []sqeField
	check  func(fx *oracleFixture, in *oracleInput, ours, theirs *SQE) []string
}

// On big-endian machines giouring stores the poll mask as is, while the
// kernel swaps the 16-bit halves of poll32_events when reading it
// (liburing's io_uring_prep_poll_add pre-swaps, as ours does). On
// little-endian machines nothing differs.
var pollDiffer = func() []sqeField {
	if bigEndian {
		return []sqeField{fieldOpFlags}
	}
	return nil
}()

func pollCheck(fx *oracleFixture, in *oracleInput, o, g *SQE) (bad []string) {
	if kernelPoll32(o.OpFlags) != in.flags {
		bad = append(bad, fmt.Sprintf("ours poll32_events %#x decodes to %#x, want %#x", o.OpFlags, kernelPoll32(o.OpFlags), in.flags))
	}
	if g.OpFlags != in.flags {
		bad = append(bad, fmt.Sprintf("giouring poll32_events %#x, expected the raw mask %#x", g.OpFlags, in.flags))
	}
	return bad
}

func oracleCases() []oracleCase {
	return []oracleCase{
		{name: "nop", staleOpFlags: true,
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepNop()
				g.PrepareNop()
			}},
		{name: "accept",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				if in.u16&1 == 0 {
					o.PrepAccept(in.fd, nil, nil, in.flags)
					g.PrepareAccept(in.fd, 0, 0, in.flags)
					return
				}
				o.PrepAccept(in.fd, fx.sa, fx.saLen, in.flags)
				// giouring takes both pointers as integers, the length's
				// address included.
				g.PrepareAccept(in.fd, uintptr(unsafe.Pointer(fx.sa)), uint64(uintptr(unsafe.Pointer(fx.saLen))), in.flags)
			}},
		{name: "accept_multishot",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepMultishotAccept(in.fd, fx.sa, fx.saLen, in.flags)
				g.PrepareMultishotAccept(in.fd, uintptr(unsafe.Pointer(fx.sa)), uint64(uintptr(unsafe.Pointer(fx.saLen))), int(in.flags))
			}},
		{name: "connect", staleOpFlags: true,
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepConnect(in.fd, fx.sa, in.u32)
				g.PrepareConnect(in.fd, (*syscall.Sockaddr)(unsafe.Pointer(fx.sa)), uint64(in.u32))
			}},
		{name: "recv",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				b := fx.buf(in)
				o.PrepRecv(in.fd, b, in.flags)
				g.PrepareRecv(in.fd, rawAddr(b), uint32(len(b)), int(in.flags))
			}},
		{name: "recv_buffer_select",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepRecv(in.fd, nil, in.flags)
				o.SetBufferGroup(in.u16)
				// giouring has no buffer-group helper: set the fields as
				// its callers do.
				g.PrepareRecv(in.fd, 0, 0, int(in.flags))
				g.Flags |= giouring.SqeBufferSelect
				g.BufIG = in.u16
			}},
		{name: "recv_multishot",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepRecvMultishot(in.fd, in.flags)
				o.SetBufferGroup(in.u16)
				g.PrepareRecvMultishot(in.fd, 0, 0, int(in.flags))
				g.Flags |= giouring.SqeBufferSelect
				g.BufIG = in.u16
			}},
		{name: "send",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				b := fx.buf(in)
				o.PrepSend(in.fd, b, in.flags)
				g.PrepareSend(in.fd, rawAddr(b), uint32(len(b)), int(in.flags))
			}},
		{name: "sendmsg",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepSendmsg(in.fd, fx.msg, in.flags)
				// unix.Msghdr and syscall.Msghdr share the layout.
				g.PrepareSendMsg(in.fd, (*syscall.Msghdr)(unsafe.Pointer(fx.msg)), in.flags)
			}},
		{name: "read", staleOpFlags: true,
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				b := fx.buf(in)
				o.PrepRead(in.fd, b, in.a)
				g.PrepareRead(in.fd, rawAddr(b), uint32(len(b)), in.a)
			}},
		{name: "close", staleOpFlags: true,
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepClose(in.fd)
				g.PrepareClose(in.fd)
			}},
		{name: "shutdown", staleOpFlags: true,
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				how := int(int32(in.u32))
				o.PrepShutdown(in.fd, how)
				g.PrepareShutdown(in.fd, how)
			}},
		{name: "timeout", differ: []sqeField{fieldAddr},
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepTimeout(fx.ts, in.u32, in.flags)
				// Timespec and syscall.Timespec share the layout.
				g.PrepareTimeout((*syscall.Timespec)(unsafe.Pointer(fx.ts)), in.u32, in.flags)
			},
			check: func(fx *oracleFixture, in *oracleInput, o, g *SQE) (bad []string) {
				// The kernel reads a struct __kernel_timespec at addr.
				// giouring stores &spec, the address of its pointer
				// parameter.
				want := uint64(uintptr(unsafe.Pointer(fx.ts)))
				if o.Addr != want {
					bad = append(bad, fmt.Sprintf("ours Addr = %#x, want timespec address %#x", o.Addr, want))
				}
				if g.Addr == 0 || g.Addr == want {
					bad = append(bad, fmt.Sprintf("giouring Addr = %#x: expected the address of its pointer parameter", g.Addr))
				}
				return bad
			}},
		{name: "poll_add", differ: pollDiffer, check: pollCheck,
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepPollAdd(in.fd, in.flags)
				g.PreparePollAdd(in.fd, in.flags)
			}},
		{name: "poll_multishot", differ: pollDiffer, check: pollCheck,
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepPollMultishot(in.fd, in.flags)
				g.PreparePollMultishot(in.fd, in.flags)
			}},
		{name: "cancel64",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepCancel64(in.a, in.flags)
				g.PrepareCancel64(in.a, int(in.flags))
			}},
		{name: "cancel_all",
			prep: func(fx *oracleFixture, in *oracleInput, o *SQE, g *gSQE) {
				o.PrepCancelAll()
				// liburing spells it io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY).
				g.PrepareCancel64(0, int(giouring.AsyncCancelAny))
			}},
	}
}

// oracleCompare prepares one entry with each binding from in and returns
// every unexpected difference.
func oracleCompare(fx *oracleFixture, c *oracleCase, in *oracleInput) []string {
	var ours SQE
	var theirs gSQE
	ob := (*[64]byte)(unsafe.Pointer(&ours))
	tb := (*[64]byte)(unsafe.Pointer(&theirs))
	*ob, *tb = in.garbage, in.garbage
	garbage := *(*SQE)(unsafe.Pointer(&in.garbage))

	c.prep(fx, in, &ours, &theirs)
	g := (*SQE)(unsafe.Pointer(&theirs))

	var bad []string
	skip := [64]bool{}
	mark := func(f sqeField) {
		for i := f.off; i < f.off+f.size; i++ {
			skip[i] = true
		}
	}

	// Fields every giouring helper treats differently (see the file comment).
	mark(fieldUserData)
	if ours.UserData != garbage.UserData || g.UserData != 0 {
		bad = append(bad, fmt.Sprintf("UserData: ours %#x (want untouched %#x), giouring %#x (want 0)",
			ours.UserData, garbage.UserData, g.UserData))
	}
	mark(fieldAddr3)
	mark(fieldPad2)
	if ours.Addr3 != 0 || ours.Pad2 != 0 {
		bad = append(bad, fmt.Sprintf("ours Addr3, Pad2 = %#x, %#x; want 0, 0", ours.Addr3, ours.Pad2))
	}
	if g.Addr3 != garbage.Addr3 || g.Pad2 != garbage.Pad2 {
		bad = append(bad, fmt.Sprintf("giouring Addr3, Pad2 = %#x, %#x; expected stale %#x, %#x (has it started clearing them?)",
			g.Addr3, g.Pad2, garbage.Addr3, garbage.Pad2))
	}
	if c.staleOpFlags {
		mark(fieldOpFlags)
		if ours.OpFlags != 0 {
			bad = append(bad, fmt.Sprintf("ours OpFlags = %#x, want 0", ours.OpFlags))
		}
		if g.OpFlags != garbage.OpFlags {
			bad = append(bad, fmt.Sprintf("giouring OpFlags = %#x; expected stale %#x", g.OpFlags, garbage.OpFlags))
		}
	}
	for _, f := range c.differ {
		mark(f)
	}
	if c.check != nil {
		bad = append(bad, c.check(fx, in, &ours, g)...)
	}

	for _, f := range sqeLayout {
		for i := f.off; i < f.off+f.size; i++ {
			if !skip[i] && ob[i] != tb[i] {
				bad = append(bad, fmt.Sprintf("%s (bytes %d..%d): ours %#x, giouring %#x",
					f.name, f.off, f.off+f.size-1, leUint(ob[f.off:f.off+f.size]), leUint(tb[f.off:f.off+f.size])))
				break
			}
		}
	}
	return bad
}

// leUint decodes a little-endian field of up to 8 bytes, for messages.
func leUint(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// sqeLayout names the fields by offset, for failure messages.
var sqeLayout = []sqeField{
	{"Opcode", 0, 1}, {"Flags", 1, 1}, {"IoPrio", 2, 2}, {"Fd", 4, 4},
	fieldOff, fieldAddr, fieldLen, fieldOpFlags, fieldUserData,
	{"BufIndex", 40, 2}, {"Personality", 42, 2}, {"SpliceFdIn", 44, 4},
	fieldAddr3, fieldPad2,
}

// oracleSeed returns RINGLOOP_ORACLE_SEED when set, else a fresh seed.
func oracleSeed(tb testing.TB) uint64 {
	if s := os.Getenv("RINGLOOP_ORACLE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			tb.Fatalf("RINGLOOP_ORACLE_SEED: %v", err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// TestPrepVsGiouring compares every shared helper on oracleIters random
// inputs each.
func TestPrepVsGiouring(t *testing.T) {
	seed := oracleSeed(t)
	t.Logf("seed %d (rerun with RINGLOOP_ORACLE_SEED=%d)", seed, seed)
	fx := newOracleFixture()
	start := time.Now()
	cases := oracleCases()
	for i := range cases {
		c := &cases[i]
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			fails := 0
			for n := range oracleIters {
				in := randomOracleInput(r, fx)
				if bad := oracleCompare(fx, c, &in); len(bad) > 0 {
					t.Errorf("input #%d (seed %d): %s\n\t%s", n, seed, &in, strings.Join(bad, "\n\t"))
					if fails++; fails == 5 {
						t.FailNow()
					}
				}
			}
		})
	}
	t.Logf("%d helpers x %d random inputs compared in %v", len(cases), oracleIters, time.Since(start))
}

// FuzzPrepVsGiouring runs the same comparison on fuzzer-chosen inputs:
//
//	go test -tags giouring -ldflags=-checklinkname=0 ./ring/ -run='^$' -fuzz=FuzzPrepVsGiouring -fuzztime=20s
func FuzzPrepVsGiouring(f *testing.F) {
	fx := newOracleFixture()
	cases := oracleCases()
	for i := range cases {
		f.Add(uint8(i), make([]byte, 64), int64(3), uint32(0), uint64(0), uint64(0), uint32(0), uint16(0), uint16(0), uint16(64), uint8(0), uint8(2))
		f.Add(uint8(i), []byte(strings.Repeat("\xff", 64)), int64(-1), ^uint32(0), ^uint64(0), uint64(1), ^uint32(0), ^uint16(0), uint16(100), uint16(0), uint8(15), uint8(1))
	}
	f.Fuzz(func(t *testing.T, helper uint8, garbage []byte, fd int64, flags uint32, a, b uint64, u32 uint32, u16, bufOff, bufLen uint16, iovOff, iovLen uint8) {
		c := &cases[int(helper)%len(cases)]
		in := oracleInput{fd: int(fd), flags: flags, a: a, b: b, u32: u32, u16: u16,
			bufOff: int(bufOff), bufLen: int(bufLen), iovOff: int(iovOff), iovLen: int(iovLen)}
		copy(in.garbage[:], garbage)
		in.clamp(fx)
		if bad := oracleCompare(fx, c, &in); len(bad) > 0 {
			t.Fatalf("%s: %s\n\t%s", c.name, &in, strings.Join(bad, "\n\t"))
		}
	})
}

// TestGiouringConnectAddr shows why the connect case hands giouring a
// reinterpreted pointer: with the natural Go argument, a *syscall.Sockaddr
// pointing at an interface value, giouring encodes the address of that
// interface value (two words: type and data pointers), which the kernel
// would then parse as a struct sockaddr.
func TestGiouringConnectAddr(t *testing.T) {
	var sa syscall.Sockaddr = &syscall.SockaddrInet4{Port: 80, Addr: [4]byte{127, 0, 0, 1}}
	var g gSQE
	g.PrepareConnect(3, &sa, unix.SizeofSockaddrInet4)
	if g.Addr != uint64(uintptr(unsafe.Pointer(&sa))) {
		t.Fatalf("giouring connect Addr = %#x, expected the interface value's address %#x", g.Addr, uintptr(unsafe.Pointer(&sa)))
	}
	// Ours takes the raw sockaddr the kernel reads.
	raw := new(unix.RawSockaddrAny)
	var o SQE
	o.PrepConnect(3, raw, unix.SizeofSockaddrInet4)
	if o.Addr != uint64(uintptr(unsafe.Pointer(raw))) {
		t.Fatalf("ours connect Addr = %#x, want %#x", o.Addr, uintptr(unsafe.Pointer(raw)))
	}
}

// TestGiouringConstants compares the constants both bindings define.
func TestGiouringConstants(t *testing.T) {
	if s := unsafe.Sizeof(gSQE{}); s != unsafe.Sizeof(SQE{}) {
		t.Fatalf("sizeof giouring SQE = %d, ours %d", s, unsafe.Sizeof(SQE{}))
	}
	if s := unsafe.Sizeof(giouring.CompletionQueueEvent{}); s != unsafe.Sizeof(CQE{}) {
		t.Fatalf("sizeof giouring CQE = %d, ours %d", s, unsafe.Sizeof(CQE{}))
	}
	type pair struct {
		name        string
		ours, their uint64
	}
	var pairs []pair
	add := func(name string, ours, their uint64) { pairs = append(pairs, pair{name, ours, their}) }
	ops := []struct {
		ours  Opcode
		their uint8
	}{
		{OpNop, giouring.OpNop}, {OpReadv, giouring.OpReadv}, {OpWritev, giouring.OpWritev},
		{OpFsync, giouring.OpFsync}, {OpReadFixed, giouring.OpReadFixed}, {OpWriteFixed, giouring.OpWriteFixed},
		{OpPollAdd, giouring.OpPollAdd}, {OpPollRemove, giouring.OpPollRemove},
		{OpSyncFileRange, giouring.OpSyncFileRange}, {OpSendmsg, giouring.OpSendmsg},
		{OpRecvmsg, giouring.OpRecvmsg}, {OpTimeout, giouring.OpTimeout},
		{OpTimeoutRemove, giouring.OpTimeoutRemove}, {OpAccept, giouring.OpAccept},
		{OpAsyncCancel, giouring.OpAsyncCancel}, {OpLinkTimeout, giouring.OpLinkTimeout},
		{OpConnect, giouring.OpConnect}, {OpFallocate, giouring.OpFallocate},
		{OpOpenat, giouring.OpOpenat}, {OpClose, giouring.OpClose},
		{OpFilesUpdate, giouring.OpFilesUpdate}, {OpStatx, giouring.OpStatx},
		{OpRead, giouring.OpRead}, {OpWrite, giouring.OpWrite}, {OpFadvise, giouring.OpFadvise},
		{OpMadvise, giouring.OpMadvise}, {OpSend, giouring.OpSend}, {OpRecv, giouring.OpRecv},
		{OpOpenat2, giouring.OpOpenat2}, {OpEpollCtl, giouring.OpEpollCtl}, {OpSplice, giouring.OpSplice},
		{OpProvideBuffers, giouring.OpProvideBuffers}, {OpRemoveBuffers, giouring.OpRemoveBuffers},
		{OpTee, giouring.OpTee}, {OpShutdown, giouring.OpShutdown}, {OpRenameat, giouring.OpRenameat},
		{OpUnlinkat, giouring.OpUnlinkat}, {OpMkdirat, giouring.OpMkdirat},
		{OpSymlinkat, giouring.OpSymlinkat}, {OpLinkat, giouring.OpLinkat}, {OpMsgRing, giouring.OpMsgRing},
		{OpFsetxattr, giouring.OpFsetxattr}, {OpSetxattr, giouring.OpSetxattr},
		{OpFgetxattr, giouring.OpFgetxattr}, {OpGetxattr, giouring.OpGetxattr},
		{OpSocket, giouring.OpSocket}, {OpUringCmd, giouring.OpUringCmd}, {OpSendZC, giouring.OpSendZC},
		{OpSendmsgZC, giouring.OpSendMsgZC},
	}
	for _, op := range ops {
		add(fmt.Sprintf("opcode %d", op.ours), uint64(op.ours), uint64(op.their))
	}
	u8s := [][2]uint8{
		{SQEFixedFile, giouring.SqeFixedFile}, {SQEIODrain, giouring.SqeIODrain}, {SQEIOLink, giouring.SqeIOLink},
		{SQEIOHardlink, giouring.SqeIOHardlink}, {SQEAsync, giouring.SqeAsync},
		{SQEBufferSelect, giouring.SqeBufferSelect}, {SQECQESkipSuccess, giouring.SqeCQESkipSuccess},
	}
	for i, p := range u8s {
		add(fmt.Sprintf("IOSQE #%d", i), uint64(p[0]), uint64(p[1]))
	}
	u16s := [][2]uint16{
		{RecvsendPollFirst, giouring.RecvsendPollFirst}, {RecvMultishot, giouring.RecvMultishot},
		{RecvsendFixedBuf, giouring.RecvsendFixedBuf}, {SendZCReportUsage, giouring.SendZCReportUsage},
		{AcceptMultishot, giouring.AcceptMultishot},
	}
	for i, p := range u16s {
		add(fmt.Sprintf("ioprio flag #%d", i), uint64(p[0]), uint64(p[1]))
	}
	u32s := []struct {
		name        string
		ours, their uint32
	}{
		{"SetupIOPoll", SetupIOPoll, giouring.SetupIOPoll}, {"SetupSQPoll", SetupSQPoll, giouring.SetupSQPoll},
		{"SetupSQAff", SetupSQAff, giouring.SetupSQAff}, {"SetupCQSize", SetupCQSize, giouring.SetupCQSize},
		{"SetupClamp", SetupClamp, giouring.SetupClamp}, {"SetupAttachWQ", SetupAttachWQ, giouring.SetupAttachWQ},
		{"SetupRDisabled", SetupRDisabled, giouring.SetupRDisabled}, {"SetupSubmitAll", SetupSubmitAll, giouring.SetupSubmitAll},
		{"SetupCoopTaskrun", SetupCoopTaskrun, giouring.SetupCoopTaskrun}, {"SetupTaskrunFlag", SetupTaskrunFlag, giouring.SetupTaskrunFlag},
		{"SetupSQE128", SetupSQE128, giouring.SetupSQE128}, {"SetupCQE32", SetupCQE32, giouring.SetupCQE32},
		{"SetupSingleIssuer", SetupSingleIssuer, giouring.SetupSingleIssuer}, {"SetupDeferTaskrun", SetupDeferTaskrun, giouring.SetupDeferTaskrun},
		{"SetupNoMmap", SetupNoMmap, giouring.SetupNoMmap}, {"SetupRegisteredFdOnly", SetupRegisteredFdOnly, giouring.SetupRegisteredFdOnly},
		{"FeatSingleMmap", FeatSingleMmap, giouring.FeatSingleMMap}, {"FeatNoDrop", FeatNoDrop, giouring.FeatNoDrop},
		{"FeatSubmitStable", FeatSubmitStable, giouring.FeatSubmitStable}, {"FeatRWCurPos", FeatRWCurPos, giouring.FeatRWCurPos},
		{"FeatCurPersonality", FeatCurPersonality, giouring.FeatCurPersonality}, {"FeatFastPoll", FeatFastPoll, giouring.FeatFastPoll},
		{"FeatPoll32Bits", FeatPoll32Bits, giouring.FeatPoll32Bits}, {"FeatSQPollNonfixed", FeatSQPollNonfixed, giouring.FeatSQPollNonfixed},
		{"FeatExtArg", FeatExtArg, giouring.FeatExtArg}, {"FeatNativeWorkers", FeatNativeWorkers, giouring.FeatNativeWorkers},
		{"FeatRsrcTags", FeatRsrcTags, giouring.FeatRcrcTags}, {"FeatCQESkip", FeatCQESkip, giouring.FeatCQESkip},
		{"FeatLinkedFile", FeatLinkedFile, giouring.FeatLinkedFile}, {"FeatRegRegRing", FeatRegRegRing, giouring.FeatRegRegRing},
		{"EnterGetEvents", EnterGetEvents, giouring.EnterGetEvents}, {"EnterSQWakeup", EnterSQWakeup, giouring.EnterSQWakeup},
		{"EnterSQWait", EnterSQWait, giouring.EnterSQWait}, {"EnterExtArg", EnterExtArg, giouring.EnterExtArg},
		{"EnterRegisteredRing", EnterRegisteredRing, giouring.EnterRegisteredRing},
		{"SQNeedWakeup", SQNeedWakeup, giouring.SQNeedWakeup}, {"SQCQOverflow", SQCQOverflow, giouring.SQCQOverflow},
		{"SQTaskrun", SQTaskrun, giouring.SQTaskrun},
		{"CQEFBuffer", CQEFBuffer, giouring.CQEFBuffer}, {"CQEFMore", CQEFMore, giouring.CQEFMore},
		{"CQEFSockNonempty", CQEFSockNonempty, giouring.CQEFSockNonempty}, {"CQEFNotif", CQEFNotif, giouring.CQEFNotif},
		{"CQEBufferShift", CQEBufferShift, giouring.CQEBufferShift},
		{"PollAddMulti", PollAddMulti, giouring.PollAddMulti}, {"PollUpdateEvents", PollUpdateEvents, giouring.PollUpdateEvents},
		{"PollUpdateUserData", PollUpdateUserData, giouring.PollUpdateUserData}, {"PollAddLevel", PollAddLevel, giouring.PollAddLevel},
		{"AsyncCancelAll", AsyncCancelAll, giouring.AsyncCancelAll}, {"AsyncCancelFd", AsyncCancelFd, giouring.AsyncCancelFd},
		{"AsyncCancelAny", AsyncCancelAny, giouring.AsyncCancelAny}, {"AsyncCancelFdFixed", AsyncCancelFdFixed, giouring.AsyncCancelFdFixed},
		{"registerEventfd", registerEventfd, giouring.RegisterEventFD},
		{"registerRingFds", registerRingFds, giouring.RegisterRingFDs}, {"unregisterRingFds", unregisterRingFds, giouring.UnregisterRingFDs},
		{"registerPbufRing", registerPbufRing, giouring.RegisterPbufRing}, {"unregisterPbufRing", unregisterPbufRing, giouring.UnregisterPbufRing},
	}
	for _, p := range u32s {
		add(p.name, uint64(p.ours), uint64(p.their))
	}
	for _, p := range pairs {
		if p.ours != p.their {
			t.Errorf("%s: ours %#x, giouring %#x", p.name, p.ours, p.their)
		}
	}
	t.Logf("%d constants agree with giouring", len(pairs))
}
