package ring

// This file declares the kernel ABI of io_uring (include/uapi/linux/io_uring.h)
// as Go types. Every layout is asserted by abi_test.go with unsafe.Sizeof and
// unsafe.Offsetof; change nothing here without the test agreeing.

// SQE is one submission queue entry: struct io_uring_sqe (64 bytes).
//
// The kernel struct is made of unions; each Go field carries the first union
// member's role and the comment lists the others.
type SQE struct {
	Opcode Opcode // opcode: IORING_OP_*
	Flags  uint8  // flags: IOSQE_*
	IoPrio uint16 // ioprio; also recv/send/accept flags (IORING_RECVSEND_*, IORING_ACCEPT_*)
	Fd     int32  // fd

	// union { off; addr2; struct { cmd_op; __pad1 } }
	Off uint64

	// union { addr; splice_off_in; struct { level; optname } }
	Addr uint64

	Len uint32 // len: buffer size or number of iovecs

	// union { rw_flags; fsync_flags; poll_events (u16); poll32_events;
	//         sync_range_flags; msg_flags; timeout_flags; accept_flags;
	//         cancel_flags; open_flags; statx_flags; fadvise_advice;
	//         splice_flags; rename_flags; unlink_flags; hardlink_flags;
	//         xattr_flags; msg_ring_flags; uring_cmd_flags; waitid_flags;
	//         futex_flags; install_fd_flags; nop_flags }
	OpFlags uint32

	UserData uint64 // user_data: echoed back in the CQE

	// union { buf_index; buf_group } __attribute__((packed))
	BufIndex uint16

	Personality uint16 // personality

	// union { splice_fd_in; file_index; optlen; struct { addr_len; __pad3[1] } }
	SpliceFdIn int32

	// union { struct { addr3; __pad2[1] }; optval; cmd[0] }
	Addr3 uint64
	Pad2  uint64
}

// CQE is one completion queue entry: struct io_uring_cqe (16 bytes; rings
// set up with SetupCQE32 have 32-byte entries, of which these are the first 16).
type CQE struct {
	UserData uint64 // user_data of the SQE this completes
	Res      int32  // result: >= 0 on success, -errno on failure
	Flags    uint32 // IORING_CQE_F_*; the upper 16 bits carry a buffer id with CQEFBuffer
}

// SQRingOffsets is struct io_sqring_offsets: byte offsets of the SQ ring
// fields inside the SQ mapping.
type SQRingOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Flags       uint32
	Dropped     uint32
	Array       uint32
	Resv1       uint32
	UserAddr    uint64
}

// CQRingOffsets is struct io_cqring_offsets: byte offsets of the CQ ring
// fields inside the CQ mapping.
type CQRingOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Overflow    uint32
	CQEs        uint32
	Flags       uint32
	Resv1       uint32
	UserAddr    uint64
}

// Params is struct io_uring_params (120 bytes): in, the setup flags and
// sizes; out, the sizes granted, the features and the ring offsets.
type Params struct {
	SQEntries    uint32 // out: SQ entries granted
	CQEntries    uint32 // in with SetupCQSize, out: CQ entries granted
	Flags        uint32 // in: IORING_SETUP_*
	SQThreadCPU  uint32 // in with SetupSQAff
	SQThreadIdle uint32 // in with SetupSQPoll, milliseconds
	Features     uint32 // out: IORING_FEAT_*
	WQFd         uint32 // in with SetupAttachWQ
	Resv         [3]uint32
	SQOff        SQRingOffsets
	CQOff        CQRingOffsets
}

// GetEventsArg is struct io_uring_getevents_arg, passed to io_uring_enter
// with EnterExtArg.
type GetEventsArg struct {
	Sigmask   uint64
	SigmaskSz uint32
	MinWaitUs uint32 // min_wait_usec (6.12)
	Ts        uint64 // pointer to a Timespec
}

// Timespec is struct __kernel_timespec.
type Timespec struct {
	Sec  int64
	Nsec int64
}

// BufRingEntry is struct io_uring_buf: one entry of a provided-buffer ring.
// The ring's tail lives in the Resv field of entry 0 (struct io_uring_buf_ring).
type BufRingEntry struct {
	Addr uint64
	Len  uint32
	Bid  uint16
	Resv uint16
}

// BufReg is struct io_uring_buf_reg, the argument of RegisterPbufRing.
type BufReg struct {
	RingAddr    uint64
	RingEntries uint32
	Bgid        uint16
	Flags       uint16 // IOU_PBUF_RING_*
	Resv        [3]uint64
}

// RingFdUpdate is struct io_uring_rsrc_update, used by RegisterRingFds.
type RingFdUpdate struct {
	Offset uint32
	Resv   uint32
	Data   uint64
}
