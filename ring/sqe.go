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

// PrepMultishotAccept prepares a multishot IORING_OP_ACCEPT (Linux 5.19): one
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

// PrepRecvMultishot prepares a multishot IORING_OP_RECV (Linux 6.0). It must
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

// PrepSendZC prepares IORING_OP_SEND_ZC (Linux 6.0): a zero-copy send. It
// posts two CQEs: the result (with CQEFMore) and, once the kernel no longer
// reads buf, a notification with CQEFNotif. buf must stay untouched and
// reachable until the notification. zcFlags are IORING_RECVSEND_* /
// SendZCReportUsage bits.
func (e *SQE) PrepSendZC(fd int, buf []byte, flags uint32, zcFlags uint16) {
	e.prepRW(OpSendZC, int32(fd), bufAddr(buf), uint32(len(buf)), 0)
	e.OpFlags = flags
	e.IoPrio = zcFlags
}

// PrepSendmsg prepares IORING_OP_SENDMSG of msg with sendmsg(2) flags. msg,
// its iovec array and every buffer it points at must stay reachable until
// the CQE.
func (e *SQE) PrepSendmsg(fd int, msg *unix.Msghdr, flags uint32) {
	e.prepRW(OpSendmsg, int32(fd), ptrAddr(msg), 1, 0)
	e.OpFlags = flags
}

// PrepRecvmsg prepares IORING_OP_RECVMSG into msg with recvmsg(2) flags.
// As recvmsg(2) does, the kernel writes the source address into
// msg.Name (its length into msg.Namelen) and the message flags (MSG_TRUNC,
// …) into msg.Flags. msg, its iovecs, name and control buffers must stay
// reachable until the CQE.
func (e *SQE) PrepRecvmsg(fd int, msg *unix.Msghdr, flags uint32) {
	e.prepRW(OpRecvmsg, int32(fd), ptrAddr(msg), 1, 0)
	e.OpFlags = flags
}

// PrepRecvmsgMultishot prepares a multishot IORING_OP_RECVMSG (Linux 6.0)
// from a provided-buffer group: call SetBufferGroup after it. msg gives
// only the sizes reserved in each buffer for the source address
// (msg.Namelen) and control messages (msg.Controllen); it has no iovecs.
// Each CQE's buffer starts with the layout ParseRecvmsgOut reads; its Res
// counts every byte used in the buffer. msg must stay reachable until the
// final CQE.
func (e *SQE) PrepRecvmsgMultishot(fd int, msg *unix.Msghdr, flags uint32) {
	e.PrepRecvmsg(fd, msg, flags)
	e.IoPrio |= RecvMultishot
}

// PrepRead prepares IORING_OP_READ of up to len(buf) bytes at offset (use
// ^uint64(0) for the file's current position).
func (e *SQE) PrepRead(fd int, buf []byte, offset uint64) {
	e.prepRW(OpRead, int32(fd), bufAddr(buf), uint32(len(buf)), offset)
}

// PrepWrite prepares IORING_OP_WRITE of buf at offset (^uint64(0) for the
// file's current position).
func (e *SQE) PrepWrite(fd int, buf []byte, offset uint64) {
	e.prepRW(OpWrite, int32(fd), bufAddr(buf), uint32(len(buf)), offset)
}

// PrepReadv prepares IORING_OP_READV into the buffers described by iovecs.
func (e *SQE) PrepReadv(fd int, iovecs []unix.Iovec, offset uint64) {
	e.prepRW(OpReadv, int32(fd), iovecAddr(iovecs), uint32(len(iovecs)), offset)
}

// PrepWritev prepares IORING_OP_WRITEV of the buffers described by iovecs.
func (e *SQE) PrepWritev(fd int, iovecs []unix.Iovec, offset uint64) {
	e.prepRW(OpWritev, int32(fd), iovecAddr(iovecs), uint32(len(iovecs)), offset)
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

// PrepTimeoutRemove prepares IORING_OP_TIMEOUT_REMOVE of the timeout whose
// user_data is userData.
func (e *SQE) PrepTimeoutRemove(userData uint64, flags uint32) {
	e.prepRW(OpTimeoutRemove, -1, userData, 0, 0)
	e.OpFlags = flags
}

// PrepLinkTimeout prepares IORING_OP_LINK_TIMEOUT: placed right after an SQE
// flagged SQEIOLink, it cancels that op if ts elapses first. ts must stay
// reachable until the CQE.
func (e *SQE) PrepLinkTimeout(ts *Timespec, flags uint32) {
	e.prepRW(OpLinkTimeout, -1, ptrAddr(ts), 1, 0)
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

// PrepPollMultishot prepares a multishot IORING_OP_POLL_ADD (Linux 5.13):
// one CQE with CQEFMore per readiness event until removed.
func (e *SQE) PrepPollMultishot(fd int, mask uint32) {
	e.PrepPollAdd(fd, mask)
	e.Len = PollAddMulti
}

// PrepPollRemove prepares IORING_OP_POLL_REMOVE of the poll whose user_data
// is userData.
func (e *SQE) PrepPollRemove(userData uint64) {
	e.prepRW(OpPollRemove, -1, userData, 0, 0)
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

// PrepCancelFd prepares IORING_OP_ASYNC_CANCEL of requests on fd
// (AsyncCancelFd is added; add AsyncCancelAll to cancel every one of them).
func (e *SQE) PrepCancelFd(fd int, flags uint32) {
	e.prepRW(OpAsyncCancel, int32(fd), 0, 0, 0)
	e.OpFlags = flags | AsyncCancelFd
}

// PrepCancelAll prepares IORING_OP_ASYNC_CANCEL of every request in flight
// on the ring (AsyncCancelAny, Linux 5.19). The CQE's res is the number of
// requests canceled.
func (e *SQE) PrepCancelAll() {
	e.prepRW(OpAsyncCancel, -1, 0, 0, 0)
	e.OpFlags = AsyncCancelAny
}

// PrepMsgRing prepares IORING_OP_MSG_RING (Linux 5.18): post a CQE on the
// ring whose fd is ringFd, with res = res and user_data = userData. flags
// are MsgRing* bits.
func (e *SQE) PrepMsgRing(ringFd int, res uint32, userData uint64, flags uint32) {
	e.prepRW(OpMsgRing, int32(ringFd), MsgData, res, userData)
	e.OpFlags = flags
}

// PrepSocket prepares IORING_OP_SOCKET (Linux 5.19): socket(2) with domain,
// typ and proto; flags must be 0 today. The CQE's res is the new fd.
func (e *SQE) PrepSocket(domain, typ, proto int, flags uint32) {
	e.prepRW(OpSocket, int32(domain), 0, uint32(proto), uint64(typ))
	e.OpFlags = flags
}
