package ring

// Kernel constants of io_uring, Go-cased. The first word of each comment is
// the kernel's name (include/uapi/linux/io_uring.h); where a constant arrived
// after Linux 6.1, the comment names the release.

// Opcode is an io_uring operation: enum io_uring_op.
type Opcode uint8

const (
	OpNop            Opcode = 0  // IORING_OP_NOP
	OpReadv          Opcode = 1  // IORING_OP_READV
	OpWritev         Opcode = 2  // IORING_OP_WRITEV
	OpFsync          Opcode = 3  // IORING_OP_FSYNC
	OpReadFixed      Opcode = 4  // IORING_OP_READ_FIXED
	OpWriteFixed     Opcode = 5  // IORING_OP_WRITE_FIXED
	OpPollAdd        Opcode = 6  // IORING_OP_POLL_ADD
	OpPollRemove     Opcode = 7  // IORING_OP_POLL_REMOVE
	OpSyncFileRange  Opcode = 8  // IORING_OP_SYNC_FILE_RANGE
	OpSendmsg        Opcode = 9  // IORING_OP_SENDMSG
	OpRecvmsg        Opcode = 10 // IORING_OP_RECVMSG
	OpTimeout        Opcode = 11 // IORING_OP_TIMEOUT
	OpTimeoutRemove  Opcode = 12 // IORING_OP_TIMEOUT_REMOVE
	OpAccept         Opcode = 13 // IORING_OP_ACCEPT
	OpAsyncCancel    Opcode = 14 // IORING_OP_ASYNC_CANCEL
	OpLinkTimeout    Opcode = 15 // IORING_OP_LINK_TIMEOUT
	OpConnect        Opcode = 16 // IORING_OP_CONNECT
	OpFallocate      Opcode = 17 // IORING_OP_FALLOCATE
	OpOpenat         Opcode = 18 // IORING_OP_OPENAT
	OpClose          Opcode = 19 // IORING_OP_CLOSE
	OpFilesUpdate    Opcode = 20 // IORING_OP_FILES_UPDATE
	OpStatx          Opcode = 21 // IORING_OP_STATX
	OpRead           Opcode = 22 // IORING_OP_READ
	OpWrite          Opcode = 23 // IORING_OP_WRITE
	OpFadvise        Opcode = 24 // IORING_OP_FADVISE
	OpMadvise        Opcode = 25 // IORING_OP_MADVISE
	OpSend           Opcode = 26 // IORING_OP_SEND
	OpRecv           Opcode = 27 // IORING_OP_RECV
	OpOpenat2        Opcode = 28 // IORING_OP_OPENAT2
	OpEpollCtl       Opcode = 29 // IORING_OP_EPOLL_CTL
	OpSplice         Opcode = 30 // IORING_OP_SPLICE
	OpProvideBuffers Opcode = 31 // IORING_OP_PROVIDE_BUFFERS
	OpRemoveBuffers  Opcode = 32 // IORING_OP_REMOVE_BUFFERS
	OpTee            Opcode = 33 // IORING_OP_TEE
	OpShutdown       Opcode = 34 // IORING_OP_SHUTDOWN
	OpRenameat       Opcode = 35 // IORING_OP_RENAMEAT
	OpUnlinkat       Opcode = 36 // IORING_OP_UNLINKAT
	OpMkdirat        Opcode = 37 // IORING_OP_MKDIRAT
	OpSymlinkat      Opcode = 38 // IORING_OP_SYMLINKAT
	OpLinkat         Opcode = 39 // IORING_OP_LINKAT
	OpMsgRing        Opcode = 40 // IORING_OP_MSG_RING
	OpFsetxattr      Opcode = 41 // IORING_OP_FSETXATTR
	OpSetxattr       Opcode = 42 // IORING_OP_SETXATTR
	OpFgetxattr      Opcode = 43 // IORING_OP_FGETXATTR
	OpGetxattr       Opcode = 44 // IORING_OP_GETXATTR
	OpSocket         Opcode = 45 // IORING_OP_SOCKET
	OpUringCmd       Opcode = 46 // IORING_OP_URING_CMD
	OpSendZC         Opcode = 47 // IORING_OP_SEND_ZC
	OpSendmsgZC      Opcode = 48 // IORING_OP_SENDMSG_ZC
	OpReadMultishot  Opcode = 49 // IORING_OP_READ_MULTISHOT (6.7)
	OpWaitid         Opcode = 50 // IORING_OP_WAITID (6.7)
	OpFutexWait      Opcode = 51 // IORING_OP_FUTEX_WAIT (6.7)
	OpFutexWake      Opcode = 52 // IORING_OP_FUTEX_WAKE (6.7)
	OpFutexWaitv     Opcode = 53 // IORING_OP_FUTEX_WAITV (6.7)
	OpFixedFdInstall Opcode = 54 // IORING_OP_FIXED_FD_INSTALL (6.8)
	OpFtruncate      Opcode = 55 // IORING_OP_FTRUNCATE (6.9)
	OpBind           Opcode = 56 // IORING_OP_BIND (6.11)
	OpListen         Opcode = 57 // IORING_OP_LISTEN (6.11)
	OpRecvZC         Opcode = 58 // IORING_OP_RECV_ZC (6.15)
	OpEpollWait      Opcode = 59 // IORING_OP_EPOLL_WAIT (6.15)
	OpReadvFixed     Opcode = 60 // IORING_OP_READV_FIXED (6.15)
	OpWritevFixed    Opcode = 61 // IORING_OP_WRITEV_FIXED (6.15)
)

// SQE flags (SQE.Flags): IOSQE_*.
const (
	SQEFixedFile      uint8 = 1 << 0 // IOSQE_FIXED_FILE: Fd is an index into the registered files
	SQEIODrain        uint8 = 1 << 1 // IOSQE_IO_DRAIN
	SQEIOLink         uint8 = 1 << 2 // IOSQE_IO_LINK
	SQEIOHardlink     uint8 = 1 << 3 // IOSQE_IO_HARDLINK
	SQEAsync          uint8 = 1 << 4 // IOSQE_ASYNC
	SQEBufferSelect   uint8 = 1 << 5 // IOSQE_BUFFER_SELECT: pick a buffer from group BufIndex
	SQECQESkipSuccess uint8 = 1 << 6 // IOSQE_CQE_SKIP_SUCCESS
)

// Setup flags (Params.Flags): IORING_SETUP_*.
const (
	SetupIOPoll           uint32 = 1 << 0  // IORING_SETUP_IOPOLL
	SetupSQPoll           uint32 = 1 << 1  // IORING_SETUP_SQPOLL
	SetupSQAff            uint32 = 1 << 2  // IORING_SETUP_SQ_AFF
	SetupCQSize           uint32 = 1 << 3  // IORING_SETUP_CQSIZE
	SetupClamp            uint32 = 1 << 4  // IORING_SETUP_CLAMP
	SetupAttachWQ         uint32 = 1 << 5  // IORING_SETUP_ATTACH_WQ
	SetupRDisabled        uint32 = 1 << 6  // IORING_SETUP_R_DISABLED
	SetupSubmitAll        uint32 = 1 << 7  // IORING_SETUP_SUBMIT_ALL
	SetupCoopTaskrun      uint32 = 1 << 8  // IORING_SETUP_COOP_TASKRUN
	SetupTaskrunFlag      uint32 = 1 << 9  // IORING_SETUP_TASKRUN_FLAG
	SetupSQE128           uint32 = 1 << 10 // IORING_SETUP_SQE128
	SetupCQE32            uint32 = 1 << 11 // IORING_SETUP_CQE32
	SetupSingleIssuer     uint32 = 1 << 12 // IORING_SETUP_SINGLE_ISSUER
	SetupDeferTaskrun     uint32 = 1 << 13 // IORING_SETUP_DEFER_TASKRUN
	SetupNoMmap           uint32 = 1 << 14 // IORING_SETUP_NO_MMAP (6.5)
	SetupRegisteredFdOnly uint32 = 1 << 15 // IORING_SETUP_REGISTERED_FD_ONLY (6.5)
	SetupNoSQArray        uint32 = 1 << 16 // IORING_SETUP_NO_SQARRAY (6.6)
	SetupHybridIOPoll     uint32 = 1 << 17 // IORING_SETUP_HYBRID_IOPOLL (6.13)
)

// Features (Params.Features): IORING_FEAT_*.
const (
	FeatSingleMmap     uint32 = 1 << 0  // IORING_FEAT_SINGLE_MMAP
	FeatNoDrop         uint32 = 1 << 1  // IORING_FEAT_NODROP
	FeatSubmitStable   uint32 = 1 << 2  // IORING_FEAT_SUBMIT_STABLE
	FeatRWCurPos       uint32 = 1 << 3  // IORING_FEAT_RW_CUR_POS
	FeatCurPersonality uint32 = 1 << 4  // IORING_FEAT_CUR_PERSONALITY
	FeatFastPoll       uint32 = 1 << 5  // IORING_FEAT_FAST_POLL
	FeatPoll32Bits     uint32 = 1 << 6  // IORING_FEAT_POLL_32BITS
	FeatSQPollNonfixed uint32 = 1 << 7  // IORING_FEAT_SQPOLL_NONFIXED
	FeatExtArg         uint32 = 1 << 8  // IORING_FEAT_EXT_ARG
	FeatNativeWorkers  uint32 = 1 << 9  // IORING_FEAT_NATIVE_WORKERS
	FeatRsrcTags       uint32 = 1 << 10 // IORING_FEAT_RSRC_TAGS
	FeatCQESkip        uint32 = 1 << 11 // IORING_FEAT_CQE_SKIP
	FeatLinkedFile     uint32 = 1 << 12 // IORING_FEAT_LINKED_FILE
	FeatRegRegRing     uint32 = 1 << 13 // IORING_FEAT_REG_REG_RING (6.3)
	FeatRecvSendBundle uint32 = 1 << 14 // IORING_FEAT_RECVSEND_BUNDLE (6.10)
	FeatMinTimeout     uint32 = 1 << 15 // IORING_FEAT_MIN_TIMEOUT (6.12)
	FeatRWAttr         uint32 = 1 << 16 // IORING_FEAT_RW_ATTR (6.14)
	FeatNoIOWait       uint32 = 1 << 17 // IORING_FEAT_NO_IOWAIT (6.15)
)

// io_uring_enter flags: IORING_ENTER_*.
const (
	EnterGetEvents      uint32 = 1 << 0 // IORING_ENTER_GETEVENTS
	EnterSQWakeup       uint32 = 1 << 1 // IORING_ENTER_SQ_WAKEUP
	EnterSQWait         uint32 = 1 << 2 // IORING_ENTER_SQ_WAIT
	EnterExtArg         uint32 = 1 << 3 // IORING_ENTER_EXT_ARG
	EnterRegisteredRing uint32 = 1 << 4 // IORING_ENTER_REGISTERED_RING
	EnterAbsTimer       uint32 = 1 << 5 // IORING_ENTER_ABS_TIMER (6.12)
	EnterExtArgReg      uint32 = 1 << 6 // IORING_ENTER_EXT_ARG_REG (6.13)
	EnterNoIOWait       uint32 = 1 << 7 // IORING_ENTER_NO_IOWAIT (6.15)
)

// SQ ring flags (read from the SQ ring's flags word): IORING_SQ_*.
const (
	SQNeedWakeup uint32 = 1 << 0 // IORING_SQ_NEED_WAKEUP
	SQCQOverflow uint32 = 1 << 1 // IORING_SQ_CQ_OVERFLOW: CQEs wait in the kernel's overflow list
	SQTaskrun    uint32 = 1 << 2 // IORING_SQ_TASKRUN
)

// CQE flags (CQE.Flags): IORING_CQE_F_*.
const (
	CQEFBuffer       uint32 = 1 << 0 // IORING_CQE_F_BUFFER: upper 16 bits hold the buffer id
	CQEFMore         uint32 = 1 << 1 // IORING_CQE_F_MORE: a multishot op will post more CQEs
	CQEFSockNonempty uint32 = 1 << 2 // IORING_CQE_F_SOCK_NONEMPTY
	CQEFNotif        uint32 = 1 << 3 // IORING_CQE_F_NOTIF: SEND_ZC buffer-release notification
	CQEFBufMore      uint32 = 1 << 4 // IORING_CQE_F_BUF_MORE (6.12): incremental buffer still in use

	CQEBufferShift = 16 // IORING_CQE_BUFFER_SHIFT
)

// mmap offsets of io_uring regions: IORING_OFF_*.
const (
	offSQRing = 0          // IORING_OFF_SQ_RING
	offSQEs   = 0x10000000 // IORING_OFF_SQES
)

// io_uring_register opcodes: IORING_REGISTER_* / IORING_UNREGISTER_*.
const (
	registerEventfd     = 4  // IORING_REGISTER_EVENTFD
	registerEnableRings = 12 // IORING_REGISTER_ENABLE_RINGS
	registerRingFds     = 20 // IORING_REGISTER_RING_FDS
	unregisterRingFds   = 21 // IORING_UNREGISTER_RING_FDS
	registerPbufRing    = 22 // IORING_REGISTER_PBUF_RING
	unregisterPbufRing  = 23 // IORING_UNREGISTER_PBUF_RING
)

// Poll flags, carried in SQE.Len of POLL_ADD / POLL_REMOVE: IORING_POLL_*.
const (
	PollAddMulti       uint32 = 1 << 0 // IORING_POLL_ADD_MULTI
	PollUpdateEvents   uint32 = 1 << 1 // IORING_POLL_UPDATE_EVENTS
	PollUpdateUserData uint32 = 1 << 2 // IORING_POLL_UPDATE_USER_DATA
	PollAddLevel       uint32 = 1 << 3 // IORING_POLL_ADD_LEVEL
)

// Cancel flags (SQE.OpFlags of ASYNC_CANCEL): IORING_ASYNC_CANCEL_*.
const (
	AsyncCancelAll      uint32 = 1 << 0 // IORING_ASYNC_CANCEL_ALL
	AsyncCancelFd       uint32 = 1 << 1 // IORING_ASYNC_CANCEL_FD
	AsyncCancelAny      uint32 = 1 << 2 // IORING_ASYNC_CANCEL_ANY
	AsyncCancelFdFixed  uint32 = 1 << 3 // IORING_ASYNC_CANCEL_FD_FIXED
	AsyncCancelUserdata uint32 = 1 << 4 // IORING_ASYNC_CANCEL_USERDATA (6.6)
	AsyncCancelOp       uint32 = 1 << 5 // IORING_ASYNC_CANCEL_OP (6.6)
)

// Send/recv flags, carried in SQE.IoPrio: IORING_RECVSEND_* and friends.
const (
	RecvsendPollFirst uint16 = 1 << 0 // IORING_RECVSEND_POLL_FIRST
	RecvMultishot     uint16 = 1 << 1 // IORING_RECV_MULTISHOT
	RecvsendFixedBuf  uint16 = 1 << 2 // IORING_RECVSEND_FIXED_BUF
	SendZCReportUsage uint16 = 1 << 3 // IORING_SEND_ZC_REPORT_USAGE
	RecvsendBundle    uint16 = 1 << 4 // IORING_RECVSEND_BUNDLE (6.10)
)

// Accept flags, carried in SQE.IoPrio: IORING_ACCEPT_*.
const (
	AcceptMultishot uint16 = 1 << 0 // IORING_ACCEPT_MULTISHOT
	AcceptDontWait  uint16 = 1 << 1 // IORING_ACCEPT_DONTWAIT (6.10)
	AcceptPollFirst uint16 = 1 << 2 // IORING_ACCEPT_POLL_FIRST (6.10)
)
