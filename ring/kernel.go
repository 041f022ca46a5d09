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
// zero Kernel. A release below the floor (6.1) parses; NewFor refuses a
// ring for it.
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

// floor is the first release this binding runs on: NewFor refuses an
// older profile, and New a kernel without floorFeatures.
var floor = Kernel{6, 1}

// Capabilities without a flag of their own, by name (KindBehaviour and
// KindRegister rows). Callers ask Kernel.HasFeature for them.
const (
	FeatureRingFds          = "IORING_REGISTER_RING_FDS"
	FeatureBufRing          = "IORING_REGISTER_PBUF_RING"
	FeatureMultishotAccept  = "IORING_ACCEPT_MULTISHOT"
	FeatureMultishotRecv    = "IORING_RECV_MULTISHOT"
	FeatureMultishotRecvLen = "multishot RECV with a length"
)

// kernelTable is the one table of kernel versions. docs/kernel-support.md
// is checked against the rows with a Doc name (TestKernelTableMatchesDocs).
// The floor rows stand for every flag, feature bit and opcode up to 6.1;
// the rows before 6.1 name what a release below the floor lacks.
var kernelTable = []KernelFeature{
	{Name: "Linux 6.1 setup flags", Since: floor, Kind: KindSetupFlag, Bits: SetupDeferTaskrun<<1 - 1,
		Doc: "everything else the backend uses (`FEAT_SINGLE_MMAP`, `FEAT_NODROP`, `R_DISABLED`, `SUBMIT_ALL`, `TASKRUN_FLAG`, the socket opcodes)"},
	{Name: "Linux 6.1 feature bits", Since: floor, Kind: KindFeatureBit, Bits: FeatRegRegRing - 1},
	{Name: "Linux 6.1 opcodes", Since: floor, Kind: KindOpcode, Bits: 0},

	// What a release below the floor lacks (the loop's refusal names it).
	{Name: "IORING_FEAT_EXT_ARG", Since: Kernel{5, 11}, Kind: KindFeatureBit, Bits: FeatExtArg, Doc: "waits with timeout (`ENTER_EXT_ARG`, `FEAT_EXT_ARG`)"},
	{Name: FeatureRingFds, Since: Kernel{5, 18}, Kind: KindRegister, Doc: "registered ring fd (`REGISTER_RING_FDS`, `ENTER_REGISTERED_RING`)"},
	{Name: FeatureBufRing, Since: Kernel{5, 19}, Kind: KindRegister, Doc: "provided-buffer rings (`REGISTER_PBUF_RING`)"},
	{Name: FeatureMultishotAccept, Since: Kernel{5, 19}, Kind: KindBehaviour, Doc: "multishot `ACCEPT`"},
	{Name: FeatureMultishotRecv, Since: Kernel{6, 0}, Kind: KindBehaviour, Doc: "multishot `RECV` with buffer select"},
	{Name: "IORING_SETUP_SINGLE_ISSUER", Since: Kernel{6, 0}, Kind: KindSetupFlag, Bits: SetupSingleIssuer, Doc: "`SINGLE_ISSUER`"},
	{Name: "IORING_SETUP_DEFER_TASKRUN", Since: floor, Kind: KindSetupFlag, Bits: SetupDeferTaskrun, Doc: "`DEFER_TASKRUN` (requires `SINGLE_ISSUER`)"},

	// Setup flags after 6.1.
	{Name: "IORING_SETUP_NO_MMAP", Since: Kernel{6, 5}, Kind: KindSetupFlag, Bits: SetupNoMmap},
	{Name: "IORING_SETUP_REGISTERED_FD_ONLY", Since: Kernel{6, 5}, Kind: KindSetupFlag, Bits: SetupRegisteredFdOnly},
	{Name: "IORING_SETUP_NO_SQARRAY", Since: Kernel{6, 6}, Kind: KindSetupFlag, Bits: SetupNoSQArray, Doc: "`NO_SQARRAY`"},
	{Name: "IORING_SETUP_HYBRID_IOPOLL", Since: Kernel{6, 13}, Kind: KindSetupFlag, Bits: SetupHybridIOPoll},

	// Feature bits after 6.1.
	{Name: "IORING_FEAT_REG_REG_RING", Since: Kernel{6, 3}, Kind: KindFeatureBit, Bits: FeatRegRegRing},
	{Name: "IORING_FEAT_RECVSEND_BUNDLE", Since: Kernel{6, 10}, Kind: KindFeatureBit, Bits: FeatRecvSendBundle, Doc: "receive bundles (`IORING_RECVSEND_BUNDLE`, `FEAT_RECVSEND_BUNDLE`)"},
	{Name: "IORING_FEAT_MIN_TIMEOUT", Since: Kernel{6, 12}, Kind: KindFeatureBit, Bits: FeatMinTimeout, Doc: "`ENTER_ABS_TIMER`, `FEAT_MIN_TIMEOUT`"},
	{Name: "IORING_FEAT_RW_ATTR", Since: Kernel{6, 14}, Kind: KindFeatureBit, Bits: FeatRWAttr},
	{Name: "IORING_FEAT_NO_IOWAIT", Since: Kernel{6, 15}, Kind: KindFeatureBit, Bits: FeatNoIOWait},

	// Other capabilities after 6.1.
	{Name: "IOU_PBUF_RING_MMAP", Since: Kernel{6, 4}, Kind: KindRegister, Doc: "kernel-allocated buffer rings (`IOU_PBUF_RING_MMAP`)"},
	{Name: FeatureMultishotRecvLen, Since: Kernel{6, 17}, Kind: KindBehaviour, Doc: "a length on multishot `RECV` (per-completion cap)"},

	// Opcodes after 6.1, in number order: each release adds the next few.
	{Name: "IORING_OP_READ_MULTISHOT", Since: Kernel{6, 7}, Kind: KindOpcode, Bits: uint32(OpReadMultishot), Doc: "`IORING_OP_READ_MULTISHOT`"},
	{Name: "IORING_OP_FIXED_FD_INSTALL", Since: Kernel{6, 8}, Kind: KindOpcode, Bits: uint32(OpFixedFdInstall)},
	{Name: "IORING_OP_FTRUNCATE", Since: Kernel{6, 9}, Kind: KindOpcode, Bits: uint32(OpFtruncate)},
	{Name: "IORING_OP_BIND", Since: Kernel{6, 11}, Kind: KindOpcode, Bits: uint32(OpBind)},
	{Name: "IORING_OP_RECV_ZC", Since: Kernel{6, 15}, Kind: KindOpcode, Bits: uint32(OpRecvZC)},
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
