package ring_test

import (
	"testing"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// CountSubmissions counts each SQE once, by kind, as it is published, and
// each enter with the flags it used.
func TestCountSubmissions(t *testing.T) {
	testutil.SkipIfNoUring(t)
	r, err := ring.New(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	prep := func(f func(*ring.SQE)) {
		sqe, err := r.GetSQE()
		if err != nil {
			t.Fatal(err)
		}
		f(sqe)
	}
	prep(func(e *ring.SQE) { e.PrepNop() }) // before counting: not counted
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	r.CountSubmissions(true)
	prep(func(e *ring.SQE) { e.PrepNop() })
	prep(func(e *ring.SQE) { e.PrepNop() })
	prep(func(e *ring.SQE) { e.PrepPollMultishot(0, 1); e.UserData = 7 })
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	prep(func(e *ring.SQE) { e.PrepPollAdd(0, 1); e.UserData = 8 })
	if _, err := r.SubmitAndWait(1); err != nil {
		t.Fatal(err)
	}
	c := r.Submissions()
	nop := c.Count(ring.OpNop, nil)
	multi := c.Count(ring.OpPollAdd, func(k ring.SQEKind) bool { return k.Multishot })
	single := c.Count(ring.OpPollAdd, func(k ring.SQEKind) bool { return !k.Multishot })
	if nop != 2 || multi != 1 || single != 1 || c.Enters != 2 {
		t.Fatalf("counted %d NOPs, %d multishot and %d single polls, %d enters; want 2, 1, 1, 2 (%+v)", nop, multi, single, c.Enters, c)
	}
	r.CountSubmissions(false)
	if n := len(r.Submissions().SQEs); n != 0 {
		t.Fatalf("%d kinds counted after counting stopped", n)
	}
}
