package ring

import (
	"errors"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Probe is the kernel's list of supported opcodes (IORING_REGISTER_PROBE,
// Linux 5.6). The zero Probe supports nothing.
type Probe struct {
	lastOp Opcode
	ops    [256]bool
}

// Supported reports whether the kernel implements op.
func (p *Probe) Supported(op Opcode) bool { return p != nil && p.ops[op] }

// LastOp returns the highest opcode the kernel knows.
func (p *Probe) LastOp() Opcode { return p.lastOp }

// probeBuf is struct io_uring_probe with room for every opcode.
type probeBuf struct {
	hdr ProbeHeader
	ops [256]ProbeOp
}

// Probe asks the kernel which opcodes it supports.
// Must be called by the goroutine that owns the ring.
func (r *Ring) Probe() (*Probe, error) {
	if !r.kernel.HasFeature(FeatureProbe) {
		return nil, &UnsupportedError{Op: "IORING_REGISTER_PROBE", MinKernel: "5.6"}
	}
	buf := new(probeBuf)
	if _, err := r.register("PROBE", registerProbe, unsafe.Pointer(buf), uint32(len(buf.ops))); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, &UnsupportedError{Op: "IORING_REGISTER_PROBE", MinKernel: "5.6"}
		}
		return nil, err
	}
	p := &Probe{lastOp: Opcode(buf.hdr.LastOp)}
	for i := 0; i < int(buf.hdr.OpsLen) && i < len(buf.ops); i++ {
		o := buf.ops[i]
		if o.Flags&probeOpSupported != 0 {
			p.ops[o.Op] = true
		}
	}
	return p.For(r.kernel), nil
}

var probeOnce struct {
	sync.Once
	p   *Probe
	err error
}

// GetProbe returns the opcode probe of the running kernel, taken once per
// process on a throwaway ring and cached. When io_uring is unusable the
// error matches ErrNotSupported. Safe for concurrent use.
func GetProbe() (*Probe, error) {
	probeOnce.Do(func() {
		r, err := New(2, nil)
		if err != nil {
			probeOnce.err = err
			return
		}
		defer r.Close()
		probeOnce.p, probeOnce.err = r.Probe()
	})
	return probeOnce.p, probeOnce.err
}

// OpSupported reports whether the running kernel supports op, from the
// cached GetProbe (false when io_uring is unusable). Safe for concurrent use.
func OpSupported(op Opcode) bool {
	p, err := GetProbe()
	return err == nil && p.Supported(op)
}

// probedSetupFlags lists the setup flags SupportedSetupFlags tries, each
// with the flags it depends on.
var probedSetupFlags = []struct{ flag, deps uint32 }{
	{SetupClamp, 0},
	{SetupSubmitAll, 0},
	{SetupCoopTaskrun, 0},
	{SetupTaskrunFlag, SetupCoopTaskrun},
	{SetupSQE128, 0},
	{SetupCQE32, 0},
	{SetupSingleIssuer, 0},
	{SetupDeferTaskrun, SetupSingleIssuer},
	{SetupNoSQArray, 0},
	{SetupRDisabled, 0},
}

var setupFlagsOnce struct {
	sync.Once
	flags uint32
}

// SupportedSetupFlags returns which of the setup flags SetupClamp,
// SetupSubmitAll, SetupCoopTaskrun, SetupTaskrunFlag, SetupSQE128,
// SetupCQE32, SetupSingleIssuer, SetupDeferTaskrun, SetupNoSQArray and
// SetupRDisabled the kernel accepts. There is no kernel query for setup
// flags, so each is found by creating (and at once closing, without mapping
// it) a two-entry ring with that flag; the answer is cached per process.
// Safe for concurrent use.
func SupportedSetupFlags() uint32 {
	setupFlagsOnce.Do(func() {
		for _, f := range probedSetupFlags {
			p := Params{Flags: f.flag | f.deps}
			fd, err := sysSetupFn(2, &p)
			if err != nil {
				continue
			}
			closeFd(fd)
			setupFlagsOnce.flags |= f.flag
		}
	})
	return setupFlagsOnce.flags
}

// SetupFlagSupported reports whether the kernel accepts every bit of flags
// among those SupportedSetupFlags probes. Safe for concurrent use.
func SetupFlagSupported(flags uint32) bool {
	return flags != 0 && SupportedSetupFlags()&flags == flags
}
