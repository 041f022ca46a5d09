package ring

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kernel names a Linux release by major and minor version. A ring made for
// a Kernel (NewFor) uses only what that release offers, whatever the
// running kernel has: a profile can only take features away, never add
// them. The zero Kernel is the running kernel, with nothing taken away.
//
// Every version a profile acts on comes from one table (KernelTable),
// which docs/kernel-support.md is checked against.
type Kernel struct {
	Major, Minor uint16
}

// ParseKernel reads a release as "5.15", "6.1" or a uname(2) release such
// as "5.15.0-91-generic" (only major.minor count). The empty string is the
// zero Kernel. A release before 5.1, which has no io_uring, is accepted: a
// ring for it is refused like one on such a kernel.
func ParseKernel(s string) (Kernel, error) {
	if s == "" {
		return Kernel{}, nil
	}
	bad := func() (Kernel, error) {
		return Kernel{}, fmt.Errorf("ring: kernel version %q: want <major>.<minor>, as 5.15 or 6.1", s)
	}
	major, rest, ok := strings.Cut(s, ".")
	if !ok {
		return bad()
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	if end == 0 || (end < len(rest) && rest[end] != '.' && rest[end] != '-') {
		return bad()
	}
	maj, err1 := strconv.ParseUint(major, 10, 16)
	min, err2 := strconv.ParseUint(rest[:end], 10, 16)
	if err1 != nil || err2 != nil || maj == 0 {
		return bad()
	}
	return Kernel{Major: uint16(maj), Minor: uint16(min)}, nil
}

// MustKernel is ParseKernel for constants; it panics on a malformed one.
func MustKernel(s string) Kernel {
	k, err := ParseKernel(s)
	if err != nil {
		panic(err)
	}
	return k
}

// IsZero reports whether k is the zero Kernel (no profile).
func (k Kernel) IsZero() bool { return k == Kernel{} }

// String returns "major.minor", or "" for the zero Kernel.
func (k Kernel) String() string {
	if k.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d.%d", k.Major, k.Minor)
}

// Has reports whether a kernel of profile k offers what first came in
// release v. The zero Kernel has everything (the running kernel decides).
func (k Kernel) Has(v Kernel) bool {
	if k.IsZero() {
		return true
	}
	return k.Major > v.Major || (k.Major == v.Major && k.Minor >= v.Minor)
}

// FeatureKind says what a row of the kernel table describes.
type FeatureKind uint8

const (
	KindSetupFlag  FeatureKind = iota + 1 // an IORING_SETUP_* flag (Bits)
	KindFeatureBit                        // an IORING_FEAT_* bit (Bits)
	KindOpcode                            // an IORING_OP_* opcode (Bits)
	KindRegister                          // an io_uring_register operation
	KindBehaviour                         // a capability without a flag of its own (multishot, lengths)
)

// KernelFeature is one row of the kernel table: a capability and the first
// release that has it.
type KernelFeature struct {
	Name  string      // the kernel's name for it
	Since Kernel      // first release with it
	Kind  FeatureKind // what Bits means
	Bits  uint32      // the flag, bit or opcode (KindSetupFlag, KindFeatureBit, KindOpcode)
	Doc   string      // the first column of its row in docs/kernel-support.md, if it has one
}

var (
	v5_1  = Kernel{5, 1}
	v5_2  = Kernel{5, 2}
	v5_3  = Kernel{5, 3}
	v5_4  = Kernel{5, 4}
	v5_5  = Kernel{5, 5}
	v5_6  = Kernel{5, 6}
	v5_7  = Kernel{5, 7}
	v5_8  = Kernel{5, 8}
	v5_9  = Kernel{5, 9}
	v5_10 = Kernel{5, 10}
	v5_11 = Kernel{5, 11}
	v5_12 = Kernel{5, 12}
	v5_13 = Kernel{5, 13}
	v5_15 = Kernel{5, 15}
	v5_17 = Kernel{5, 17}
	v5_18 = Kernel{5, 18}
	v5_19 = Kernel{5, 19}
	v6_0  = Kernel{6, 0}
	v6_1  = Kernel{6, 1}
	v6_3  = Kernel{6, 3}
	v6_4  = Kernel{6, 4}
	v6_5  = Kernel{6, 5}
	v6_6  = Kernel{6, 6}
	v6_7  = Kernel{6, 7}
	v6_8  = Kernel{6, 8}
	v6_9  = Kernel{6, 9}
	v6_10 = Kernel{6, 10}
	v6_11 = Kernel{6, 11}
	v6_12 = Kernel{6, 12}
	v6_13 = Kernel{6, 13}
	v6_14 = Kernel{6, 14}
	v6_15 = Kernel{6, 15}
	v6_17 = Kernel{6, 17}
)

// Capabilities without a flag of their own, by name (KindBehaviour and
// KindRegister rows). Callers ask Kernel.HasFeature for them.
const (
	FeatureRingSetup        = "io_uring_setup"
	FeatureProbe            = "IORING_REGISTER_PROBE"
	FeatureRingFds          = "IORING_REGISTER_RING_FDS"
	FeatureSparseFiles      = "IORING_RSRC_REGISTER_SPARSE"
	FeatureBufRing          = "IORING_REGISTER_PBUF_RING"
	FeatureMultishotAccept  = "IORING_ACCEPT_MULTISHOT"
	FeatureMultishotRecv    = "IORING_RECV_MULTISHOT"
	FeatureMultishotRecvLen = "multishot RECV with a length"
)

// kernelTable is the one table of kernel versions. docs/kernel-support.md
// is checked against the rows with a Doc name (kernel_doc_test.go).
var kernelTable = []KernelFeature{
	{Name: FeatureRingSetup, Since: v5_1, Kind: KindBehaviour, Doc: "io_uring itself (`io_uring_setup`)"},

	// Setup flags.
	{Name: "IORING_SETUP_IOPOLL", Since: v5_1, Kind: KindSetupFlag, Bits: SetupIOPoll},
	{Name: "IORING_SETUP_SQPOLL", Since: v5_1, Kind: KindSetupFlag, Bits: SetupSQPoll},
	{Name: "IORING_SETUP_SQ_AFF", Since: v5_1, Kind: KindSetupFlag, Bits: SetupSQAff},
	{Name: "IORING_SETUP_CQSIZE", Since: v5_5, Kind: KindSetupFlag, Bits: SetupCQSize},
	{Name: "IORING_SETUP_CLAMP", Since: v5_6, Kind: KindSetupFlag, Bits: SetupClamp},
	{Name: "IORING_SETUP_ATTACH_WQ", Since: v5_6, Kind: KindSetupFlag, Bits: SetupAttachWQ},
	{Name: "IORING_SETUP_R_DISABLED", Since: v5_10, Kind: KindSetupFlag, Bits: SetupRDisabled, Doc: "rings created disabled (`R_DISABLED`, `REGISTER_ENABLE_RINGS`)"},
	{Name: "IORING_SETUP_SUBMIT_ALL", Since: v5_18, Kind: KindSetupFlag, Bits: SetupSubmitAll, Doc: "`SUBMIT_ALL`"},
	{Name: "IORING_SETUP_COOP_TASKRUN", Since: v5_19, Kind: KindSetupFlag, Bits: SetupCoopTaskrun, Doc: "`COOP_TASKRUN`, `TASKRUN_FLAG`"},
	{Name: "IORING_SETUP_TASKRUN_FLAG", Since: v5_19, Kind: KindSetupFlag, Bits: SetupTaskrunFlag},
	{Name: "IORING_SETUP_SQE128", Since: v5_19, Kind: KindSetupFlag, Bits: SetupSQE128},
	{Name: "IORING_SETUP_CQE32", Since: v5_19, Kind: KindSetupFlag, Bits: SetupCQE32},
	{Name: "IORING_SETUP_SINGLE_ISSUER", Since: v6_0, Kind: KindSetupFlag, Bits: SetupSingleIssuer, Doc: "`SINGLE_ISSUER`"},
	{Name: "IORING_SETUP_DEFER_TASKRUN", Since: v6_1, Kind: KindSetupFlag, Bits: SetupDeferTaskrun, Doc: "`DEFER_TASKRUN` (requires `SINGLE_ISSUER`)"},
	{Name: "IORING_SETUP_NO_MMAP", Since: v6_5, Kind: KindSetupFlag, Bits: SetupNoMmap},
	{Name: "IORING_SETUP_REGISTERED_FD_ONLY", Since: v6_5, Kind: KindSetupFlag, Bits: SetupRegisteredFdOnly},
	{Name: "IORING_SETUP_NO_SQARRAY", Since: v6_6, Kind: KindSetupFlag, Bits: SetupNoSQArray, Doc: "`NO_SQARRAY`"},
	{Name: "IORING_SETUP_HYBRID_IOPOLL", Since: v6_13, Kind: KindSetupFlag, Bits: SetupHybridIOPoll},

	// Feature bits.
	{Name: "IORING_FEAT_SINGLE_MMAP", Since: v5_4, Kind: KindFeatureBit, Bits: FeatSingleMmap, Doc: "single mmap of SQ and CQ rings (`FEAT_SINGLE_MMAP`)"},
	{Name: "IORING_FEAT_NODROP", Since: v5_5, Kind: KindFeatureBit, Bits: FeatNoDrop, Doc: "no dropped CQEs on overflow (`FEAT_NODROP`)"},
	{Name: "IORING_FEAT_SUBMIT_STABLE", Since: v5_5, Kind: KindFeatureBit, Bits: FeatSubmitStable},
	{Name: "IORING_FEAT_RW_CUR_POS", Since: v5_6, Kind: KindFeatureBit, Bits: FeatRWCurPos},
	{Name: "IORING_FEAT_CUR_PERSONALITY", Since: v5_6, Kind: KindFeatureBit, Bits: FeatCurPersonality},
	{Name: "IORING_FEAT_FAST_POLL", Since: v5_7, Kind: KindFeatureBit, Bits: FeatFastPoll},
	{Name: "IORING_FEAT_POLL_32BITS", Since: v5_9, Kind: KindFeatureBit, Bits: FeatPoll32Bits},
	{Name: "IORING_FEAT_SQPOLL_NONFIXED", Since: v5_11, Kind: KindFeatureBit, Bits: FeatSQPollNonfixed},
	{Name: "IORING_FEAT_EXT_ARG", Since: v5_11, Kind: KindFeatureBit, Bits: FeatExtArg, Doc: "waits with timeout (`ENTER_EXT_ARG`, `FEAT_EXT_ARG`)"},
	{Name: "IORING_FEAT_NATIVE_WORKERS", Since: v5_12, Kind: KindFeatureBit, Bits: FeatNativeWorkers},
	{Name: "IORING_FEAT_RSRC_TAGS", Since: v5_13, Kind: KindFeatureBit, Bits: FeatRsrcTags},
	{Name: "IORING_FEAT_CQE_SKIP", Since: v5_17, Kind: KindFeatureBit, Bits: FeatCQESkip},
	{Name: "IORING_FEAT_LINKED_FILE", Since: v5_17, Kind: KindFeatureBit, Bits: FeatLinkedFile},
	{Name: "IORING_FEAT_REG_REG_RING", Since: v6_3, Kind: KindFeatureBit, Bits: FeatRegRegRing},
	{Name: "IORING_FEAT_RECVSEND_BUNDLE", Since: v6_10, Kind: KindFeatureBit, Bits: FeatRecvSendBundle, Doc: "receive bundles (`IORING_RECVSEND_BUNDLE`, `FEAT_RECVSEND_BUNDLE`)"},
	{Name: "IORING_FEAT_MIN_TIMEOUT", Since: v6_12, Kind: KindFeatureBit, Bits: FeatMinTimeout, Doc: "`ENTER_ABS_TIMER`, `FEAT_MIN_TIMEOUT`"},
	{Name: "IORING_FEAT_RW_ATTR", Since: v6_14, Kind: KindFeatureBit, Bits: FeatRWAttr},
	{Name: "IORING_FEAT_NO_IOWAIT", Since: v6_15, Kind: KindFeatureBit, Bits: FeatNoIOWait},

	// Register operations and capabilities without a flag.
	{Name: FeatureProbe, Since: v5_6, Kind: KindRegister, Doc: "opcode probe (`REGISTER_PROBE`)"},
	{Name: FeatureRingFds, Since: v5_18, Kind: KindRegister, Doc: "registered ring fd (`REGISTER_RING_FDS`, `ENTER_REGISTERED_RING`)"},
	{Name: FeatureSparseFiles, Since: v5_19, Kind: KindRegister, Doc: "sparse file tables (`REGISTER_FILES2` + `RSRC_REGISTER_SPARSE`)"},
	{Name: FeatureBufRing, Since: v5_19, Kind: KindRegister, Doc: "provided-buffer rings (`REGISTER_PBUF_RING`)"},
	{Name: "IOU_PBUF_RING_MMAP", Since: v6_4, Kind: KindRegister, Doc: "kernel-allocated buffer rings (`IOU_PBUF_RING_MMAP`)"},
	{Name: FeatureMultishotAccept, Since: v5_19, Kind: KindBehaviour, Doc: "multishot `ACCEPT`"},
	{Name: FeatureMultishotRecv, Since: v6_0, Kind: KindBehaviour, Doc: "multishot `RECV` with buffer select"},
	{Name: FeatureMultishotRecvLen, Since: v6_17, Kind: KindBehaviour, Doc: "a length on multishot `RECV` (per-completion cap)"},

	// Opcodes, in number order: each release adds the next few.
	{Name: "IORING_OP_NOP", Since: v5_1, Kind: KindOpcode, Bits: uint32(OpNop)},
	{Name: "IORING_OP_SYNC_FILE_RANGE", Since: v5_2, Kind: KindOpcode, Bits: uint32(OpSyncFileRange)},
	{Name: "IORING_OP_SENDMSG", Since: v5_3, Kind: KindOpcode, Bits: uint32(OpSendmsg)},
	{Name: "IORING_OP_TIMEOUT", Since: v5_4, Kind: KindOpcode, Bits: uint32(OpTimeout)},
	{Name: "IORING_OP_TIMEOUT_REMOVE", Since: v5_5, Kind: KindOpcode, Bits: uint32(OpTimeoutRemove)},
	{Name: "IORING_OP_FALLOCATE", Since: v5_6, Kind: KindOpcode, Bits: uint32(OpFallocate)},
	{Name: "IORING_OP_SEND", Since: v5_6, Kind: KindOpcode, Bits: uint32(OpSend), Doc: "`IORING_OP_SEND` / `RECV` / `ACCEPT` / `CONNECT` / `CLOSE`"},
	{Name: "IORING_OP_SPLICE", Since: v5_7, Kind: KindOpcode, Bits: uint32(OpSplice)},
	{Name: "IORING_OP_TEE", Since: v5_8, Kind: KindOpcode, Bits: uint32(OpTee)},
	{Name: "IORING_OP_SHUTDOWN", Since: v5_11, Kind: KindOpcode, Bits: uint32(OpShutdown), Doc: "`IORING_OP_SHUTDOWN`"},
	{Name: "IORING_OP_MKDIRAT", Since: v5_15, Kind: KindOpcode, Bits: uint32(OpMkdirat)},
	{Name: "IORING_OP_MSG_RING", Since: v5_18, Kind: KindOpcode, Bits: uint32(OpMsgRing), Doc: "`IORING_OP_MSG_RING` (data)"},
	{Name: "IORING_OP_FSETXATTR", Since: v5_19, Kind: KindOpcode, Bits: uint32(OpFsetxattr)},
	{Name: "IORING_OP_SOCKET", Since: v5_19, Kind: KindOpcode, Bits: uint32(OpSocket), Doc: "`IORING_OP_SOCKET`"},
	{Name: "IORING_OP_SEND_ZC", Since: v6_0, Kind: KindOpcode, Bits: uint32(OpSendZC), Doc: "`IORING_OP_SEND_ZC` (+ `CQE_F_NOTIF`)"},
	{Name: "IORING_OP_SENDMSG_ZC", Since: v6_1, Kind: KindOpcode, Bits: uint32(OpSendmsgZC)},
	{Name: "IORING_OP_READ_MULTISHOT", Since: v6_7, Kind: KindOpcode, Bits: uint32(OpReadMultishot), Doc: "`IORING_OP_READ_MULTISHOT`"},
	{Name: "IORING_OP_FIXED_FD_INSTALL", Since: v6_8, Kind: KindOpcode, Bits: uint32(OpFixedFdInstall)},
	{Name: "IORING_OP_FTRUNCATE", Since: v6_9, Kind: KindOpcode, Bits: uint32(OpFtruncate)},
	{Name: "IORING_OP_BIND", Since: v6_11, Kind: KindOpcode, Bits: uint32(OpBind)},
	{Name: "IORING_OP_RECV_ZC", Since: v6_15, Kind: KindOpcode, Bits: uint32(OpRecvZC)},
}

// KernelTable returns the kernel table: every capability a profile acts on
// and the first release that has it. Opcode rows mark where each release's
// opcodes begin: every opcode from a row's up to the next row's came with
// that release.
func KernelTable() []KernelFeature { return slices.Clone(kernelTable) }

// SetupFlags returns the setup flags a kernel of profile k defines (every
// flag for the zero Kernel).
func (k Kernel) SetupFlags() uint32 { return k.bits(KindSetupFlag) }

// FeatureBits returns the IORING_FEAT_* bits a kernel of profile k can
// report (all of them for the zero Kernel).
func (k Kernel) FeatureBits() uint32 { return k.bits(KindFeatureBit) }

func (k Kernel) bits(kind FeatureKind) uint32 {
	if k.IsZero() {
		return ^uint32(0)
	}
	var b uint32
	for _, f := range kernelTable {
		if f.Kind == kind && k.Has(f.Since) {
			b |= f.Bits
		}
	}
	return b
}

// OpcodeLimit returns the first opcode a kernel of profile k does not have
// (opcodes are numbered in the order they were added); 256 for the zero
// Kernel.
func (k Kernel) OpcodeLimit() int {
	if k.IsZero() {
		return 256
	}
	limit := 0
	for _, f := range kernelTable {
		if f.Kind != KindOpcode {
			continue
		}
		if !k.Has(f.Since) {
			return int(f.Bits)
		}
		limit = 256
	}
	return limit
}

// HasFeature reports whether a kernel of profile k has the named
// capability (a Feature* constant or any Name of the table). Unknown
// names are reported missing.
func (k Kernel) HasFeature(name string) bool {
	v, ok := since(name)
	return ok && k.Has(v)
}

// since returns the first release with the named capability, and whether
// the table names it.
func since(name string) (Kernel, bool) {
	for _, f := range kernelTable {
		if f.Name == name {
			return f.Since, true
		}
	}
	return Kernel{}, false
}

// profileRefusal is the error an operation a profile takes away returns:
// it matches ErrNotSupported (an *UnsupportedError) and unix.EINVAL, as
// the older kernel's own refusal would.
func profileRefusal(k Kernel, name string) error {
	v, _ := since(name)
	return fmt.Errorf("%w (kernel profile %s): %w",
		&UnsupportedError{Op: name, MinKernel: v.String()}, k, unix.EINVAL)
}

// For returns p as a kernel of profile k would report it: without the
// opcodes k does not have. For the zero Kernel it returns p.
func (p *Probe) For(k Kernel) *Probe {
	if p == nil || k.IsZero() {
		return p
	}
	q := *p
	limit := k.OpcodeLimit()
	for op := limit; op < len(q.ops); op++ {
		q.ops[op] = false
	}
	if int(q.lastOp) >= limit && limit > 0 {
		q.lastOp = Opcode(limit - 1)
	}
	return &q
}

// setupFlagName names the lowest setup flag of flags.
func setupFlagName(flags uint32) string {
	for _, f := range kernelTable {
		if f.Kind == KindSetupFlag && flags&f.Bits != 0 {
			return f.Name
		}
	}
	return fmt.Sprintf("setup flags %#x", flags)
}

// SetupFlagSupported reports whether the running kernel accepts every bit
// of flags (the package's SetupFlagSupported) and a kernel of profile k
// defines them all.
func (k Kernel) SetupFlagSupported(flags uint32) bool {
	return SetupFlagSupported(flags) && flags&^k.SetupFlags() == 0
}
