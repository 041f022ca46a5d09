package conn

import "testing"

// A queue that never empties (a stream into a reader that keeps a little
// behind) keeps its slot slice small instead of growing a slot per chunk.
func TestInQueueNeverEmptyStaysSmall(t *testing.T) {
	var iq chunkQueue
	in := make([]byte, 3*inChunkSize/2)
	out := make([]byte, len(in))
	iq.push(in[:inChunkSize/2], true) // always this much behind
	for i := range 100_000 {
		iq.push(in, true)
		if n := iq.read(out); n != len(out) {
			t.Fatalf("round %d: read %d of %d", i, n, len(out))
		}
	}
	if iq.n != inChunkSize/2 {
		t.Fatalf("%d bytes queued, want %d", iq.n, inChunkSize/2)
	}
	if c := cap(iq.q); c > 16 {
		t.Fatalf("after 100,000 rounds the slot slice has capacity %d", c)
	}
	iq.release()
}
