package loop

// user_data is 64 bits, packed as follows:
//
//	63      56 55                     32 31                           0
//	+---------+-------------------------+-------------------------------+
//	| tag (8) |     generation (24)     |        slot index (32)        |
//	+---------+-------------------------+-------------------------------+
//
// slot index: position in the loop's op table.
// generation: advanced each time the slot is freed; a completion whose
//             generation does not match its slot is stale (counted, dropped).
// tag:        the op kind, for tracing and stats. tagInternal marks ops the
//             loop issues for itself (eventfd read, cancels, the start-up probe);
//             their slot field then names the internal op, not a table slot.
//
// user_data 0 is never produced: generations start at 1 and skip 0 when they
// wrap, and internal ops use a non-zero internal id.
//
// No Go pointer ever goes into user_data: the kernel hands the value back
// verbatim and the garbage collector cannot see it.

// opTag is the op kind stored in the top byte of user_data.
type opTag uint8

const (
	tagNone       opTag = iota // never produced
	tagAccept                  // accept, single or multishot
	tagRecv                    // recv into a caller's buffer
	tagRecvBuf                 // multishot recv with provided buffers
	tagSend                    // send
	tagSendmsg                 // sendmsg (gathered writes)
	tagConnect                 // connect
	tagClose                   // close
	tagShutdown                // shutdown
	tagNop                     // nop (tests)
	tagRecvmsgBuf              // multishot recvmsg of datagrams into provided buffers
	tagPollOut                 // one-shot poll for writability
	tagInternal   opTag = 0xff // loop-internal op, see internalID
)

// internalID names a loop-internal op in the slot field of a tagInternal
// user_data. Zero is not used.
type internalID uint32

const (
	internalWake   internalID = 1 + iota // the armed eventfd read
	internalCancel                       // an ASYNC_CANCEL's own completion
	internalProbe                        // a start-up probe (probeMultishotLen)
)

const (
	slotBits = 32
	genBits  = 24
	genMask  = 1<<genBits - 1
	slotMask = 1<<slotBits - 1
)

// packUserData builds the user_data of a table op. gen must be in
// [1, 1<<24); slot is the table index.
func packUserData(tag opTag, gen uint32, slot uint32) uint64 {
	return uint64(tag)<<(slotBits+genBits) | uint64(gen&genMask)<<slotBits | uint64(slot)
}

// internalUserData builds the user_data of a loop-internal op.
func internalUserData(id internalID) uint64 {
	return packUserData(tagInternal, 0, uint32(id))
}

// unpackUserData splits user_data into its fields.
func unpackUserData(ud uint64) (tag opTag, gen uint32, slot uint32) {
	return opTag(ud >> (slotBits + genBits)), uint32(ud>>slotBits) & genMask, uint32(ud & slotMask)
}

// nextGen advances a slot generation, skipping 0 on wrap.
func nextGen(g uint32) uint32 {
	g = (g + 1) & genMask
	if g == 0 {
		g = 1
	}
	return g
}

// providedRecv reports whether t receives into the loop's provided
// buffers (a stream's or a datagram socket's receive): such an op waits
// for buffers when they run out (starved.go), and a given-up one may
// still write into its ring's buffers.
func (t opTag) providedRecv() bool { return t == tagRecvBuf || t == tagRecvmsgBuf }

// String names the tag for logs and stats.
func (t opTag) String() string {
	switch t {
	case tagAccept:
		return "accept"
	case tagRecv:
		return "recv"
	case tagRecvBuf:
		return "recv-provided"
	case tagRecvmsgBuf:
		return "recvmsg-provided"
	case tagSend:
		return "send"
	case tagSendmsg:
		return "sendmsg"
	case tagConnect:
		return "connect"
	case tagClose:
		return "close"
	case tagShutdown:
		return "shutdown"
	case tagNop:
		return "nop"
	case tagPollOut:
		return "poll-out"
	case tagInternal:
		return "internal"
	default:
		return "unknown"
	}
}
