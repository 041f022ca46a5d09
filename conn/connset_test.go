package conn

import (
	"math/rand/v2"
	"testing"
)

// TestConnSet checks the chunked set against a map through random adds
// and removes, including removes of absent connections and a mass close
// that gives the chunks back.
func TestConnSet(t *testing.T) {
	var s connSet
	want := map[*Conn]bool{}
	pool := make([]*Conn, 1000) // several chunks
	for i := range pool {
		pool[i] = &Conn{}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 20000; step++ {
		c := pool[r.IntN(len(pool))]
		if want[c] {
			if !s.remove(c) {
				t.Fatalf("step %d: remove of a member failed", step)
			}
			delete(want, c)
		} else {
			if s.remove(c) {
				t.Fatalf("step %d: remove of a non-member succeeded", step)
			}
			s.add(c)
			want[c] = true
		}
		if s.n != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, s.n, len(want))
		}
	}
	for i, c := range s.snapshot() {
		if !want[c] || int(c.registryIndex) != i+1 {
			t.Fatalf("member %d: in map %v, index %d", i, want[c], c.registryIndex)
		}
	}
	for _, c := range s.snapshot() {
		if !s.remove(c) {
			t.Fatal("remove during a snapshot walk failed")
		}
	}
	if s.n != 0 || len(s.chunks) > 2 {
		t.Fatalf("after removing all: len %d, %d chunks kept", s.n, len(s.chunks))
	}
}
