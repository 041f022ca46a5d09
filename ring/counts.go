package ring

import "maps"

// SQEKind is what an SQE asks of the kernel, as CountSubmissions tells
// kinds apart: the opcode and the flags that need a newer kernel than the
// opcode itself.
type SQEKind struct {
	Op           Opcode
	Multishot    bool // IORING_ACCEPT_MULTISHOT, IORING_RECV_MULTISHOT or IORING_POLL_ADD_MULTI
	BufferSelect bool // IOSQE_BUFFER_SELECT: a provided buffer
	Bundle       bool // IORING_RECVSEND_BUNDLE
}

// SubmitCounts is what a ring handed to the kernel while counting was on.
type SubmitCounts struct {
	SQEs             map[SQEKind]uint64 // SQEs published, by kind
	Enters           uint64             // io_uring_enter calls
	ExtArgEnters     uint64             // of which with IORING_ENTER_EXT_ARG
	RegisteredEnters uint64             // of which through the registered ring fd
}

// CountSubmissions turns counting of the ring's SQEs and enters on or off
// (off by default; turning it off drops the counts). It costs a look at
// every SQE as it is published, so it is meant for tests that prove which
// kernel features a program uses. Must be called by the goroutine that
// owns the ring.
func (r *Ring) CountSubmissions(on bool) {
	switch {
	case !on:
		r.counts = nil
	case r.counts == nil:
		r.counts = &SubmitCounts{SQEs: map[SQEKind]uint64{}}
	}
}

// Submissions returns a copy of the counts since CountSubmissions turned
// counting on (zero counts when it is off). Must be called by the
// goroutine that owns the ring.
func (r *Ring) Submissions() SubmitCounts {
	if r.counts == nil {
		return SubmitCounts{SQEs: map[SQEKind]uint64{}}
	}
	c := *r.counts
	c.SQEs = maps.Clone(c.SQEs)
	return c
}

// Add adds o's counts to c.
func (c *SubmitCounts) Add(o SubmitCounts) {
	if c.SQEs == nil {
		c.SQEs = map[SQEKind]uint64{}
	}
	for k, n := range o.SQEs {
		c.SQEs[k] += n
	}
	c.Enters += o.Enters
	c.ExtArgEnters += o.ExtArgEnters
	c.RegisteredEnters += o.RegisteredEnters
}

// Count returns how many SQEs of c match: every kind with opcode op for
// which match (nil: any) reports true.
func (c SubmitCounts) Count(op Opcode, match func(SQEKind) bool) uint64 {
	var n uint64
	for k, v := range c.SQEs {
		if k.Op == op && (match == nil || match(k)) {
			n += v
		}
	}
	return n
}

// countSQEs counts the SQEs from head to tail (SQ indexes) as they are
// published.
func (r *Ring) countSQEs(head, tail uint32) {
	sq := &r.sq
	for i := head; i != tail; i++ {
		r.counts.SQEs[kindOf(&sq.sqes[i&sq.mask])]++
	}
}

func kindOf(e *SQE) SQEKind {
	k := SQEKind{Op: e.Opcode, BufferSelect: e.Flags&SQEBufferSelect != 0}
	switch e.Opcode {
	case OpAccept:
		k.Multishot = e.IoPrio&AcceptMultishot != 0
	case OpRecv, OpRecvmsg:
		k.Multishot = e.IoPrio&RecvMultishot != 0
		k.Bundle = e.IoPrio&RecvsendBundle != 0
	case OpSend, OpSendmsg:
		k.Bundle = e.IoPrio&RecvsendBundle != 0
	case OpPollAdd:
		k.Multishot = e.Len&PollAddMulti != 0
	case OpReadMultishot:
		k.Multishot = true
	}
	return k
}

func (r *Ring) countEnter(flags uint32) {
	r.counts.Enters++
	if flags&EnterExtArg != 0 {
		r.counts.ExtArgEnters++
	}
	if flags&EnterRegisteredRing != 0 {
		r.counts.RegisteredEnters++
	}
}
