package ring

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"math/big"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ABI layout is tested, not trusted: every type of abi.go is compared with
// the layout of its kernel struct (include/uapi/linux/io_uring.h, identical
// on every 64-bit architecture Go supports; the expected numbers below were
// checked with offsetof() against the installed header).

// abiField is one field of a kernel struct: where the Go field is (got*) and
// where the kernel has it (want*).
type abiField struct {
	kernel            string // kernel field name
	gotOff, gotSize   uintptr
	wantOff, wantSize uintptr
}

// abiStruct is one ABI type with its expected size and fields.
type abiStruct struct {
	kernel           string // kernel struct name
	gotSize          uintptr
	wantSize         uintptr
	fields           []abiField
	gotAlign, minAln uintptr
}

func abiF(kernel string, off, size, wantOff, wantSize uintptr) abiField {
	return abiField{kernel: kernel, gotOff: off, gotSize: size, wantOff: wantOff, wantSize: wantSize}
}

func abiStructs() []abiStruct {
	var (
		sqe  SQE
		cqe  CQE
		par  Params
		sqo  SQRingOffsets
		cqo  CQRingOffsets
		gea  GetEventsArg
		ts   Timespec
		bre  BufRingEntry
		breg BufReg
		rfu  RingFdUpdate
	)
	return []abiStruct{
		{"struct io_uring_sqe", unsafe.Sizeof(sqe), 64, []abiField{
			abiF("opcode", unsafe.Offsetof(sqe.Opcode), unsafe.Sizeof(sqe.Opcode), 0, 1),
			abiF("flags", unsafe.Offsetof(sqe.Flags), unsafe.Sizeof(sqe.Flags), 1, 1),
			abiF("ioprio", unsafe.Offsetof(sqe.IoPrio), unsafe.Sizeof(sqe.IoPrio), 2, 2),
			abiF("fd", unsafe.Offsetof(sqe.Fd), unsafe.Sizeof(sqe.Fd), 4, 4),
			abiF("off/addr2", unsafe.Offsetof(sqe.Off), unsafe.Sizeof(sqe.Off), 8, 8),
			abiF("addr/splice_off_in", unsafe.Offsetof(sqe.Addr), unsafe.Sizeof(sqe.Addr), 16, 8),
			abiF("len", unsafe.Offsetof(sqe.Len), unsafe.Sizeof(sqe.Len), 24, 4),
			abiF("rw_flags/poll32_events/...", unsafe.Offsetof(sqe.OpFlags), unsafe.Sizeof(sqe.OpFlags), 28, 4),
			abiF("user_data", unsafe.Offsetof(sqe.UserData), unsafe.Sizeof(sqe.UserData), 32, 8),
			abiF("buf_index/buf_group", unsafe.Offsetof(sqe.BufIndex), unsafe.Sizeof(sqe.BufIndex), 40, 2),
			abiF("personality", unsafe.Offsetof(sqe.Personality), unsafe.Sizeof(sqe.Personality), 42, 2),
			abiF("splice_fd_in/file_index/addr_len", unsafe.Offsetof(sqe.SpliceFdIn), unsafe.Sizeof(sqe.SpliceFdIn), 44, 4),
			abiF("addr3/optval/cmd", unsafe.Offsetof(sqe.Addr3), unsafe.Sizeof(sqe.Addr3), 48, 8),
			abiF("__pad2[0]", unsafe.Offsetof(sqe.Pad2), unsafe.Sizeof(sqe.Pad2), 56, 8),
		}, unsafe.Alignof(sqe), 8},
		{"struct io_uring_cqe", unsafe.Sizeof(cqe), 16, []abiField{
			abiF("user_data", unsafe.Offsetof(cqe.UserData), unsafe.Sizeof(cqe.UserData), 0, 8),
			abiF("res", unsafe.Offsetof(cqe.Res), unsafe.Sizeof(cqe.Res), 8, 4),
			abiF("flags", unsafe.Offsetof(cqe.Flags), unsafe.Sizeof(cqe.Flags), 12, 4),
		}, unsafe.Alignof(cqe), 8},
		{"struct io_uring_params", unsafe.Sizeof(par), 120, []abiField{
			abiF("sq_entries", unsafe.Offsetof(par.SQEntries), unsafe.Sizeof(par.SQEntries), 0, 4),
			abiF("cq_entries", unsafe.Offsetof(par.CQEntries), unsafe.Sizeof(par.CQEntries), 4, 4),
			abiF("flags", unsafe.Offsetof(par.Flags), unsafe.Sizeof(par.Flags), 8, 4),
			abiF("sq_thread_cpu", unsafe.Offsetof(par.SQThreadCPU), unsafe.Sizeof(par.SQThreadCPU), 12, 4),
			abiF("sq_thread_idle", unsafe.Offsetof(par.SQThreadIdle), unsafe.Sizeof(par.SQThreadIdle), 16, 4),
			abiF("features", unsafe.Offsetof(par.Features), unsafe.Sizeof(par.Features), 20, 4),
			abiF("wq_fd", unsafe.Offsetof(par.WQFd), unsafe.Sizeof(par.WQFd), 24, 4),
			abiF("resv[3]", unsafe.Offsetof(par.Resv), unsafe.Sizeof(par.Resv), 28, 12),
			abiF("sq_off", unsafe.Offsetof(par.SQOff), unsafe.Sizeof(par.SQOff), 40, 40),
			abiF("cq_off", unsafe.Offsetof(par.CQOff), unsafe.Sizeof(par.CQOff), 80, 40),
		}, unsafe.Alignof(par), 8},
		{"struct io_sqring_offsets", unsafe.Sizeof(sqo), 40, []abiField{
			abiF("head", unsafe.Offsetof(sqo.Head), unsafe.Sizeof(sqo.Head), 0, 4),
			abiF("tail", unsafe.Offsetof(sqo.Tail), unsafe.Sizeof(sqo.Tail), 4, 4),
			abiF("ring_mask", unsafe.Offsetof(sqo.RingMask), unsafe.Sizeof(sqo.RingMask), 8, 4),
			abiF("ring_entries", unsafe.Offsetof(sqo.RingEntries), unsafe.Sizeof(sqo.RingEntries), 12, 4),
			abiF("flags", unsafe.Offsetof(sqo.Flags), unsafe.Sizeof(sqo.Flags), 16, 4),
			abiF("dropped", unsafe.Offsetof(sqo.Dropped), unsafe.Sizeof(sqo.Dropped), 20, 4),
			abiF("array", unsafe.Offsetof(sqo.Array), unsafe.Sizeof(sqo.Array), 24, 4),
			abiF("resv1", unsafe.Offsetof(sqo.Resv1), unsafe.Sizeof(sqo.Resv1), 28, 4),
			abiF("user_addr", unsafe.Offsetof(sqo.UserAddr), unsafe.Sizeof(sqo.UserAddr), 32, 8),
		}, unsafe.Alignof(sqo), 8},
		{"struct io_cqring_offsets", unsafe.Sizeof(cqo), 40, []abiField{
			abiF("head", unsafe.Offsetof(cqo.Head), unsafe.Sizeof(cqo.Head), 0, 4),
			abiF("tail", unsafe.Offsetof(cqo.Tail), unsafe.Sizeof(cqo.Tail), 4, 4),
			abiF("ring_mask", unsafe.Offsetof(cqo.RingMask), unsafe.Sizeof(cqo.RingMask), 8, 4),
			abiF("ring_entries", unsafe.Offsetof(cqo.RingEntries), unsafe.Sizeof(cqo.RingEntries), 12, 4),
			abiF("overflow", unsafe.Offsetof(cqo.Overflow), unsafe.Sizeof(cqo.Overflow), 16, 4),
			abiF("cqes", unsafe.Offsetof(cqo.CQEs), unsafe.Sizeof(cqo.CQEs), 20, 4),
			abiF("flags", unsafe.Offsetof(cqo.Flags), unsafe.Sizeof(cqo.Flags), 24, 4),
			abiF("resv1", unsafe.Offsetof(cqo.Resv1), unsafe.Sizeof(cqo.Resv1), 28, 4),
			abiF("user_addr", unsafe.Offsetof(cqo.UserAddr), unsafe.Sizeof(cqo.UserAddr), 32, 8),
		}, unsafe.Alignof(cqo), 8},
		{"struct io_uring_getevents_arg", unsafe.Sizeof(gea), 24, []abiField{
			abiF("sigmask", unsafe.Offsetof(gea.Sigmask), unsafe.Sizeof(gea.Sigmask), 0, 8),
			abiF("sigmask_sz", unsafe.Offsetof(gea.SigmaskSz), unsafe.Sizeof(gea.SigmaskSz), 8, 4),
			abiF("min_wait_usec/pad", unsafe.Offsetof(gea.MinWaitUs), unsafe.Sizeof(gea.MinWaitUs), 12, 4),
			abiF("ts", unsafe.Offsetof(gea.Ts), unsafe.Sizeof(gea.Ts), 16, 8),
		}, unsafe.Alignof(gea), 8},
		{"struct __kernel_timespec", unsafe.Sizeof(ts), 16, []abiField{
			abiF("tv_sec", unsafe.Offsetof(ts.Sec), unsafe.Sizeof(ts.Sec), 0, 8),
			abiF("tv_nsec", unsafe.Offsetof(ts.Nsec), unsafe.Sizeof(ts.Nsec), 8, 8),
		}, unsafe.Alignof(ts), 8},
		{"struct io_uring_buf", unsafe.Sizeof(bre), 16, []abiField{
			abiF("addr", unsafe.Offsetof(bre.Addr), unsafe.Sizeof(bre.Addr), 0, 8),
			abiF("len", unsafe.Offsetof(bre.Len), unsafe.Sizeof(bre.Len), 8, 4),
			abiF("bid", unsafe.Offsetof(bre.Bid), unsafe.Sizeof(bre.Bid), 12, 2),
			// struct io_uring_buf_ring overlays its first entry with
			// { resv1 u64; resv2 u32; resv3 u16; tail u16 }: the ring tail
			// is the resv field of entry 0.
			abiF("resv (io_uring_buf_ring.tail in entry 0)", unsafe.Offsetof(bre.Resv), unsafe.Sizeof(bre.Resv), 14, 2),
		}, unsafe.Alignof(bre), 8},
		{"struct io_uring_buf_reg", unsafe.Sizeof(breg), 40, []abiField{
			abiF("ring_addr", unsafe.Offsetof(breg.RingAddr), unsafe.Sizeof(breg.RingAddr), 0, 8),
			abiF("ring_entries", unsafe.Offsetof(breg.RingEntries), unsafe.Sizeof(breg.RingEntries), 8, 4),
			abiF("bgid", unsafe.Offsetof(breg.Bgid), unsafe.Sizeof(breg.Bgid), 12, 2),
			abiF("flags/pad", unsafe.Offsetof(breg.Flags), unsafe.Sizeof(breg.Flags), 14, 2),
			abiF("resv[3]", unsafe.Offsetof(breg.Resv), unsafe.Sizeof(breg.Resv), 16, 24),
		}, unsafe.Alignof(breg), 8},
		{"struct io_uring_rsrc_update", unsafe.Sizeof(rfu), 16, []abiField{
			abiF("offset", unsafe.Offsetof(rfu.Offset), unsafe.Sizeof(rfu.Offset), 0, 4),
			abiF("resv", unsafe.Offsetof(rfu.Resv), unsafe.Sizeof(rfu.Resv), 4, 4),
			abiF("data", unsafe.Offsetof(rfu.Data), unsafe.Sizeof(rfu.Data), 8, 8),
		}, unsafe.Alignof(rfu), 8},
	}
}

func TestABILayout(t *testing.T) {
	is64 := unsafe.Sizeof(uintptr(0)) == 8
	for _, s := range abiStructs() {
		t.Run(s.kernel, func(t *testing.T) {
			if s.gotSize != s.wantSize {
				t.Errorf("sizeof(%s) = %d, kernel has %d", s.kernel, s.gotSize, s.wantSize)
			}
			// 32-bit Go aligns uint64 to 4 only; the kernel ABI (and the
			// mmap'd rings) need 8 on the 64-bit targets we run on.
			if is64 && s.gotAlign < s.minAln {
				t.Errorf("alignof(%s) = %d, want >= %d", s.kernel, s.gotAlign, s.minAln)
			}
			var covered uintptr
			for _, fl := range s.fields {
				if fl.gotOff != fl.wantOff || fl.gotSize != fl.wantSize {
					t.Errorf("%s.%s at offset %d size %d, kernel has offset %d size %d",
						s.kernel, fl.kernel, fl.gotOff, fl.gotSize, fl.wantOff, fl.wantSize)
				}
				covered += fl.gotSize
			}
			// Every byte is some field: no hidden padding the kernel
			// would read as a field of its own.
			if covered != s.gotSize {
				t.Errorf("%s: fields cover %d of %d bytes", s.kernel, covered, s.gotSize)
			}
		})
	}
}

// TestABIBufRingTail checks the overlay that bufring.go relies on: in a
// provided-buffer ring, the uint16 tail is bytes 14..15 of entry 0.
func TestABIBufRingTail(t *testing.T) {
	var ring [4]BufRingEntry
	ring[0].Resv = 0xBEEF
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&ring[0])), unsafe.Sizeof(ring))
	if got := uint16(raw[14]) | uint16(raw[15])<<8; abiLittleEndian() && got != 0xBEEF {
		t.Fatalf("tail bytes 14..15 of entry 0 = %#x, want 0xbeef", got)
	}
	if d := uintptr(unsafe.Pointer(&ring[1])) - uintptr(unsafe.Pointer(&ring[0])); d != 16 {
		t.Fatalf("entry stride = %d, want 16", d)
	}
}

func abiLittleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// TestABIXSys checks the x/sys/unix types that our prep helpers hand to the
// kernel by address: struct iovec (READV/WRITEV), struct msghdr (SENDMSG),
// struct sockaddr storage (ACCEPT/CONNECT) and struct __kernel_timespec,
// which unix.Timespec matches on 64-bit targets. x/sys/unix v0.40.0 defines
// no IORING_* constants or io_uring structs, so there is nothing more of
// ours to compare it with.
func TestABIXSys(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("kernel struct sizes below are the 64-bit ones")
	}
	var ts unix.Timespec
	if unsafe.Sizeof(ts) != unsafe.Sizeof(Timespec{}) ||
		unsafe.Offsetof(ts.Nsec) != unsafe.Offsetof(Timespec{}.Nsec) {
		t.Errorf("unix.Timespec layout differs from Timespec (struct __kernel_timespec)")
	}
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"struct iovec", unix.SizeofIovec, 16},
		{"struct msghdr", unix.SizeofMsghdr, 56},
		{"struct sockaddr (RawSockaddrAny)", unix.SizeofSockaddrAny, 112},
		{"socklen_t (accept addrlen, *uint32)", unsafe.Sizeof(uint32(0)), 4},
	} {
		if c.got != c.want {
			t.Errorf("sizeof(%s) = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestABIOpcodeOrder pins the opcodes to their position in enum io_uring_op
// without the kernel header: element i of the list must be opcode i.
func TestABIOpcodeOrder(t *testing.T) {
	ops := []Opcode{
		OpNop, OpReadv, OpWritev, OpFsync, OpReadFixed, OpWriteFixed,
		OpPollAdd, OpPollRemove, OpSyncFileRange, OpSendmsg, OpRecvmsg,
		OpTimeout, OpTimeoutRemove, OpAccept, OpAsyncCancel, OpLinkTimeout,
		OpConnect, OpFallocate, OpOpenat, OpClose, OpFilesUpdate, OpStatx,
		OpRead, OpWrite, OpFadvise, OpMadvise, OpSend, OpRecv, OpOpenat2,
		OpEpollCtl, OpSplice, OpProvideBuffers, OpRemoveBuffers, OpTee,
		OpShutdown, OpRenameat, OpUnlinkat, OpMkdirat, OpSymlinkat, OpLinkat,
		OpMsgRing, OpFsetxattr, OpSetxattr, OpFgetxattr, OpGetxattr, OpSocket,
		OpUringCmd, OpSendZC, OpSendmsgZC, OpReadMultishot, OpWaitid,
		OpFutexWait, OpFutexWake, OpFutexWaitv, OpFixedFdInstall, OpFtruncate,
		OpBind, OpListen, OpRecvZC, OpEpollWait, OpReadvFixed, OpWritevFixed,
	}
	for i, op := range ops {
		if int(op) != i {
			t.Errorf("opcode at enum position %d has value %d", i, op)
		}
	}
}

// TestABIFlagBits pins every flag family to its bit positions in the
// kernel header, again without needing the header.
func TestABIFlagBits(t *testing.T) {
	check := func(family string, bits []uint64) {
		t.Helper()
		for i, b := range bits {
			if b != 1<<i {
				t.Errorf("%s: flag #%d = %#x, want %#x", family, i, b, uint64(1)<<i)
			}
		}
	}
	u8 := func(v ...uint8) (r []uint64) {
		for _, x := range v {
			r = append(r, uint64(x))
		}
		return r
	}
	u16 := func(v ...uint16) (r []uint64) {
		for _, x := range v {
			r = append(r, uint64(x))
		}
		return r
	}
	u32 := func(v ...uint32) (r []uint64) {
		for _, x := range v {
			r = append(r, uint64(x))
		}
		return r
	}
	check("IOSQE_*", u8(SQEFixedFile, SQEIODrain, SQEIOLink, SQEIOHardlink, SQEAsync, SQEBufferSelect, SQECQESkipSuccess))
	check("IORING_SETUP_*", u32(SetupIOPoll, SetupSQPoll, SetupSQAff, SetupCQSize, SetupClamp, SetupAttachWQ,
		SetupRDisabled, SetupSubmitAll, SetupCoopTaskrun, SetupTaskrunFlag, SetupSQE128, SetupCQE32,
		SetupSingleIssuer, SetupDeferTaskrun, SetupNoMmap, SetupRegisteredFdOnly, SetupNoSQArray, SetupHybridIOPoll))
	check("IORING_FEAT_*", u32(FeatSingleMmap, FeatNoDrop, FeatSubmitStable, FeatRWCurPos, FeatCurPersonality,
		FeatFastPoll, FeatPoll32Bits, FeatSQPollNonfixed, FeatExtArg, FeatNativeWorkers, FeatRsrcTags,
		FeatCQESkip, FeatLinkedFile, FeatRegRegRing, FeatRecvSendBundle, FeatMinTimeout, FeatRWAttr, FeatNoIOWait))
	check("IORING_ENTER_*", u32(EnterGetEvents, EnterSQWakeup, EnterSQWait, EnterExtArg, EnterRegisteredRing,
		EnterAbsTimer, EnterExtArgReg, EnterNoIOWait))
	check("IORING_SQ_*", u32(SQNeedWakeup, SQCQOverflow, SQTaskrun))
	check("IORING_CQE_F_*", u32(CQEFBuffer, CQEFMore, CQEFSockNonempty, CQEFNotif, CQEFBufMore))
	check("IORING_POLL_*", u32(PollAddMulti, PollUpdateEvents, PollUpdateUserData, PollAddLevel))
	check("IORING_ASYNC_CANCEL_*", u32(AsyncCancelAll, AsyncCancelFd, AsyncCancelAny, AsyncCancelFdFixed,
		AsyncCancelUserdata, AsyncCancelOp))
	check("IORING_RECVSEND_*", u16(RecvsendPollFirst, RecvMultishot, RecvsendFixedBuf, SendZCReportUsage, RecvsendBundle))
	check("IORING_ACCEPT_*", u16(AcceptMultishot, AcceptDontWait, AcceptPollFirst))

	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"IORING_CQE_BUFFER_SHIFT", CQEBufferShift, 16},
		{"IORING_OFF_SQ_RING", offSQRing, 0},
		{"IORING_OFF_SQES", offSQEs, 0x10000000},
		{"IORING_REGISTER_PBUF_RING", registerPbufRing, 22},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

// TestABIConstsMatchKernelHeader compares every constant of abi_consts.go
// whose comment names a kernel symbol with that symbol's value in the
// installed uapi header. It skips when the header is absent; set
// RINGLOOP_IO_URING_H to check against another copy (a newer kernel tree's
// include/uapi/linux/io_uring.h names more of our constants).
func TestABIConstsMatchKernelHeader(t *testing.T) {
	path := os.Getenv("RINGLOOP_IO_URING_H")
	if path == "" {
		path = "/usr/include/linux/io_uring.h"
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("kernel header not available (%v); install linux-libc-dev to run this cross-check", err)
	}
	kernel := abiParseCHeader(string(src))
	if len(kernel) < 100 {
		t.Fatalf("parsed only %d constants from %s; parser out of date?", len(kernel), path)
	}
	ours := abiOurKernelConsts(t, "abi_consts.go")
	if len(ours) < 140 {
		t.Fatalf("found only %d constants naming a kernel symbol in abi_consts.go", len(ours))
	}

	var checked int
	var absent []string
	for _, c := range ours {
		want, ok := kernel[c.kernel]
		if !ok {
			absent = append(absent, c.kernel)
			continue
		}
		checked++
		if got := c.normalize(want); got.Cmp(c.value) != 0 {
			t.Errorf("%s (%s) = %s, %s has %s", c.goName, c.kernel, c.value, path, got)
		}
	}
	t.Logf("%d constants checked against %s; %d not defined there (newer than the header): %s",
		checked, path, len(absent), strings.Join(absent, " "))
	if checked < 100 {
		t.Errorf("only %d constants checked", checked)
	}
}

// abiOurConst is a constant of abi_consts.go with the kernel symbol it mirrors.
type abiOurConst struct {
	goName, kernel string
	value          *big.Int
	bits           int64 // width of the Go type; 0 when untyped
	unsigned       bool
}

// normalize converts a header value (C arithmetic, possibly ~0 or -2) to
// what the Go constant of this width holds.
func (c abiOurConst) normalize(v *big.Int) *big.Int {
	if c.bits == 0 {
		return v
	}
	mod := new(big.Int).Lsh(big.NewInt(1), uint(c.bits))
	r := new(big.Int).Mod(v, mod)
	if !c.unsigned && r.Cmp(new(big.Int).Rsh(mod, 1)) >= 0 {
		r.Sub(r, mod)
	}
	return r
}

var abiKernelSymRE = regexp.MustCompile(`\b(IORING_[A-Z0-9_]+|IOSQE_[A-Z0-9_]+|IOU_[A-Z0-9_]+|IO_URING_[A-Z0-9_]+)\b`)

// abiOurKernelConsts type-checks file (it imports nothing) and returns each
// constant whose trailing comment starts with a kernel symbol, or whose doc
// comment names one when it is declared alone.
func abiOurKernelConsts(t *testing.T, file string) []abiOurConst {
	t.Helper()
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Sizes: types.SizesFor("gc", "amd64")}
	if _, err := conf.Check("ring", fset, []*ast.File{af}, info); err != nil {
		t.Fatalf("type-checking %s alone: %v", file, err)
	}
	var out []abiOurConst
	for _, decl := range af.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			var sym string
			if vs.Comment != nil {
				if w := strings.Fields(vs.Comment.Text()); len(w) > 0 && abiKernelSymRE.MatchString(w[0]) {
					sym = strings.TrimRight(w[0], ":,.")
				}
			}
			if sym == "" && len(gd.Specs) == 1 {
				for _, cg := range []*ast.CommentGroup{gd.Doc, vs.Doc} {
					if cg != nil {
						if m := abiKernelSymRE.FindAllString(cg.Text(), -1); len(m) > 0 {
							sym = m[len(m)-1]
						}
					}
				}
			}
			if sym == "" {
				continue
			}
			for _, name := range vs.Names {
				obj := info.Defs[name].(*types.Const)
				v, ok := new(big.Int).SetString(obj.Val().ExactString(), 10)
				if !ok || obj.Val().Kind() != constant.Int {
					t.Fatalf("%s: not an integer constant", name.Name)
				}
				c := abiOurConst{goName: name.Name, kernel: sym, value: v}
				if b, ok := obj.Type().Underlying().(*types.Basic); ok && b.Info()&types.IsUntyped == 0 {
					c.bits = conf.Sizes.Sizeof(b) * 8
					c.unsigned = b.Info()&types.IsUnsigned != 0
				}
				out = append(out, c)
			}
		}
	}
	return out
}

var (
	abiCCommentRE  = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	abiCDefineRE   = regexp.MustCompile(`^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)\s+(.+?)\s*$`)
	abiCEnumOpenRE = regexp.MustCompile(`^\s*enum\b[^{;]*\{`)
	abiCEnumItemRE = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*(.+?))?\s*$`)
	abiCIntSuffix  = regexp.MustCompile(`\b(0[xX][0-9a-fA-F]+|[0-9]+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b`)
)

// abiParseCHeader returns the integer value of every #define and enum member
// of a uapi header whose value is a constant expression of literals, other
// such symbols and the operators () ~ - + | & << >>.
func abiParseCHeader(src string) map[string]*big.Int {
	src = abiCCommentRE.ReplaceAllString(src, "")
	vals := map[string]*big.Int{}
	inEnum := false
	next := big.NewInt(0)
	for _, line := range strings.Split(src, "\n") {
		if !inEnum {
			if m := abiCDefineRE.FindStringSubmatch(line); m != nil {
				if v, err := abiEvalC(m[2], vals); err == nil {
					vals[m[1]] = v
				}
				continue
			}
			if loc := abiCEnumOpenRE.FindStringIndex(line); loc != nil {
				inEnum, next = true, big.NewInt(0)
				line = line[loc[1]:]
			} else {
				continue
			}
		}
		if i := strings.Index(line, "}"); i >= 0 {
			line, inEnum = line[:i], false
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, item := range strings.Split(line, ",") {
			m := abiCEnumItemRE.FindStringSubmatch(item)
			if m == nil {
				continue
			}
			if m[2] != "" {
				v, err := abiEvalC(m[2], vals)
				if err != nil {
					continue
				}
				next = v
			}
			vals[m[1]] = new(big.Int).Set(next)
			next = new(big.Int).Add(next, big.NewInt(1))
		}
	}
	return vals
}

// abiEvalC evaluates a C integer constant expression by parsing it as Go.
func abiEvalC(expr string, syms map[string]*big.Int) (*big.Int, error) {
	expr = abiCIntSuffix.ReplaceAllString(expr, "$1")
	expr = strings.ReplaceAll(expr, "~", "^")
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var eval func(ast.Expr) (*big.Int, error)
	eval = func(e ast.Expr) (*big.Int, error) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.INT {
				return nil, fmt.Errorf("literal %s", e.Value)
			}
			u, err := strconv.ParseUint(e.Value, 0, 64)
			if err != nil {
				return nil, err
			}
			return new(big.Int).SetUint64(u), nil
		case *ast.Ident:
			if v, ok := syms[e.Name]; ok {
				return v, nil
			}
			return nil, fmt.Errorf("unknown %s", e.Name)
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.UnaryExpr:
			x, err := eval(e.X)
			if err != nil {
				return nil, err
			}
			switch e.Op {
			case token.SUB:
				return new(big.Int).Neg(x), nil
			case token.ADD:
				return x, nil
			case token.XOR: // C ~
				return new(big.Int).Not(x), nil
			}
		case *ast.BinaryExpr:
			x, err := eval(e.X)
			if err != nil {
				return nil, err
			}
			y, err := eval(e.Y)
			if err != nil {
				return nil, err
			}
			switch e.Op {
			case token.OR:
				return new(big.Int).Or(x, y), nil
			case token.AND:
				return new(big.Int).And(x, y), nil
			case token.ADD:
				return new(big.Int).Add(x, y), nil
			case token.SUB:
				return new(big.Int).Sub(x, y), nil
			case token.SHL:
				return new(big.Int).Lsh(x, uint(y.Uint64())), nil
			case token.SHR:
				return new(big.Int).Rsh(x, uint(y.Uint64())), nil
			}
		}
		return nil, fmt.Errorf("unsupported expression %T", e)
	}
	return eval(e)
}
