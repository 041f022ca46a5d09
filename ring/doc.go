// Package ring is ringloop's io_uring binding: a small, liburing-shaped layer
// over golang.org/x/sys/unix, without cgo. It sets a ring up (New), maps its
// queues, hands out SQEs (GetSQE and the SQE Prep methods), submits and waits
// (Submit, SubmitAndWait, SubmitAndWaitTimeout, WaitCQETimeout), reaps
// completions in batches (PeekBatch, CQAdvance), registers an eventfd,
// provided-buffer rings and the ring fd, and finds which setup flags the
// kernel accepts (SupportedSetupFlags).
//
// It is not a runtime: it starts no goroutine, calls no callback and knows
// nothing of connections. Package loop builds the event loop on top of it.
// Socket helpers that are not io_uring (sockaddr encoding, sendmsg(2),
// recvmmsg(2), SO_MEMINFO) are in internal/sock; ring and internal/sock are
// the only packages of the module that import unsafe.
//
// # Concurrency
//
// A Ring is not safe for concurrent use. One goroutine owns it and makes
// every call (the loop goroutine). With SetupSingleIssuer, the kernel also
// requires every submission to come from the thread that created the ring:
// call runtime.LockOSThread before New and never unlock. RegisterRingFd
// binds the registration to the calling thread in the same way. Package
// level functions (SupportedSetupFlags, Errno) are safe for concurrent use.
//
// # Safety
//
// The kernel reads and writes memory named in an SQE after the Prep call
// returns, until the op's final CQE (for multishot ops, the CQE without
// CQEFMore). The SQ lives in mmap'd memory the garbage collector does not
// scan, so:
//
//  1. Every buffer, sockaddr, msghdr or timespec whose address goes into an
//     SQE must stay reachable from a live Go object (the loop's op table)
//     until that final CQE, and must not be reused meanwhile.
//  2. Such memory must live on the heap, never on a goroutine stack, which
//     can move: storing it in a heap object guarantees both.
//  3. Buffers of a provided-buffer ring (BufRing) are off-heap mappings; the
//     slice a CQE names is valid until the buffer is given back (Recycle).
//
// Ops in flight when Close runs are canceled by the kernel as it tears the
// ring down, asynchronously: cancel and reap them first if their memory is
// about to be reused.
//
// # Errors
//
// A CQE result converts with Errno, which returns the bare unix.Errno so
// errors.Is(err, unix.ECONNRESET) works. When io_uring itself is refused
// (ENOSYS, EPERM from seccomp or kernel.io_uring_disabled, ENOMEM from the
// memlock limit), New returns a *SetupError matching both ErrNotSupported
// and the errno. A missing feature is an *UnsupportedError, which matches
// ErrNotSupported. Error strings start with "ring: ".
//
// # Kernel
//
// The binding runs from Linux 6.1 and takes for granted what that release
// has (a single mapping for both rings, no dropped CQEs, EXT_ARG waits,
// multishot accept and receive, provided-buffer rings, registered ring
// fds); newer features are the caller's to probe. docs/kernel-support.md
// lists them, from one table, KernelTable. NewFor makes a ring for a
// kernel profile (a Kernel, 6.1 or later): the ring then offers only what
// that release had, refusing the rest as it would. CountSubmissions counts
// the SQEs a ring publishes by opcode and flags, to prove which features a
// program used. On systems other than Linux the package compiles and New
// returns an error matching ErrNotSupported.
package ring
