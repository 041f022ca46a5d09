//go:build linux

package ring_test

import (
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

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
