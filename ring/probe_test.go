//go:build linux

package ring_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// TestProbeAgreesWithKernel checks the probe against what the kernel does:
// ops it calls supported are accepted (no EINVAL for a smoke input), and an
// opcode past the last one is refused with EINVAL.
func TestProbeAgreesWithKernel(t *testing.T) {
	r := newRing(t, 16, nil)
	p, err := r.Probe()
	if err != nil {
		t.Fatal(err)
	}
	cached, err := ring.GetProbe()
	if err != nil {
		t.Fatal(err)
	}
	for op := 0; op < 256; op++ {
		if p.Supported(ring.Opcode(op)) != cached.Supported(ring.Opcode(op)) ||
			ring.OpSupported(ring.Opcode(op)) != p.Supported(ring.Opcode(op)) {
			t.Fatalf("opcode %d: ring probe and cached probe disagree", op)
		}
	}
	if p.LastOp() < ring.OpSendZC {
		t.Fatalf("LastOp %d below SEND_ZC on a kernel with multishot support", p.LastOp())
	}

	type smoke struct {
		op   ring.Opcode
		prep func(*ring.SQE)
		ok   func(res int32) bool
	}
	notEINVAL := func(res int32) bool { return res != -int32(unix.EINVAL) }
	buf := make([]byte, 8)
	smokes := []smoke{
		{ring.OpNop, func(s *ring.SQE) { s.PrepNop() }, func(res int32) bool { return res == 0 }},
		{ring.OpClose, func(s *ring.SQE) { s.PrepClose(1 << 20) }, func(res int32) bool { return res == -int32(unix.EBADF) }},
		{ring.OpRead, func(s *ring.SQE) { s.PrepRead(1<<20, buf, 0) }, func(res int32) bool { return res == -int32(unix.EBADF) }},
		{ring.OpAsyncCancel, func(s *ring.SQE) { s.PrepCancel64(12345, 0) }, func(res int32) bool { return res == -int32(unix.ENOENT) }},
		{ring.OpTimeoutRemove, func(s *ring.SQE) { s.PrepTimeoutRemove(12345, 0) }, func(res int32) bool { return res == -int32(unix.ENOENT) }},
		{ring.OpPollRemove, func(s *ring.SQE) { s.PrepPollRemove(12345) }, func(res int32) bool { return res == -int32(unix.ENOENT) }},
		{ring.OpShutdown, func(s *ring.SQE) { s.PrepShutdown(1<<20, unix.SHUT_RDWR) }, notEINVAL},
		{ring.OpSocket, func(s *ring.SQE) { s.PrepSocket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0, 0) }, func(res int32) bool { return res >= 0 }},
	}
	for _, s := range smokes {
		if !p.Supported(s.op) {
			t.Logf("opcode %d not supported; smoke skipped", s.op)
			continue
		}
		sqe := getSQE(t, r)
		s.prep(sqe)
		sqe.UserData = 1000 + uint64(s.op)
		c := reapOne(t, r)
		if c.UserData != 1000+uint64(s.op) || !s.ok(c.Res) {
			t.Errorf("opcode %d reported supported but completed %+v (%v)", s.op, c, c.Err())
		}
		if s.op == ring.OpSocket && c.Res >= 0 {
			unix.Close(int(c.Res))
		}
	}

	// MSG_RING to our own ring: its own CQE and the message CQE.
	if p.Supported(ring.OpMsgRing) {
		sqe := getSQE(t, r)
		sqe.PrepMsgRing(r.Fd(), 5, 777, 0)
		sqe.UserData = 1000 + uint64(ring.OpMsgRing)
		got := byUserData(t, reap(t, r, 2, 5*time.Second))
		if c := got[1000+uint64(ring.OpMsgRing)]; c == nil || c.Res != 0 {
			t.Errorf("MSG_RING reported supported but completed %+v", c)
		}
		if c := got[777]; c == nil || c.Res != 5 {
			t.Errorf("MSG_RING message CQE = %+v", c)
		}
	}

	for _, op := range []ring.Opcode{250, p.LastOp() + 1} {
		if p.Supported(op) {
			t.Fatalf("opcode %d reported supported", op)
		}
		sqe := getSQE(t, r)
		sqe.Opcode = op
		sqe.UserData = 2000
		if c := reapOne(t, r); !errors.Is(c.Err(), unix.EINVAL) {
			t.Fatalf("unsupported opcode %d completed %+v, want EINVAL", op, c)
		}
	}
}

// TestSetupFlagProbe checks that every setup flag the probe accepts really
// creates a working ring through New.
func TestSetupFlagProbe(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 20*time.Second)
	flags := ring.SupportedSetupFlags()
	t.Logf("kernel accepts setup flags %#x", flags)
	for _, f := range []uint32{ring.SetupSingleIssuer, ring.SetupDeferTaskrun, ring.SetupCoopTaskrun, ring.SetupNoSQArray} {
		if !ring.SetupFlagSupported(f) {
			t.Logf("setup flag %#x refused by this kernel", f)
		}
	}
	for _, tc := range []struct {
		flag, with uint32
	}{
		{ring.SetupCoopTaskrun, ring.SetupTaskrunFlag},
		{ring.SetupSingleIssuer, 0},
		{ring.SetupDeferTaskrun, ring.SetupSingleIssuer},
		{ring.SetupNoSQArray, 0},
		{ring.SetupSubmitAll, 0},
		{ring.SetupClamp, 0},
	} {
		if !ring.SetupFlagSupported(tc.flag) {
			continue
		}
		r, err := ring.New(8, &ring.Params{Flags: tc.flag | tc.with})
		if err != nil {
			t.Fatalf("probe accepted %#x but New failed: %v", tc.flag, err)
		}
		// Creation on this thread makes it the single issuer only if the
		// ring is used from it; a NOP round trip on NoSQArray proves the
		// SQ indexing without the array.
		if tc.flag == ring.SetupNoSQArray {
			for i := 0; i < 20; i++ {
				sqe, err := r.GetSQE()
				if err != nil {
					t.Fatal(err)
				}
				sqe.PrepNop()
				sqe.UserData = uint64(i + 1)
				c, err := r.WaitCQETimeout(5 * time.Second)
				if err != nil || c.UserData != uint64(i+1) {
					t.Fatalf("NO_SQARRAY round trip %d: %+v, %v", i, c, err)
				}
				r.CQESeen()
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if ring.SetupFlagSupported(0) || ring.SetupFlagSupported(1<<30) {
		t.Fatal("SetupFlagSupported accepts nothing or an unknown bit")
	}
}
