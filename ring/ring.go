package ring

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Hard-coded kernel limits (io_uring/io_uring.h: IORING_MAX_ENTRIES and
// IORING_MAX_CQ_ENTRIES). New rejects larger sizes instead of relying on
// SetupClamp, so a configuration error is reported rather than silently
// shrunk.
const (
	MaxEntries   = 32768          // IORING_MAX_ENTRIES
	MaxCQEntries = 2 * MaxEntries // IORING_MAX_CQ_ENTRIES
)

// knownSetupFlags are the IORING_SETUP_* bits New passes to the kernel.
// Other bits are rejected before the system call.
const knownSetupFlags = SetupIOPoll | SetupSQPoll | SetupSQAff | SetupCQSize | SetupClamp |
	SetupAttachWQ | SetupRDisabled | SetupSubmitAll | SetupCoopTaskrun | SetupTaskrunFlag |
	SetupSQE128 | SetupCQE32 | SetupSingleIssuer | SetupDeferTaskrun | SetupNoMmap |
	SetupRegisteredFdOnly | SetupNoSQArray | SetupHybridIOPoll

// unhandledSetupFlags are valid kernel flags this binding does not drive:
// 128-byte SQEs and 32-byte CQEs change the entry stride, and NO_MMAP /
// REGISTERED_FD_ONLY require ring memory supplied by the caller.
const unhandledSetupFlags = SetupSQE128 | SetupCQE32 | SetupNoMmap | SetupRegisteredFdOnly

// Ring is one io_uring instance: its fd, the two shared mappings (SQ and CQ
// rings, SQE array) and the user-space halves of the SQ and CQ indices.
//
// A Ring is not safe for concurrent use: one goroutine at a time may call
// its methods (the event loop owns it). With SetupSingleIssuer the kernel
// further requires that every submission come from the thread that created
// the ring, so that goroutine must call runtime.LockOSThread before New and
// stay locked; RegisterRingFd has the same thread rule.
type Ring struct {
	// Hot fields first: the submission and completion paths touch only these.
	sq         sqRing
	cq         cqRing
	enterFd    int    // fd, or the registered ring index with EnterRegisteredRing
	enterFlags uint32 // EnterRegisteredRing while the ring fd is registered
	handOff    bool   // waiting enters give the P back first (SetHandOff)
	flags      uint32 // setup flags granted
	features   uint32 // IORING_FEAT_* reported by the kernel
	closed     bool
	kernel     Kernel        // the profile the ring was made for (NewFor)
	counts     *SubmitCounts // CountSubmissions; nil when off

	fd          int
	ringFdIndex int // registered ring fd slot, -1 when not registered
	params      Params

	// Mappings, released by Close.
	ringMem, sqeMem   unsafe.Pointer
	ringSize, sqeSize uintptr

	bufRings []*BufRing // registered provided-buffer rings, released by Close

	// Arguments of timed waits, kept in the Ring so they are heap memory that
	// outlives the system call without allocating per call.
	waitTs  Timespec
	waitArg GetEventsArg

	// dead is what the index pointers point at after Close, so a stray call
	// on a closed Ring reads zeros instead of unmapped memory.
	dead [2]uint32
}

// sysSetupFn is io_uring_setup; tests replace it to force errnos.
var sysSetupFn = sysSetup

// New creates a ring with at least entries SQ entries (rounded up to a power
// of two by the kernel). p carries the setup flags and sizes in (nil means
// defaults: no flags, CQ twice the SQ) and receives the kernel's answer out:
// the entries granted, the features and the ring offsets.
//
// entries must be in [1, MaxEntries]; with SetupCQSize, p.CQEntries must be
// in [entries, MaxCQEntries]. Flags the kernel does not define, or that
// this binding does not drive (SetupSQE128, SetupCQE32, SetupNoMmap,
// SetupRegisteredFdOnly), are rejected before the system call.
//
// When io_uring_setup fails with ENOSYS, EPERM or ENOMEM the error is a
// *SetupError matching both ErrNotSupported and the errno; a kernel
// without floorFeatures gives an *UnsupportedError. Safe for concurrent use.
func New(entries uint32, p *Params) (*Ring, error) { return NewFor(Kernel{}, entries, p) }

// floorFeatures are the IORING_FEAT_* bits this binding takes for granted:
// one mapping for both rings, no dropped CQEs, timed waits.
const floorFeatures = FeatSingleMmap | FeatNoDrop | FeatExtArg

// NewFor is New for a kernel of profile k: the ring uses only what that
// release offers (see Kernel). A profile below 6.1 is refused, setup flags
// k does not define are refused as that kernel would refuse them (the
// error matches both ErrNotSupported and unix.EINVAL), and the ring
// reports only the feature bits k can have. The zero Kernel is New.
func NewFor(k Kernel, entries uint32, p *Params) (*Ring, error) {
	var params Params
	if p != nil {
		params = *p
	}
	if err := validateParams(entries, &params); err != nil {
		return nil, err
	}
	if !k.Has(floor) {
		return nil, &UnsupportedError{Op: "io_uring on kernel profile " + k.String(), MinKernel: floor.String()}
	}
	if extra := params.Flags &^ k.SetupFlags(); extra != 0 {
		return nil, profileRefusal(k, setupFlagName(extra))
	}
	fd, err := sysSetupFn(entries, &params)
	if err != nil {
		return nil, &SetupError{Errno: errnoOf(err)}
	}
	if params.Features&floorFeatures != floorFeatures {
		closeFd(fd)
		return nil, &UnsupportedError{Op: "io_uring without FEAT_SINGLE_MMAP, FEAT_NODROP and FEAT_EXT_ARG", MinKernel: floor.String()}
	}
	params.Features &= k.FeatureBits()
	r := &Ring{fd: fd, enterFd: fd, ringFdIndex: -1, kernel: k}
	if err := r.mapRings(&params); err != nil {
		r.unmapAll()
		closeFd(fd)
		return nil, err
	}
	r.flags = params.Flags
	r.features = params.Features
	r.params = params
	if p != nil {
		*p = params
	}
	return r, nil
}

func validateParams(entries uint32, p *Params) error {
	if entries == 0 {
		return fmt.Errorf("ring: entries must be at least 1")
	}
	if entries > MaxEntries {
		return fmt.Errorf("ring: %d entries above the kernel maximum %d", entries, MaxEntries)
	}
	if bad := p.Flags &^ knownSetupFlags; bad != 0 {
		return fmt.Errorf("ring: unknown setup flags %#x", bad)
	}
	if bad := p.Flags & unhandledSetupFlags; bad != 0 {
		return &UnsupportedError{Op: fmt.Sprintf("setup flags %#x in this binding", bad)}
	}
	if p.Flags&SetupCQSize != 0 {
		if p.CQEntries == 0 || p.CQEntries > MaxCQEntries {
			return fmt.Errorf("ring: CQ entries %d outside [1, %d]", p.CQEntries, MaxCQEntries)
		}
		if p.CQEntries < entries {
			return fmt.Errorf("ring: CQ entries %d below SQ entries %d", p.CQEntries, entries)
		}
	} else if p.CQEntries != 0 {
		return fmt.Errorf("ring: CQEntries set without SetupCQSize")
	}
	if p.Flags&SetupDeferTaskrun != 0 && p.Flags&SetupSingleIssuer == 0 {
		return fmt.Errorf("ring: SetupDeferTaskrun requires SetupSingleIssuer")
	}
	if p.Flags&SetupTaskrunFlag != 0 && p.Flags&(SetupCoopTaskrun|SetupDeferTaskrun) == 0 {
		return fmt.Errorf("ring: SetupTaskrunFlag requires SetupCoopTaskrun or SetupDeferTaskrun")
	}
	if p.Resv != [3]uint32{} {
		return fmt.Errorf("ring: Params.Resv must be zero")
	}
	// The out fields are the kernel's to fill.
	p.SQEntries, p.Features = 0, 0
	p.SQOff, p.CQOff = SQRingOffsets{}, CQRingOffsets{}
	return nil
}

// mapRings maps the rings described by p (one mapping for SQ and CQ rings,
// one for the SQEs) and points r.sq and r.cq into them.
func (r *Ring) mapRings(p *Params) error {
	const sqeSize, cqeSize = unsafe.Sizeof(SQE{}), unsafe.Sizeof(CQE{})
	size := uintptr(p.SQOff.Array) + uintptr(p.SQEntries)*4
	if p.Flags&SetupNoSQArray != 0 {
		// No array: the SQ ring ends after the flags and dropped words.
		size = uintptr(p.SQOff.Dropped) + 4
	}
	size = max(size, uintptr(p.CQOff.CQEs)+uintptr(p.CQEntries)*cqeSize)
	var err error
	if r.ringMem, err = mmapRing(r.fd, offSQRing, size); err != nil {
		return wrapSyscall("mmap rings", err)
	}
	r.ringSize = size
	sqes := uintptr(p.SQEntries) * sqeSize
	if r.sqeMem, err = mmapRing(r.fd, offSQEs, sqes); err != nil {
		return wrapSyscall("mmap sqes", err)
	}
	r.sqeSize = sqes
	r.sq.init(r.ringMem, &p.SQOff, r.sqeMem, p.Flags&SetupNoSQArray == 0)
	r.cq.init(r.ringMem, &p.CQOff)
	return nil
}

// unmapAll releases every ring mapping; safe to call on partial setups.
func (r *Ring) unmapAll() {
	munmap(r.sqeMem, r.sqeSize)
	munmap(r.ringMem, r.ringSize)
	r.sqeMem, r.ringMem = nil, nil
}

// Close unregisters the ring fd and every provided-buffer ring, unmaps the
// rings and closes the fd. Ops still in flight are canceled by the kernel as
// it tears the ring down; memory they reference must stay valid until then,
// so callers cancel and reap them first (the loop does). Close is idempotent:
// later calls return nil. Methods called after Close return ErrClosed.
// Must be called by the goroutine that owns the ring.
func (r *Ring) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	if r.ringFdIndex >= 0 {
		keep(r.unregisterRingFd())
	}
	for len(r.bufRings) > 0 {
		keep(r.bufRings[len(r.bufRings)-1].Close())
	}
	// Point every index at r.dead before unmapping, so a later stray call
	// reads zeros instead of faulting.
	r.sq.kill(&r.dead)
	r.cq.kill(&r.dead)
	r.unmapAll()
	keep(wrapSyscall("close", closeFd(r.fd)))
	r.fd, r.enterFd = -1, -1
	return first
}

// Kernel returns the profile the ring was made for (NewFor); the zero
// Kernel for New.
func (r *Ring) Kernel() Kernel { return r.kernel }

// Fd returns the ring's file descriptor (-1 after Close). Safe for
// concurrent use with everything but Close.
func (r *Ring) Fd() int { return r.fd }

// Features returns the IORING_FEAT_* bits the kernel reported at setup.
func (r *Ring) Features() uint32 { return r.features }

// Flags returns the IORING_SETUP_* bits the ring was created with.
func (r *Ring) Flags() uint32 { return r.flags }

// Params returns a copy of the parameters the kernel filled in at setup.
func (r *Ring) Params() Params { return r.params }

// errnoOf extracts the errno of a system call error (EINVAL if it has none).
func errnoOf(err error) unix.Errno {
	if e, ok := err.(unix.Errno); ok {
		return e
	}
	return unix.EINVAL
}
