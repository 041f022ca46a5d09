//go:build giouring && linux

package ring_test

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/pawelgaczynski/giouring"
	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// Behavioural half of the giouring differential test: the
// same sequence through a ring of each binding must give the same CQEs,
// except where giouring's encoding is known to be wrong
// (giouring_oracle_test.go lists those), which is asserted as such.

// behaviourTimeout is the timespec a TIMEOUT SQE points at: package-level,
// so it is neither on a goroutine stack (which can move) nor collected
// before the kernel reads it.
var behaviourTimeout = ring.Timespec{Sec: 10}

// cqeRec is a completion without its ring.
type cqeRec struct {
	ud    uint64
	res   int32
	flags uint32
}

func newGiouring(t *testing.T, entries uint32) *giouring.Ring {
	t.Helper()
	g, err := giouring.CreateRing(entries)
	if err != nil {
		t.Fatalf("giouring.CreateRing(%d): %v", entries, err)
	}
	t.Cleanup(g.QueueExit)
	return g
}

// reapOurs submits, waits for n CQEs and returns them sorted by user_data.
func reapOurs(t *testing.T, r *ring.Ring, n int) []cqeRec {
	t.Helper()
	if _, err := r.SubmitAndWait(uint32(n)); err != nil {
		t.Fatalf("ringloop SubmitAndWait: %v", err)
	}
	var out []cqeRec
	for len(out) < n {
		c, ok := r.PeekCQE()
		if !ok {
			t.Fatalf("ringloop: %d CQEs of %d after SubmitAndWait", len(out), n)
		}
		out = append(out, cqeRec{c.UserData, c.Res, c.Flags})
		r.CQESeen()
	}
	if c, ok := r.PeekCQE(); ok {
		t.Fatalf("ringloop: unexpected extra CQE %+v", *c)
	}
	slices.SortFunc(out, func(a, b cqeRec) int { return int(a.ud) - int(b.ud) })
	return out
}

// reapTheirs does the same on a giouring ring.
func reapTheirs(t *testing.T, g *giouring.Ring, n int) []cqeRec {
	t.Helper()
	if _, err := g.SubmitAndWait(uint32(n)); err != nil {
		t.Fatalf("giouring SubmitAndWait: %v", err)
	}
	var out []cqeRec
	for len(out) < n {
		c, err := g.WaitCQE()
		if err != nil {
			t.Fatalf("giouring WaitCQE: %v", err)
		}
		out = append(out, cqeRec{c.UserData, c.Res, c.Flags})
		g.CQESeen(c)
	}
	if c, err := g.PeekCQE(); err == nil && c != nil {
		t.Fatalf("giouring: unexpected extra CQE %+v", *c)
	}
	slices.SortFunc(out, func(a, b cqeRec) int { return int(a.ud) - int(b.ud) })
	return out
}

func TestBehaviourVsGiouring(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 20*time.Second)
	r, err := ring.New(64, nil)
	if err != nil {
		t.Fatalf("ring.New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	g := newGiouring(t, 64)

	t.Run("nops", func(t *testing.T) {
		// 32 NOPs, every fourth with IOSQE_CQE_SKIP_SUCCESS (no CQE),
		// every third linked to the next.
		const n = 32
		want := 0
		for i := 1; i <= n; i++ {
			flags := uint8(0)
			if i%4 == 0 {
				flags |= ring.SQECQESkipSuccess
			} else {
				want++
			}
			if i%3 == 0 && i < n {
				flags |= ring.SQEIOLink
			}
			o, err := r.GetSQE()
			if err != nil {
				t.Fatal(err)
			}
			o.PrepNop()
			o.Flags |= flags
			o.UserData = uint64(i)
			s := g.GetSQE()
			s.PrepareNop()
			s.Flags |= flags
			s.UserData = uint64(i)
		}
		ours, theirs := reapOurs(t, r, want), reapTheirs(t, g, want)
		if !slices.Equal(ours, theirs) {
			t.Fatalf("CQEs differ:\n\tringloop %v\n\tgiouring %v", ours, theirs)
		}
		for _, c := range ours {
			if c.res != 0 || c.ud%4 == 0 {
				t.Fatalf("unexpected CQE %+v", c)
			}
		}
	})

	t.Run("timed_wait", func(t *testing.T) {
		// Nothing in flight: both waits time out with ETIME.
		_, errO := r.WaitCQETimeout(5 * time.Millisecond)
		ts := syscall.NsecToTimespec((5 * time.Millisecond).Nanoseconds())
		_, errG := g.WaitCQETimeout(&ts)
		if !errors.Is(errO, unix.ETIME) || !errors.Is(errG, syscall.ETIME) {
			t.Fatalf("timed wait: ringloop %v, giouring %v; want ETIME from both", errO, errG)
		}
	})

	t.Run("timeout_then_cancel", func(t *testing.T) {
		// Ours only (giouring's TIMEOUT points the kernel at a pointer,
		// not a timespec): arm a 10s timeout and cancel it by user_data.
		o, err := r.GetSQE()
		if err != nil {
			t.Fatal(err)
		}
		o.PrepTimeout(&behaviourTimeout, 0, 0)
		o.UserData = 7
		rm, err := r.GetSQE()
		if err != nil {
			t.Fatal(err)
		}
		rm.PrepCancel64(7, 0)
		rm.UserData = 8
		got := reapOurs(t, r, 2)
		want := []cqeRec{{7, -int32(unix.ECANCELED), 0}, {8, 0, 0}}
		if !slices.Equal(got, want) {
			t.Fatalf("timeout + cancel: %v, want %v", got, want)
		}
	})
}
