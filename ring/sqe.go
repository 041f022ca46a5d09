package ring

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// SQE preparation. Each Prep method overwrites every field of the entry
// except UserData, which the caller sets after preparing (or before, since
// Prep leaves it alone), and encodes one operation the way the kernel reads
// it (see io_uring_enter(2) and the io_uring_prep_* man pages for the field
// roles). Flags such as SQEIOLink or a buffer group are added afterwards.
//
// Safety: every slice or pointer argument becomes an address in the SQE; see
// ptr.go for the rule the caller must keep until the op's final CQE.

// prepRW fills the fields shared by every operation and clears the rest.
// UserData is left untouched.
func (e *SQE) prepRW(op Opcode, fd int32, addr uint64, length uint32, off uint64) {
	e.Opcode = op
	e.Flags = 0
	e.IoPrio = 0
	e.Fd = fd
	e.Off = off
	e.Addr = addr
	e.Len = length
	e.OpFlags = 0
	e.BufIndex = 0
	e.Personality = 0
	e.SpliceFdIn = 0
	e.Addr3 = 0
	e.Pad2 = 0
}

// SetRecvTotal limits a multishot IORING_OP_RECV prepared by
// PrepRecvMultishot to about n bytes in all: once it has taken n, its
// completion carries no CQEFMore and the caller re-arms it. Kernels without
// the limit (before 6.17) fail the receive with -EINVAL.
func (e *SQE) SetRecvTotal(n uint32) { e.SpliceFdIn = int32(n) }

// PrepNop prepares IORING_OP_NOP: an op that completes at once with res 0.
func (e *SQE) PrepNop() {
	e.prepRW(OpNop, -1, 0, 0, 0)
}

// PrepAccept prepares IORING_OP_ACCEPT on the listening socket fd. addr and
// addrLen may both be nil; otherwise *addrLen must hold the size of *addr and
// the kernel writes the peer address into both. flags are accept4(2) flags
// (unix.SOCK_NONBLOCK, unix.SOCK_CLOEXEC). The CQE's res is the new fd.
func (e *SQE) PrepAccept(fd int, addr *unix.RawSockaddrAny, addrLen *uint32, flags uint32) {
	e.prepRW(OpAccept, int32(fd), ptrAddr(addr), 0, ptrAddr(addrLen))
	e.OpFlags = flags
}

// PrepMultishotAccept prepares a multishot IORING_OP_ACCEPT: one
// CQE per accepted connection, each with CQEFMore while the op stays armed.
// addr and addrLen are shared by every completion, so pass nil unless only
// the latest peer address matters.
func (e *SQE) PrepMultishotAccept(fd int, addr *unix.RawSockaddrAny, addrLen *uint32, flags uint32) {
	e.PrepAccept(fd, addr, addrLen, flags)
	e.IoPrio |= AcceptMultishot
}

// PrepConnect prepares IORING_OP_CONNECT of socket fd to the address addr of
// addrLen bytes.
func (e *SQE) PrepConnect(fd int, addr *unix.RawSockaddrAny, addrLen uint32) {
	e.prepRW(OpConnect, int32(fd), ptrAddr(addr), 0, uint64(addrLen))
}

// PrepRecv prepares IORING_OP_RECV into buf with recv(2) flags. With a
// buffer group (SetBufferGroup) buf is nil and len(buf) is replaced by the
// group's buffer size; pass a nil buf and call SetBufferGroup.
func (e *SQE) PrepRecv(fd int, buf []byte, flags uint32) {
	e.prepRW(OpRecv, int32(fd), bufAddr(buf), uint32(len(buf)), 0)
	e.OpFlags = flags
}

// PrepRecvMultishot prepares a multishot IORING_OP_RECV. It must
// be used with a provided-buffer group: call SetBufferGroup after it. Each
// CQE names the buffer it filled (CQE.BufferID) and carries CQEFMore while
// the op stays armed.
func (e *SQE) PrepRecvMultishot(fd int, flags uint32) {
	e.PrepRecv(fd, nil, flags)
	e.IoPrio |= RecvMultishot
}

// SetBufferGroup makes the prepared op pick its buffer from the
// provided-buffer group bgid (IOSQE_BUFFER_SELECT with buf_group).
func (e *SQE) SetBufferGroup(bgid uint16) {
	e.Flags |= SQEBufferSelect
	e.BufIndex = bgid
}

// PrepSend prepares IORING_OP_SEND of buf with send(2) flags.
func (e *SQE) PrepSend(fd int, buf []byte, flags uint32) {
	e.prepRW(OpSend, int32(fd), bufAddr(buf), uint32(len(buf)), 0)
	e.OpFlags = flags
}

// PrepSendmsg prepares IORING_OP_SENDMSG of msg with sendmsg(2) flags. msg,
// its iovec array and every buffer it points at must stay reachable until
// the CQE.
func (e *SQE) PrepSendmsg(fd int, msg *unix.Msghdr, flags uint32) {
	e.prepRW(OpSendmsg, int32(fd), ptrAddr(msg), 1, 0)
	e.OpFlags = flags
}

// PrepRecvmsgMultishot prepares a multishot IORING_OP_RECVMSG
// from a provided-buffer group: call SetBufferGroup after it. msg gives
// only the sizes reserved in each buffer for the source address
// (msg.Namelen) and control messages (msg.Controllen); it has no iovecs.
// Each CQE's buffer starts with the layout ParseRecvmsgOut reads; its Res
// counts every byte used in the buffer. msg must stay reachable until the
// final CQE.
func (e *SQE) PrepRecvmsgMultishot(fd int, msg *unix.Msghdr, flags uint32) {
	e.prepRW(OpRecvmsg, int32(fd), ptrAddr(msg), 1, 0)
	e.OpFlags = flags
	e.IoPrio = RecvMultishot
}

// PrepRead prepares IORING_OP_READ of up to len(buf) bytes at offset (use
// ^uint64(0) for the file's current position).
func (e *SQE) PrepRead(fd int, buf []byte, offset uint64) {
	e.prepRW(OpRead, int32(fd), bufAddr(buf), uint32(len(buf)), offset)
}

// PrepClose prepares IORING_OP_CLOSE of fd.
func (e *SQE) PrepClose(fd int) {
	e.prepRW(OpClose, int32(fd), 0, 0, 0)
}

// PrepShutdown prepares IORING_OP_SHUTDOWN of socket fd; how is
// unix.SHUT_RD, unix.SHUT_WR or unix.SHUT_RDWR.
func (e *SQE) PrepShutdown(fd int, how int) {
	e.prepRW(OpShutdown, int32(fd), 0, uint32(how), 0)
}

// PrepTimeout prepares IORING_OP_TIMEOUT: it completes with -ETIME when ts
// elapses (relative, unless flags has TimeoutAbs), or with 0 once count
// other CQEs have been posted (count 0: time only). ts must stay reachable
// until the CQE.
func (e *SQE) PrepTimeout(ts *Timespec, count uint32, flags uint32) {
	e.prepRW(OpTimeout, -1, ptrAddr(ts), 1, uint64(count))
	e.OpFlags = flags
}

// PrepPollAdd prepares a one-shot IORING_OP_POLL_ADD on fd for the poll(2)
// events in mask (unix.POLLIN, …). The CQE's res is the ready mask.
func (e *SQE) PrepPollAdd(fd int, mask uint32) {
	e.prepRW(OpPollAdd, int32(fd), 0, 0, 0)
	e.OpFlags = poll32Events(mask)
}

// poll32Events encodes a poll(2) mask for the poll32_events field. On
// big-endian machines the kernel swaps its 16-bit halves when reading it
// (io_uring/poll.c, swahw32, so that the old 16-bit poll_events field
// still lines up), hence the swap here, as liburing's
// io_uring_prep_poll_add does; on little-endian machines it is the mask.
func poll32Events(mask uint32) uint32 {
	if bigEndian {
		return mask<<16 | mask>>16
	}
	return mask
}

// bigEndian reports whether this machine stores the high byte first.
var bigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// PrepPollMultishot prepares a multishot IORING_OP_POLL_ADD:
// one CQE with CQEFMore per readiness event until removed.
func (e *SQE) PrepPollMultishot(fd int, mask uint32) {
	e.PrepPollAdd(fd, mask)
	e.Len = PollAddMulti
}

// PrepCancel64 prepares IORING_OP_ASYNC_CANCEL of the request whose
// user_data is userData; flags are AsyncCancel* bits (AsyncCancelAll cancels
// every match). The CQE's res is 0 (or the count with AsyncCancelAll),
// -ENOENT when nothing matched, -EALREADY when the victim was already
// running.
func (e *SQE) PrepCancel64(userData uint64, flags uint32) {
	e.prepRW(OpAsyncCancel, -1, userData, 0, 0)
	e.OpFlags = flags
}

// PrepCancelAll prepares IORING_OP_ASYNC_CANCEL of every request in flight
// on the ring (AsyncCancelAny). The CQE's res is the number of
// requests canceled.
func (e *SQE) PrepCancelAll() {
	e.prepRW(OpAsyncCancel, -1, 0, 0, 0)
	e.OpFlags = AsyncCancelAny
}
