package loop

import (
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// The op record and its states (docs/op-lifecycle.md, "States"): opFree →
// opQueued → opInFlight → (opCanceling →) opFree with gen++ at the final
// completion; a provided-buffer receive ending with -ENOBUFS is opParked
// until resubmitted (starved.go).

// opState is the lifecycle state of an op record.
type opState uint8

const (
	opFree           opState = iota // on the free list
	opQueued                        // SQE written (or waiter registered) but not yet seen by the kernel
	opInFlight                      // the kernel owns it
	opCanceling                     // a cancel was requested; waiting for the final completion
	opRetired                       // given up without a final completion: quarantined, never reused
	opParked                        // a provided-buffer receive waiting for buffers, out of the kernel (starved.go)
	opParkedCanceled                // parked, then canceled: completed at the turn's end
)

// A Completion is what a Completer receives for each completion of its op.
type Completion struct {
	// Res is the result: >= 0 on success (bytes, a new fd, …), -errno on
	// failure. A canceled op reports -ECANCELED.
	Res int32
	// Flags are the completion flags (ring.CQEFMore, ring.CQEFSockNonempty,
	// …), identical on both backends.
	Flags uint32
	// Data holds the bytes received by a provided-buffer receive (for a
	// datagram receive, the datagram's payload). It is valid only during
	// the Complete call: the buffer returns to the loop right after.
	Data []byte
	// Name holds a received datagram's source address, a raw sockaddr as
	// recvmsg(2) writes it (sock.ParseAddrPort reads an IP one; empty
	// for an unnamed Unix socket); SendTo takes it back as a
	// destination. Valid only during the Complete call. Nil for other
	// ops.
	Name []byte
	// MsgFlags are a received datagram's message flags: unix.MSG_TRUNC
	// when it was longer than a provided buffer holds (Data then holds
	// its first bytes and Res its whole length), unix.MSG_CTRUNC when its
	// control messages did not fit in the room its receive reserved.
	MsgFlags uint32
	// Control holds a received datagram's control messages, as
	// recvmsg(2) returns them (unix.ParseSocketControlMessage reads
	// them), when its receive reserved room for them
	// (RecvmsgProvidedControl). Valid only during the Complete call.
	Control []byte
	// Quarantined reports that the kernel's final word on the op never
	// came: the op was given up (a ring rebuild whose old ring did not
	// complete it by its deadline). It comes with the op's final
	// completion, and the loop keeps every buffer the op was given
	// referenced for the life of the process (Stats.Quarantined). The
	// Completer must never reuse or recycle that memory either: the
	// kernel may still read or write it. Two forms:
	// Res is -ECANCELED, Flags 0: the outcome is unknown (a send may
	// have sent part of its bytes, a receive may have consumed some). The
	// stream is broken; close it so the peer sees a failure (conn resets
	// the connection).
	Quarantined bool
}

// More reports whether a multishot op stays armed after this completion.
func (c *Completion) More() bool { return c.Flags&ring.CQEFMore != 0 }

// A Completer receives the completions of the ops it started. Complete runs
// on the loop goroutine and must not block. For multishot ops it is called
// once per completion, with ring.CQEFMore on every one but the last.
type Completer interface {
	Complete(c *Completion)
}

// A RecvLimiter is a provided-buffer receive's Completer that can ask for
// its receive to take less at a time. On io_uring a multishot receive
// takes up to 1 MiB (of the default buffers) before it ends and is
// re-armed (a receive resubmitted while buffers run short takes one
// bundle, Features.RecvCap, whether it asks or not); on epoll a receive
// reads up to 16 buffers per readiness event. That is what bulk transfers
// want, but a connection about to stop reading keeps what its receive
// took. LimitRecv is asked each time the receive is armed, and on epoll
// at each readiness event: a limit of n bytes makes the receive take at
// most n rounded up to whole buffers, then end (on io_uring where the
// kernel takes a length on multishot receives, 6.17; earlier kernels
// ignore it), or, on epoll, read that many buffers per readiness event.
type RecvLimiter interface {
	LimitRecv() RecvLimit
}

// A RecvLimit is how many bytes a provided-buffer receive may take before
// it ends (RecvLimiter); any positive value takes at least one buffer.
type RecvLimit int

// The limits with names.
const (
	RecvUnlimited RecvLimit = 0 // what the loop's receives take
	RecvOneBuffer RecvLimit = 1 // one provided buffer, then the receive ends
)

// buffersFor returns how many buffers of size bytes a receive limited to
// limit (> 0) takes: at least one.
func buffersFor(limit RecvLimit, size int) int {
	return max(1, (int(limit)+size-1)/size)
}

// limit returns the limit o's Completer asks for.
func (o *op) limit() RecvLimit {
	if l, ok := o.completer.(RecvLimiter); ok {
		return l.LimitRecv()
	}
	return RecvUnlimited
}

// op is one record of the op table.
//
// Fields each tag uses (set by the op API before driver.submit):
//
//	tagAccept   fd; multishot. Res: the new fd (SOCK_NONBLOCK|SOCK_CLOEXEC).
//	tagRecv     fd, buf, arg = recv flags. Res: bytes, 0 at EOF.
//	tagRecvBuf  fd, arg = recv flags; provided buffers; multishot unless
//	            RecvProvidedOnce. Completion.Data holds the bytes.
//	tagSend     fd, buf, arg = send flags (MSG_NOSIGNAL is always added).
//	tagSendmsg  fd, bufs (iov and msg are built from them), arg = flags;
//	            name, nameLen: a datagram's destination (SendTo), if any;
//	            control: its control messages (SendToControl), if any.
//	tagConnect  fd, extra: connectTo, connectToLen.
//	tagClose    fd.
//	tagShutdown fd, arg = how.
//	tagNop      nothing. Res: 0 (tests).
//	tagPollOut  fd. Res: the poll(2) mask once POLLOUT, POLLERR or POLLHUP.
//	tagRecvmsgBuf fd, arg = recvmsg flags; provided buffers; multishot;
//	            extra.recvControl: room for control messages, if any.
//	            Each completion is one datagram: its buffer holds the
//	            header, source, control messages and payload a multishot
//	            RECVMSG lays out (the epoll backend writes the same);
//	            complete splits them into Data, Name, Control and
//	            MsgFlags.
//
// Every piece of memory whose address is handed to the kernel lives here
// (or is referenced from here) until the op's final completion; the table
// is a slab of fixed chunks, so a record never moves.
type op struct {
	slot  uint32
	gen   uint32
	tag   opTag
	state opState

	multishot bool
	marks     opMarks

	fd        int32
	completer Completer

	buf   []byte // recv/send buffer
	extra *opExt // sendmsg's buffers and header, or an address: made on first use, kept by the slot

	arg uint32 // op-specific: recv/send flags, shutdown how

	// next links free records (free list) or records of one fd.
	next uint32
}

// opMarks are an op's flags beyond its state.
type opMarks uint8

const (
	markYield     opMarks = 1 << iota // a provided-buffer receive the loop canceled to rotate it (starved.go)
	markOneBundle                     // a rotated multishot receive: one bundle's worth, then back of the queue (starved.go)
	markRetried                       // a parked receive resubmitted that has had no bytes since: parked again, it keeps its place (starved.go)
)

// opExt holds what only some ops hand the kernel: a sendmsg's header, a
// connect's or a datagram's address. Most records only ever receive and
// send a buffer, and a connection's receive holds its record for the
// connection's life, so keeping these out of op makes every idle
// connection smaller.
type opExt struct {
	bufs         [][]byte // sendmsg buffers
	iov          []unix.Iovec
	msg          unix.Msghdr
	connectTo    unix.RawSockaddrAny // connect target
	connectToLen uint32
	// name is a datagram's destination (SendTo), nameLen its length
	// (0: none, the connected peer).
	name    [unix.SizeofSockaddrAny]byte
	nameLen uint32
	// control is a datagram's control messages (SendToControl): the
	// kernel reads them until the final completion.
	control []byte
	// recvControl is the room a datagram receive reserves in each buffer
	// for control messages (RecvmsgProvidedControl).
	recvControl uint32
}

// extras returns o's extension, making it on first use. It stays with the slot
// across uses (reset), so a steady state does not allocate.
func (o *op) extras() *opExt {
	if o.extra == nil {
		o.extra = new(opExt)
	}
	return o.extra
}

// userData returns the op's packed user_data.
func (o *op) userData() uint64 { return packUserData(o.tag, o.gen, o.slot) }

// reset drops every reference so the garbage collector can reclaim the
// buffers, keeping slot and generation.
func (o *op) reset() {
	slot, gen, ext := o.slot, o.gen, o.extra
	*o = op{slot: slot, gen: gen, extra: ext}
	if ext != nil {
		clear(ext.bufs) // let the buffers go; keep the list's capacity
		*ext = opExt{iov: ext.iov[:0], bufs: ext.bufs[:0]}
	}
}
