package loop

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/ring"
)

// completionCopy records the one completion it gets.
type completionCopy struct{ got []Completion }

func (c *completionCopy) Complete(cp *Completion) { c.got = append(c.got, *cp) }

// A failed datagram receive that still names a buffer (a kernel may post a
// failure with the buffer the receive selected) is a failure:
// whatever that buffer holds from an earlier datagram is not delivered.
func TestDeliverDgramFailureWithBuffer(t *testing.T) {
	l := &Loop{}
	l.io.l = l // the IO's loop, as newLoop sets it
	// The layout the loop asks for: header, dgramNameLen bytes of name,
	// payload.
	buf := make([]byte, ring.SizeofRecvmsgOut+dgramNameLen+5)
	ring.PutRecvmsgOut(buf, ring.RecvmsgOut{NameLen: 16, PayloadLen: 5})
	n := ring.SizeofRecvmsgOut + dgramNameLen + copy(buf[ring.SizeofRecvmsgOut+dgramNameLen:], "stale")
	var c completionCopy
	l.io.deliverDgram(&c, 5, ring.CQEFBuffer, buf[:n], 0)
	l.io.deliverDgram(&c, -int32(unix.ENOBUFS), ring.CQEFBuffer, buf[:n], 0)
	if len(c.got) != 2 {
		t.Fatalf("%d completions, want 2", len(c.got))
	}
	if g := c.got[0]; g.Res != 5 || string(g.Data) != "stale" {
		t.Fatalf("a datagram: Res %d, Data %q; want 5, \"stale\"", g.Res, g.Data)
	}
	if g := c.got[1]; g.Res != -int32(unix.ENOBUFS) || g.Data != nil || g.Name != nil {
		t.Fatalf("a failure with a buffer: Res %d, Data %q, Name %v; want -ENOBUFS and nothing else", g.Res, g.Data, g.Name)
	}
}
