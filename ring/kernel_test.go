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
	k := ring.MustKernel("5.10")
	if k.OpcodeLimit() != int(ring.OpShutdown) {
		t.Errorf("5.10's first missing opcode = %d, want SHUTDOWN (%d)", k.OpcodeLimit(), ring.OpShutdown)
	}
	if got := ring.MustKernel("5.19").OpcodeLimit(); got != int(ring.OpSendZC) {
		t.Errorf("5.19's first missing opcode = %d, want SEND_ZC (%d)", got, ring.OpSendZC)
	}
	if k.FeatureBits()&ring.FeatExtArg != 0 || ring.MustKernel("5.11").FeatureBits()&ring.FeatExtArg == 0 {
		t.Error("EXT_ARG is not cut at 5.11")
	}
	if k.SetupFlags()&ring.SetupRDisabled == 0 || k.SetupFlags()&ring.SetupSubmitAll != 0 {
		t.Error("5.10's setup flags are wrong")
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
	if len(doc) < 20 {
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

// A ring made for an older kernel on this one offers only what that kernel
// had, and refuses the rest as that kernel would.
func TestNewForProfile(t *testing.T) {
	testutil.SkipIfNoUring(t)
	k := ring.MustKernel("5.10")
	p := ring.Params{Flags: ring.SetupSubmitAll}
	if _, err := ring.NewFor(k, 8, &p); !errors.Is(err, unix.EINVAL) || !errors.Is(err, ring.ErrNotSupported) {
		t.Fatalf("SUBMIT_ALL under 5.10: %v, want EINVAL and ErrNotSupported", err)
	}
	if _, err := ring.NewFor(ring.MustKernel("4.19"), 8, nil); !errors.Is(err, ring.ErrNotSupported) || !errors.Is(err, unix.ENOSYS) {
		t.Fatalf("a ring under 4.19: %v, want ENOSYS", err)
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
	if r.Features()&^k.FeatureBits() != 0 || r.Features()&ring.FeatExtArg != 0 {
		t.Errorf("features %#x beyond 5.10's", r.Features())
	}
	probe, err := r.Probe()
	if err != nil {
		t.Fatal(err)
	}
	if !probe.Supported(ring.OpSend) || probe.Supported(ring.OpShutdown) || probe.Supported(ring.OpSocket) || int(probe.LastOp()) >= k.OpcodeLimit() {
		t.Errorf("5.10's probe: send %v shutdown %v socket %v last %d", probe.Supported(ring.OpSend),
			probe.Supported(ring.OpShutdown), probe.Supported(ring.OpSocket), probe.LastOp())
	}
	if err := r.RegisterRingFd(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RegisterRingFd under 5.10: %v", err)
	}
	if _, err := r.NewBufRing(1, 8, 4096); !errors.Is(err, unix.EINVAL) || !errors.Is(err, ring.ErrNotSupported) {
		t.Errorf("NewBufRing under 5.10: %v", err)
	}
	if err := r.RegisterFilesSparse(4); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RegisterFilesSparse under 5.10: %v", err)
	}
	// Timed waits need EXT_ARG (5.11): refused, as without it.
	if _, err := r.SubmitAndWaitTimeout(1, 20*time.Millisecond); !errors.Is(err, ring.ErrNotSupported) {
		t.Errorf("a timed wait under 5.10: %v, want ErrNotSupported", err)
	}
}

// Each profile keeps what its release had: buffer rings from 5.19.
func TestNewForBufRings(t *testing.T) {
	testutil.SkipIfNoUring(t)
	for _, c := range []struct {
		kernel string
		plain  bool
	}{{"5.15", false}, {"5.19", true}, {"", true}} {
		r, err := ring.NewFor(ring.MustKernel(c.kernel), 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		br, err := r.NewBufRing(1, 8, 4096)
		if (err == nil) != c.plain {
			t.Errorf("%q: NewBufRing: %v", c.kernel, err)
		}
		if br != nil {
			br.Close()
		}
		r.Close()
	}
}
