package ring_test

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

func TestParseKernel(t *testing.T) {
	good := map[string]ring.Kernel{
		"":                  {},
		"5.10":              {Major: 5, Minor: 10},
		"6.1":               {Major: 6, Minor: 1},
		"5.15.0-91-generic": {Major: 5, Minor: 15},
		"6.18.2":            {Major: 6, Minor: 18},
		"4.19":              {Major: 4, Minor: 19},
	}
	for s, want := range good {
		got, err := ring.ParseKernel(s)
		if err != nil || got != want {
			t.Errorf("ParseKernel(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"5", "five.ten", "5.", ".10", "0.1", "5.x", "5.10x", "-5.10", "5.99999999"} {
		if k, err := ring.ParseKernel(s); err == nil {
			t.Errorf("ParseKernel(%q) = %v, want an error", s, k)
		}
	}
	if s := ring.MustKernel("5.15").String(); s != "5.15" {
		t.Errorf("String = %q", s)
	}
	if !(ring.Kernel{}).Has(ring.MustKernel("9.9")) {
		t.Error("the zero Kernel lacks a feature")
	}
	if ring.MustKernel("5.15").Has(ring.MustKernel("5.19")) || !ring.MustKernel("6.0").Has(ring.MustKernel("5.19")) {
		t.Error("Has compares versions wrongly")
	}
}

// The table is ordered where the profile reads it in order, and names each
// capability once.
func TestKernelTable(t *testing.T) {
	names := map[string]bool{}
	lastOp, lastSince := -1, ring.Kernel{}
	for _, f := range ring.KernelTable() {
		if names[f.Name] {
			t.Errorf("%s appears twice", f.Name)
		}
		names[f.Name] = true
		if f.Since.IsZero() {
			t.Errorf("%s has no version", f.Name)
		}
		if f.Kind != ring.KindOpcode {
			continue
		}
		if int(f.Bits) <= lastOp || !f.Since.Has(lastSince) {
			t.Errorf("opcode row %s (%d, %s) out of order after opcode %d of %s", f.Name, f.Bits, f.Since, lastOp, lastSince)
		}
		lastOp, lastSince = int(f.Bits), f.Since
	}
	for _, c := range []struct {
		kernel string
		limit  ring.Opcode
	}{{"5.10", 0}, {"6.1", ring.OpReadMultishot}, {"6.6", ring.OpReadMultishot}, {"6.7", ring.OpFixedFdInstall}} {
		if got := ring.MustKernel(c.kernel).OpcodeLimit(); got != int(c.limit) {
			t.Errorf("%s's first missing opcode = %d, want %d", c.kernel, got, c.limit)
		}
	}
	k := ring.MustKernel("6.1")
	if want := ring.FeatSingleMmap | ring.FeatNoDrop | ring.FeatExtArg; k.FeatureBits()&want != want ||
		k.FeatureBits()&ring.FeatRecvSendBundle != 0 || ring.MustKernel("6.10").FeatureBits()&ring.FeatRecvSendBundle == 0 {
		t.Errorf("6.1's feature bits %#x", k.FeatureBits())
	}
	if want := ring.SetupRDisabled | ring.SetupSubmitAll | ring.SetupSingleIssuer | ring.SetupDeferTaskrun | ring.SetupTaskrunFlag; k.SetupFlags()&want != want ||
		k.SetupFlags()&ring.SetupNoSQArray != 0 || ring.MustKernel("6.6").SetupFlags()&ring.SetupNoSQArray == 0 {
		t.Errorf("6.1's setup flags %#x", k.SetupFlags())
	}
	// Below the floor the table still says what a release lacks.
	if k := ring.MustKernel("5.19"); !k.HasFeature(ring.FeatureMultishotAccept) || k.HasFeature(ring.FeatureMultishotRecv) ||
		ring.MustKernel("6.0").HasFeature("IORING_SETUP_DEFER_TASKRUN") || k.HasFeature("no such feature") {
		t.Error("HasFeature below the floor")
	}
}

// docs/kernel-support.md and the table say the same: every row of the page
// has its capability in the table with the same first release, and every
// capability the table places on the page is there.
func TestKernelTableMatchesDocs(t *testing.T) {
	f, err := os.Open("../docs/kernel-support.md")
	if err != nil {
		t.Fatalf("the kernel page: %v", err)
	}
	defer f.Close()
	doc := map[string]string{} // first column → first kernel
	sc := bufio.NewScanner(f)
	in := false // within the feature table, the page's first
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| feature") {
			in = true
			continue
		}
		if in && !strings.HasPrefix(line, "|") {
			break
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		cols := strings.Split(line, " | ")
		if len(cols) < 3 {
			continue
		}
		name := strings.TrimPrefix(cols[0], "| ")
		doc[name] = strings.Fields(cols[1])[0]
	}
	if len(doc) < 10 {
		t.Fatalf("read %d rows from the kernel page: its table changed shape", len(doc))
	}
	placed := map[string]bool{}
	for _, f := range ring.KernelTable() {
		if f.Doc == "" {
			continue
		}
		placed[f.Doc] = true
		v, ok := doc[f.Doc]
		switch {
		case !ok:
			t.Errorf("%s (%s) has no row %q on the page", f.Name, f.Since, f.Doc)
		case v != f.Since.String():
			t.Errorf("row %q says %s, the table %s", f.Doc, v, f.Since)
		}
	}
	for name, v := range doc {
		if !placed[name] {
			t.Errorf("row %q (%s) is not in the table", name, v)
		}
	}
}

// A ring made for 6.1 on a newer kernel offers only what 6.1 had, and
// refuses the rest as 6.1 would; an older profile has no ring.
func TestNewForProfile(t *testing.T) {
	testutil.RequireKernel(t, "6.1")
	if _, err := ring.NewFor(ring.MustKernel("6.0"), 8, nil); !errors.Is(err, ring.ErrNotSupported) {
		t.Fatalf("a ring under 6.0: %v, want ErrNotSupported", err)
	}
	k := ring.MustKernel("6.1")
	p := ring.Params{Flags: ring.SetupNoSQArray}
	if _, err := ring.NewFor(k, 8, &p); !errors.Is(err, unix.EINVAL) || !errors.Is(err, ring.ErrNotSupported) {
		t.Fatalf("NO_SQARRAY under 6.1: %v, want EINVAL and ErrNotSupported", err)
	}
	r, err := ring.NewFor(k, 8, &ring.Params{Flags: ring.SetupRDisabled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.EnableRings(); err != nil {
		t.Fatal(err)
	}
	if r.Kernel() != k {
		t.Errorf("Kernel() = %v", r.Kernel())
	}
	if r.Features()&^k.FeatureBits() != 0 || r.Features()&ring.FeatExtArg == 0 {
		t.Errorf("features %#x beyond 6.1's, or without EXT_ARG", r.Features())
	}
	if err := r.RegisterRingFd(); err != nil {
		t.Errorf("RegisterRingFd under 6.1: %v", err)
	}
	if _, err := r.NewBufRing(1, 8, 4096); err != nil {
		t.Errorf("NewBufRing under 6.1: %v", err)
	}
	if _, err := r.SubmitAndWaitTimeout(1, 20*time.Millisecond); !errors.Is(err, unix.ETIME) {
		t.Errorf("a timed wait under 6.1: %v, want ETIME", err)
	}
}
