package loop

import "testing"

func TestOpTableAllocReleaseGeneration(t *testing.T) {
	tb := newOpTable(0)
	o := tb.alloc(tagRecv)
	if o == nil {
		t.Fatal("alloc returned nil")
	}
	ud := o.userData()
	if got := tb.lookup(ud); got != o {
		t.Fatalf("lookup(%#x) = %p, want %p", ud, got, o)
	}
	tb.release(o)
	if got := tb.lookup(ud); got != nil {
		t.Fatalf("lookup of a released op's user_data = %p, want nil (stale)", got)
	}
	o2 := tb.alloc(tagRecv)
	if o2.slot != o.slot {
		t.Fatalf("free list did not reuse slot %d (got %d)", o.slot, o2.slot)
	}
	if o2.userData() == ud {
		t.Fatal("reused slot produced the same user_data")
	}
	if tb.lookup(packUserData(tagSend, o2.gen, o2.slot)) != nil {
		t.Fatal("lookup with the wrong tag matched")
	}
}

func TestOpTableRecordsNeverMove(t *testing.T) {
	tb := newOpTable(0)
	first := tb.alloc(tagNop)
	addr := &first.fd
	var ops []*op
	for i := 0; i < 10*opChunk; i++ {
		ops = append(ops, tb.alloc(tagNop))
	}
	if &tb.at(first.slot).fd != addr {
		t.Fatal("record moved when the table grew")
	}
	if tb.inFlight != len(ops)+1 {
		t.Fatalf("inFlight = %d, want %d", tb.inFlight, len(ops)+1)
	}
	for _, o := range ops {
		tb.release(o)
	}
	tb.release(first)
	if tb.inFlight != 0 {
		t.Fatalf("inFlight = %d after releasing all", tb.inFlight)
	}
}

func TestOpTableCap(t *testing.T) {
	tb := newOpTable(opChunk)
	for i := 0; i < opChunk; i++ {
		if tb.alloc(tagNop) == nil {
			t.Fatalf("alloc %d failed below the cap", i)
		}
	}
	if tb.alloc(tagNop) != nil {
		t.Fatal("alloc beyond the cap succeeded")
	}
}

func TestOpTableStaleOutOfRange(t *testing.T) {
	tb := newOpTable(0)
	if tb.lookup(packUserData(tagRecv, 1, 12345)) != nil {
		t.Fatal("lookup of a slot beyond the table matched")
	}
}

func TestOpTableAllocNoAllocsSteadyState(t *testing.T) {
	tb := newOpTable(0)
	tb.release(tb.alloc(tagNop))
	n := testing.AllocsPerRun(1000, func() {
		tb.release(tb.alloc(tagNop))
	})
	if n != 0 {
		t.Fatalf("alloc+release allocates %v times per run", n)
	}
}
