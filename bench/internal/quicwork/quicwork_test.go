package quicwork

import "testing"

// TestBulkPeriodic checks that every chunk the server may write is the
// pattern at its offset, whatever the offset and length.
func TestBulkPeriodic(t *testing.T) {
	at := func(off uint64) byte { return Bulk(off%PatternLen, 1)[0] }
	for _, off := range []uint64{0, 1, PatternLen - 1, PatternLen, 2*PatternLen - 16, 3*PatternLen + 7, 1 << 40} {
		for _, n := range []int{1, 15, 16, BulkChunk - PatternLen, BulkChunk} {
			b := Bulk(off, n)
			if len(b) != n {
				t.Fatalf("Bulk(%d, %d): %d bytes", off, n, len(b))
			}
			for i := range b {
				if want := at(off + uint64(i)); b[i] != want {
					t.Fatalf("Bulk(%d, %d)[%d] = %#x, want %#x", off, n, i, b[i], want)
				}
			}
		}
	}
}
