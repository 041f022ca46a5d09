package ring

import "encoding/binary"

// SizeofRecvmsgOut is the size of struct io_uring_recvmsg_out, the header a
// multishot RECVMSG puts at the start of each buffer it fills.
const SizeofRecvmsgOut = 16

// RecvmsgOut is the header of a buffer filled by a multishot RECVMSG
// (struct io_uring_recvmsg_out).
type RecvmsgOut struct {
	// NameLen is the source address's full length, as recvmsg(2) would
	// have set msg_namelen; at most the msg.Namelen reserved is stored.
	NameLen uint32
	// ControlLen is the length of the control messages stored.
	ControlLen uint32
	// PayloadLen is the datagram's length as recvmsg(2) would have
	// returned it: with MSG_TRUNC among the op's flags, the whole
	// datagram's, even when only part of it fit in the buffer.
	PayloadLen uint32
	// Flags are the message flags recvmsg(2) would have set (MSG_TRUNC
	// when the payload did not fit, MSG_CTRUNC, …).
	Flags uint32
}

// ParseRecvmsgOut splits buf, the n bytes a multishot RECVMSG reported
// using in one provided buffer, into its header, the source address (the
// part of the nameLen bytes reserved that the address filled), the control
// messages and the payload, as laid out for an op whose msghdr reserved
// nameLen and controlLen bytes. ok is false when buf cannot hold that
// layout. The payload is what was stored: shorter than PayloadLen when
// the datagram was truncated.
func ParseRecvmsgOut(buf []byte, nameLen, controlLen uint32) (h RecvmsgOut, name, control, payload []byte, ok bool) {
	head := uint64(SizeofRecvmsgOut) + uint64(nameLen) + uint64(controlLen)
	if uint64(len(buf)) < head {
		return h, nil, nil, nil, false
	}
	h = RecvmsgOut{
		NameLen:    binary.NativeEndian.Uint32(buf[0:4]),
		ControlLen: binary.NativeEndian.Uint32(buf[4:8]),
		PayloadLen: binary.NativeEndian.Uint32(buf[8:12]),
		Flags:      binary.NativeEndian.Uint32(buf[12:16]),
	}
	at := uint32(SizeofRecvmsgOut)
	name = buf[at : at+min(h.NameLen, nameLen)]
	at += nameLen
	control = buf[at : at+min(h.ControlLen, controlLen)]
	at += controlLen
	payload = buf[at:]
	if uint64(len(payload)) > uint64(h.PayloadLen) {
		payload = payload[:h.PayloadLen]
	}
	return h, name, control, payload, true
}

// PutRecvmsgOut writes h at the start of buf (at least SizeofRecvmsgOut
// bytes) as a multishot RECVMSG does, so that a buffer filled by
// recvmsg(2) or recvmmsg(2) reads like one of the kernel's.
func PutRecvmsgOut(buf []byte, h RecvmsgOut) {
	_ = buf[SizeofRecvmsgOut-1]
	binary.NativeEndian.PutUint32(buf[0:4], h.NameLen)
	binary.NativeEndian.PutUint32(buf[4:8], h.ControlLen)
	binary.NativeEndian.PutUint32(buf[8:12], h.PayloadLen)
	binary.NativeEndian.PutUint32(buf[12:16], h.Flags)
}
