//go:build linux

package loop

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/ring"
)

// The io_uring backend: one ring per loop, created R_DISABLED by NewGroup on
// whatever thread calls it and enabled by start() on the loop's locked OS
// thread, which SINGLE_ISSUER then makes the ring's only submitter. Every
// method but wake and injectStall runs on that thread.
//
// Memory the kernel touches asynchronously is either in the op record (the
// op table's slab never moves or frees a record), in this struct (the
// eventfd read target), or in mmap'd memory (the rings, the provided-buffer
// ring). The driver is referenced by its loop for the loop's whole life.

// uringCQEBatch is how many CQEs one PeekBatch copies out of the CQ; the
// array lives in the driver so reaping never allocates. Hard-coded: 256
// CQEs are 4 KiB, one page, and far more than a turn usually reaps.
const uringCQEBatch = 256

// uringRebuildTimeout bounds how long rebuild reaps the old ring for the
// final completions of the ops it canceled.
const uringRebuildTimeout = time.Second

// acceptFlags are the accept4(2) flags of every accepted fd: the loop never
// blocks on an fd and never leaks one into a child process.
const acceptFlags = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC

// errDriverClosed is returned by a driver's methods after close.
var errDriverClosed = errors.New("loop: uring backend: closed")

// newRingFn is ring.New; tests (and the loop's fallback tests) replace it to
// make io_uring unavailable, e.g. returning &ring.SetupError{Errno: EPERM}.
var newRingFn = ring.NewFor

// newBufRingFn is (*ring.Ring).NewBufRing; tests replace it to make a
// registration fail.
var newBufRingFn = (*ring.Ring).NewBufRing

// newDgramRingFn is (*ring.Ring).NewBufRingLazy, the datagram buffers';
// tests replace it to make a registration fail.
var newDgramRingFn = (*ring.Ring).NewBufRingLazy

// Buffer groups: the stream receives' (WithBufferRing) and the datagram
// receives' (WithDatagramBuffers).
const (
	streamGroup = 0
	dgramGroup  = 1
)

// hiddenFeatures removes kernel features from what uring drivers find, as
// a kernel without them would; tests of the fallbacks set it before making
// a group.
var hiddenFeatures struct {
	bundle       bool // IORING_FEAT_RECVSEND_BUNDLE (6.10)
	multishotLen bool // a length on multishot receives (6.17)
}

// uringDriver implements driver on one io_uring ring.
type uringDriver struct {
	cfg driverConfig

	// Loop-thread state.
	r          *ring.Ring
	bufRing    *ring.BufRing // the stream receives' buffers
	dgramRing  *ring.BufRing // the datagram receives', made with the first of them (nil until then)
	ringFlags  uint32        // setup flags of the current ring (without R_DISABLED once enabled)
	featureSet Features      // the loop thread's copy; features() reads publishedFeatures
	started    bool
	closed     bool

	// closedSubmissions holds the submission counts of the rings rebuilds closed
	// (countSubmissions).
	closedSubmissions ring.SubmitCounts

	// The eventfd wakeup: an 8-byte READ in the ring (the kernel turns it
	// into an internal poll) into readTarget, a field of this long-lived
	// object so it outlives every READ; or, with netpoll, no READ: the
	// eventfd is registered with the ring, which signals it when it queues
	// work, and the loop waits for it on the Go netpoller (netwait.go).
	readTarget   [8]byte
	wakeArmed    bool // a READ of the eventfd is in the ring
	netpoll      bool
	waiter       *netWaiter // the eventfd on the netpoller (a shared-thread loop)
	waitErr      error      // why the waiter could not be made
	pendingWoken bool       // a wakeup consumed by rebuild, reported by the next poll
	cancelQueued bool       // a cancel SQE waits in the SQ: reap ends its batch so poll submits it

	cqeBatch [uringCQEBatch]ring.CQE // PeekBatch's target: reaping never allocates

	// connWait holds the connects a rebuild continued as a POLL_ADD for
	// POLLOUT (user_data → fd): a second CONNECT fails with EALREADY.
	connWait map[uint64]int32

	// Counters (loop thread).
	cancelCQEs     uint64        // completions of our own ASYNC_CANCELs
	lostCQEs       atomic.Uint64 // CQEs the kernel reports as dropped (cq overflow counter)
	cqOverflows    atomic.Uint64 // polls that found CQEs on the kernel's overflow list
	lastOverflow   uint32        // cq overflow counter at the last poll
	bufMisuse      atomic.Uint64 // completions naming a provided buffer not the kernel's to give
	bundles        atomic.Uint64 // provided-buffer completions that carried several buffers
	bundleBufIDs   []uint16      // TakeBundle's scratch
	bundleLen      uint32        // provided-buffer receives' length with bundles (setRecvCap); 0: a buffer's
	multishotTotal uint32        // bytes one multishot receive takes before it ends (setRecvCap); 0: no limit
	multishotRecv  bool          // receives may be multishot (always, but on a shared thread with GOMAXPROCS > 1; poll)

	faults uringFaults // fault injection (driver_uring_fault.go); empty in ordinary builds

	// Test seams.
	rebuildTimeout    time.Duration // how long rebuild reaps the old ring
	rebuildSkipCancel bool          // rebuild does not cancel the old ring's ops
	rebuildReaped     func()        // runs after rebuild reaped the old ring, before it moves the ops

	stallSeam

	// publishedFeatures is featureSet as last published for features(), which any
	// goroutine may call.
	publishedFeatures atomic.Pointer[Features]

	// wakeMu guards eventFd against close while wake writes to it, so a late
	// wake never writes into a reused fd number.
	wakeMu  sync.RWMutex
	eventFd int
	// wakeReq is set by wake before it signals the eventfd, so a netpoll
	// wait tells wake's signal from the kernel's.
	wakeReq atomic.Bool
}

// uringFloor is the first release the uring backend runs on, and
// uringNeeds what it takes for granted from it (kernel table names, and how
// an error says them). Below it epoll is the faster backend
// (docs/kernel-support.md).
var (
	uringFloor = ring.MustKernel("6.1")
	uringNeeds = []struct{ name, says string }{
		{"IORING_SETUP_DEFER_TASKRUN", "IORING_SETUP_DEFER_TASKRUN"},
		{"IORING_SETUP_SINGLE_ISSUER", "IORING_SETUP_SINGLE_ISSUER"},
		{ring.FeatureMultishotRecv, "multishot receive"},
		{ring.FeatureMultishotAccept, "multishot accept"},
		{ring.FeatureBufRing, "provided-buffer rings"},
		{ring.FeatureRingFds, "registered ring fds"},
		{"IORING_FEAT_EXT_ARG", "IORING_ENTER_EXT_ARG"},
	}
)

// checkFloor refuses a kernel older than uringFloor: the profile k, or the
// running kernel's release when k is zero, or a running kernel that lacks
// DEFER_TASKRUN whatever its release or the profile says. The error matches
// ring.ErrNotSupported and names the release and what it lacks.
func checkFloor(k ring.Kernel) error {
	rel, what := k, "Linux "+k.String()
	if k.IsZero() {
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			s := unix.ByteSliceToString(u.Release[:])
			rel, _ = ring.ParseKernel(s)
			what = "Linux " + s
		}
	} else {
		what += " (kernel profile)"
	}
	var lacks []string
	if !rel.IsZero() {
		for _, n := range uringNeeds {
			if !rel.HasFeature(n.name) {
				lacks = append(lacks, n.says)
			}
		}
	}
	if len(lacks) == 0 && !ring.SetupFlagSupported(ring.SetupSingleIssuer|ring.SetupDeferTaskrun) &&
		ring.SupportedSetupFlags() != 0 {
		lacks = append(lacks, "IORING_SETUP_DEFER_TASKRUN")
	}
	if len(lacks) == 0 {
		return nil
	}
	return &floorError{kernel: what, lacks: lacks}
}

// floorError is checkFloor's refusal; it matches ring.ErrNotSupported.
type floorError struct {
	kernel string
	lacks  []string
}

func (e *floorError) Error() string {
	return "loop: uring backend: " + e.kernel + " lacks " + strings.Join(e.lacks, ", ") +
		"; io_uring needs " + uringFloor.String() + " (BackendAuto uses epoll here)"
}

func (e *floorError) Is(target error) bool { return target == ring.ErrNotSupported }

// newUringDriver creates the ring (R_DISABLED, so that start can make the
// loop thread its single issuer) and the eventfd. It may run on any
// thread. Errors keep the errno; when io_uring is unusable here (a kernel
// before 6.1, or io_uring_setup refused with ENOSYS, EPERM or ENOMEM) they
// match ring.ErrNotSupported, so the auto backend can fall back to epoll.
func newUringDriver(cfg driverConfig) (*uringDriver, error) {
	if err := checkFloor(cfg.kernel); err != nil {
		return nil, err
	}
	d := &uringDriver{
		cfg:            cfg,
		eventFd:        -1,
		rebuildTimeout: uringRebuildTimeout,
	}
	r, err := d.newRing(true)
	if err != nil {
		return nil, fmt.Errorf("loop: uring backend: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("loop: uring backend: %w", os.NewSyscallError("eventfd", err))
	}
	d.r = r
	d.eventFd = efd
	d.multishotRecv = !cfg.shared || sharedMultishot()
	if cfg.shared {
		// Made here, with the driver's other fds, and used from start.
		d.waiter, d.waitErr = newNetWaiter(efd, cfg.name+"-wake", d.eventfdSignaled, cfg.park)
	}
	d.ringFlags = r.Flags()
	d.featureSet = Features{
		Backend:       BackendUring,
		RingFeatures:  r.Features(),
		SetupFlags:    d.ringFlags,
		BufCount:      d.cfg.bufCount,
		BufSize:       d.cfg.bufSize,
		DgramBufCount: d.cfg.dgramCount,
		DgramBufSize:  d.cfg.dgramSize,
		RecvBundle:    r.Features()&ring.FeatRecvSendBundle != 0 && !hiddenFeatures.bundle,
		SharedThread:  cfg.shared,
		Kernel:        cfg.kernel.String(),
	}
	d.publishFeatures()
	return d, nil
}

// publishFeatures makes the loop thread's featureSet visible to features().
func (d *uringDriver) publishFeatures() {
	f := d.featureSet
	d.publishedFeatures.Store(&f)
}

// setupFlags picks the ring's setup flags: SINGLE_ISSUER|DEFER_TASKRUN
// (completions run only when the loop asks for them, no IPIs), with
// TASKRUN_FLAG so that a non-blocking poll (PeekBatch, Submit) knows to
// enter with GETEVENTS for pending task work. SUBMIT_ALL keeps submitting
// after a bad SQE, so every op handed over gets its own completion.
// NO_SQARRAY (6.6) drops the SQ index indirection where the kernel has it.
//
// disabled asks for R_DISABLED: the ring stays off until start enables it
// on the loop thread, which SINGLE_ISSUER then binds as the only submitter.
func setupFlags(k ring.Kernel, disabled, shared bool) uint32 {
	flags := ring.SetupCQSize | ring.SetupSubmitAll
	if k.SetupFlagSupported(ring.SetupNoSQArray) {
		flags |= ring.SetupNoSQArray
	}
	if shared {
		// No single issuer: completions run as task work on the thread
		// that submitted the op. COOP_TASKRUN spares that thread an
		// interrupt while it runs: the work waits for its next entry
		// into the kernel (a system call, the netpoller's wait, at the
		// latest the next timer tick), and a thread asleep is still
		// woken for it. Without it every completion interrupts the
		// thread, which runs the loop's own goroutines meanwhile.
		return flags | ring.SetupCoopTaskrun
	}
	if disabled {
		flags |= ring.SetupRDisabled
	}
	return flags | ring.SetupSingleIssuer | ring.SetupDeferTaskrun | ring.SetupTaskrunFlag
}

// newRing creates a ring with the driver's size and the best setup flags;
// the CQ is twice the SQ.
func (d *uringDriver) newRing(disabled bool) (*ring.Ring, error) {
	n := d.cfg.ringEntries
	p := ring.Params{Flags: setupFlags(d.cfg.kernel, disabled, d.cfg.shared), CQEntries: min(2*n, ring.MaxCQEntries)}
	r, err := newRingFn(d.cfg.kernel, n, &p)
	if err == nil && countSubmissions {
		r.CountSubmissions(true)
	}
	return r, err
}

// countSubmissions makes the drivers count what their rings submit (a test
// seam: the op-count tests prove what each kernel profile leaves out).
var countSubmissions bool

// backend implements driver.
func (d *uringDriver) backend() Backend { return BackendUring }

// start enables the ring on the loop thread (its single issuer), registers
// the ring fd and the provided-buffer ring and arms the eventfd read.
func (d *uringDriver) start() error {
	if d.closed {
		return errDriverClosed
	}
	if d.started {
		return nil
	}
	if d.ringFlags&ring.SetupRDisabled != 0 {
		if err := d.r.EnableRings(); err != nil {
			return fmt.Errorf("loop: uring backend: enable ring: %w", err)
		}
		d.ringFlags &^= ring.SetupRDisabled
	}
	br, err := d.prepareRing(d.r)
	if err != nil {
		return err
	}
	d.bufRing = br
	d.setRecvCap()
	if d.cfg.shared {
		d.startNetpoll()
	}
	d.started = true
	d.featureSet.SetupFlags = d.ringFlags
	d.publishFeatures()
	return d.armWake()
}

// startNetpoll switches the wakeup to netpoll: the eventfd goes on the
// Go netpoller and is registered with the ring. Where either is refused the
// loop keeps waiting in io_uring_enter on an armed READ, and says so once.
func (d *uringDriver) startNetpoll() {
	err := d.waitErr
	if err == nil {
		err = d.r.RegisterEventfd(d.eventFd)
	}
	if err != nil {
		d.waiter.close()
		d.waiter = nil
		d.cfg.logger.Warn("loop: cannot wait on the Go netpoller; waiting in io_uring_enter",
			"loop", d.cfg.name, "err", err)
		return
	}
	d.netpoll = true
}

// eventfdSignaled is the waiter's readiness check: true when a completion
// waits or wake has signaled, both visible before their signal. It never
// reads the eventfd: the netpoller is edge-triggered and the eventfd reports
// every signal as an edge, so a counter left non-zero still ends the wait
// at the next signal (the counter saturates; it would take 2^64 signals).
// An edge that came before the wait is dropped when the wait begins, and
// what it announced is seen here, so the loop never sleeps on a completion
// or a wake, and spends no system call per wait on the counter.
func (d *uringDriver) eventfdSignaled() bool {
	return d.r.CQReady() > 0 || d.wakeReq.Load()
}

// waitNetpoll is poll's blocking wait in netpoll mode (a shared-thread
// loop), on a ring without DEFER_TASKRUN, after a submit that found no
// completion. The kernel posts completions itself, as task work on
// the submitting thread, and signals the eventfd for every one: the signal
// stays on, since turning it off while the loop runs would race with a
// completion posted meanwhile (the kernel orders the CQ tail store and its
// read of the flag with no full barrier between them). The waiter's check
// consumes the counter after looking at the CQ, so a completion is never
// slept on; a signal for completions already reaped costs one empty turn.
func (d *uringDriver) waitNetpoll(timeout time.Duration, res *pollResult) error {
	if _, err := d.r.Submit(); err != nil || d.r.CQReady() > 0 {
		return err
	}
	end := waitEnd(timeout)
	for {
		ready, err := d.waiter.wait(waitLeft(end))
		if err != nil || !ready {
			res.timedOut = err == nil
			return err
		}
		if d.r.CQReady() > 0 {
			return nil
		}
		if d.wakeReq.Swap(false) {
			res.woken = true
			return nil
		}
		// A signal for completions already reaped: wait on.
	}
}

// waitEnd is when a wait of timeout (< 0: unbounded) ends.
func waitEnd(timeout time.Duration) time.Time {
	if timeout < 0 {
		return time.Time{}
	}
	return time.Now().Add(timeout)
}

// waitLeft is what is left of a wait ending at end (-1: unbounded; 0: due).
func waitLeft(end time.Time) time.Duration {
	if end.IsZero() {
		return -1
	}
	return max(time.Until(end), 0)
}

// prepareRing registers r's fd with the loop thread (an optimisation: a
// failure is only logged) and makes and returns r's provided-buffer ring.
// It changes nothing in d.
func (d *uringDriver) prepareRing(r *ring.Ring) (*ring.BufRing, error) {
	if d.cfg.shared {
		// A registered ring fd belongs to the thread that registered it.
	} else if err := r.RegisterRingFd(); err != nil {
		d.cfg.logger.Debug("io_uring ring fd not registered", "loop", d.cfg.name, "err", err)
	}
	if d.netpoll {
		// A rebuild: the new ring signals the same eventfd.
		if err := r.RegisterEventfd(d.eventFd); err != nil {
			return nil, fmt.Errorf("loop: uring backend: register eventfd: %w", err)
		}
	}
	var err error
	if faultsEnabled {
		err = d.faults.bufRing(d.started)
	}
	var br *ring.BufRing
	if err == nil {
		br, err = newBufRingFn(r, streamGroup, d.cfg.bufCount, d.cfg.bufSize)
	}
	if err != nil {
		return nil, fmt.Errorf("loop: uring backend: provided-buffer ring: %w", err)
	}
	return br, nil
}

// newDgramRing makes r's datagram buffers (WithDatagramBuffers): their
// pages are backed only as datagrams fill them (ring.NewBufRingLazy), so
// 64 buffers of 68 KiB cost little more than a page each while datagrams
// are small.
func (d *uringDriver) newDgramRing(r *ring.Ring) (*ring.BufRing, error) {
	dr, err := newDgramRingFn(r, dgramGroup, d.cfg.dgramCount, d.cfg.dgramSize)
	if err != nil {
		return nil, fmt.Errorf("loop: uring backend: datagram buffers: %w", err)
	}
	return dr, nil
}

// bufRings are the buffer rings of one ring: a completion's buffer is in
// the one its op selects from (forTag).
type bufRings struct{ stream, dgram *ring.BufRing }

// forTag is the buffer ring a provided receive of tag selects from.
func (b bufRings) forTag(tag opTag) *ring.BufRing {
	if tag == tagRecvmsgBuf {
		return b.dgram
	}
	return b.stream
}

// rings returns the current ring's buffer rings.
func (d *uringDriver) rings() bufRings { return bufRings{d.bufRing, d.dgramRing} }

// getSQE returns a free SQE of the current ring, flushing a full SQ first.
func (d *uringDriver) getSQE() (*ring.SQE, error) { return getSQE(d.r) }

// getSQE returns a free SQE of r, flushing a full SQ to the kernel first.
func getSQE(r *ring.Ring) (*ring.SQE, error) {
	sqe, err := r.GetSQE()
	if err == ring.ErrSQFull {
		if _, err = r.Submit(); err != nil {
			return nil, err
		}
		sqe, err = r.GetSQE()
	}
	return sqe, err
}

// armWake puts a READ of the eventfd in the SQ; the next poll's enter
// submits it.
func (d *uringDriver) armWake() error {
	if d.netpoll {
		return nil // nothing to arm: the kernel signals the eventfd itself
	}
	sqe, err := d.getSQE()
	if err != nil {
		return fmt.Errorf("loop: uring backend: arm eventfd read: %w", err)
	}
	sqe.PrepRead(d.eventFd, d.readTarget[:], 0)
	sqe.UserData = internalUserData(internalWake)
	d.wakeArmed = true
	return nil
}

// submit implements driver: o's SQE goes into the SQ, and reaches the
// kernel with the next poll (or the flush of a full SQ).
func (d *uringDriver) submit(o *op) error {
	if d.closed {
		return errDriverClosed
	}
	if o.tag == tagRecvmsgBuf && d.dgramRing == nil {
		dr, err := d.newDgramRing(d.r)
		if err != nil {
			return err
		}
		d.dgramRing = dr
	}
	sqe, err := d.getSQE()
	if err != nil {
		return err
	}
	d.prep(sqe, o)
	if faultsEnabled {
		d.faults.prep(sqe, o)
	}
	o.state = opInFlight
	return nil
}

// prep encodes o into sqe, reading the fields op.go's contract names for
// o.tag. Every address it stores points into o (or memory o references).
func (d *uringDriver) prep(sqe *ring.SQE, o *op) {
	fd := int(o.fd)
	switch o.tag {
	case tagAccept:
		// No peer address: one buffer would be shared by every completion
		// of a multishot accept; the conn layer asks getpeername.
		if o.multishot {
			sqe.PrepMultishotAccept(fd, nil, nil, acceptFlags)
		} else {
			sqe.PrepAccept(fd, nil, nil, acceptFlags)
		}
	case tagRecv:
		sqe.PrepRecv(fd, o.buf, o.arg)
	case tagRecvBuf:
		// RecvProvidedOnce asks for single shots (AF_UNIX), and so
		// does a shared-thread loop where it may change threads
		// (multishotRecv).
		multishot := o.multishot && d.multishotRecv
		limit := RecvUnlimited
		if d.multishotTotal > 0 && d.multishotRecv {
			limit = o.limit()
		}
		switch {
		case multishot:
			sqe.PrepRecvMultishot(fd, o.arg)
			if d.multishotTotal > 0 {
				total := d.multishotTotal
				if limit > 0 {
					total = min(total, uint32(buffersFor(limit, int(d.cfg.bufSize))*int(d.cfg.bufSize)))
				}
				sqe.SetRecvTotal(uint32(total))
			}
		case d.multishotTotal > 0 && d.multishotRecv && o.marks&markOneBundle != 0:
			// A rotated receive: others wait for buffers. A single
			// shot with bundles appends what else the socket holds to
			// its one completion, past its length, for as long as
			// free buffers last, and the turn's other resubmitted
			// receives would find none; a multishot receive limited
			// to one bundle in all takes its share, and ends.
			sqe.PrepRecvMultishot(fd, o.arg)
			total := d.bundleLen
			if limit > 0 {
				total = min(total, uint32(buffersFor(limit, int(d.cfg.bufSize))*int(d.cfg.bufSize)))
			}
			sqe.SetRecvTotal(total)
		default:
			// Single shot from the buffer group: the completion has no
			// F_MORE and the loop re-arms, as after -ENOBUFS.
			sqe.PrepRecv(fd, nil, o.arg)
		}
		sqe.SetBufferGroup(d.bufRing.Group())
		// A shared thread's single shots take one buffer (setRecvCap).
		if d.featureSet.RecvBundle && (multishot || !d.cfg.shared) {
			sqe.IoPrio |= ring.RecvsendBundle
			sqe.Len = d.bundleLen
		}
	case tagRecvmsgBuf:
		// The buffer reserves room for the source address; the
		// kernel writes the header, the address, the control
		// messages and the payload.
		// MSG_TRUNC: the header then gives a truncated datagram's
		// whole length.
		// The room for control messages, if any, follows the address.
		x := o.extras()
		x.msg = unix.Msghdr{Namelen: dgramNameLen}
		x.msg.SetControllen(int(x.recvControl))
		sqe.PrepRecvmsgMultishot(fd, &x.msg, o.arg|unix.MSG_TRUNC)
		sqe.SetBufferGroup(d.dgramRing.Group())
	case tagSend:
		sqe.PrepSend(fd, o.buf, o.arg|unix.MSG_NOSIGNAL)
	case tagSendmsg:
		buildMsg(o)
		sqe.PrepSendmsg(fd, &o.extras().msg, o.arg|unix.MSG_NOSIGNAL)
	case tagConnect:
		sqe.PrepConnect(fd, &o.extras().connectTo, o.extras().connectToLen)
	case tagClose:
		sqe.PrepClose(fd)
	case tagShutdown:
		sqe.PrepShutdown(fd, int(o.arg))
	case tagNop:
		sqe.PrepNop()
	case tagPollOut:
		sqe.PrepPollAdd(fd, unix.POLLOUT)
	}
	sqe.UserData = o.userData()
}

// cancel implements driver: an ASYNC_CANCEL keyed by o's user_data, whose
// own completion is counted and otherwise ignored.
func (d *uringDriver) cancel(o *op) error {
	if d.closed {
		return errDriverClosed
	}
	sqe, err := d.getSQE()
	if err != nil {
		return err
	}
	sqe.PrepCancel64(o.userData(), 0)
	sqe.UserData = internalUserData(internalCancel)
	d.cancelQueued = true
	return nil
}

// errETIME and errEINTR are compared against the ring's bare errnos.
var (
	errETIME error = unix.ETIME
	errEINTR error = unix.EINTR
)

// poll implements driver: one io_uring_enter flushes the SQ and waits
// (EXT_ARG for timeout > 0; timeout 0 still enters with GETEVENTS when the
// kernel flags deferred task work, which is what makes DEFER_TASKRUN post
// completions), or the netpoller waits (netpoll). Then it reaps: at most
// max completions (<= 0: no limit) go to sink, the rest stay in the CQ.
// Enter errors other than ETIME and EINTR are returned after reaping, so
// the loop counts persistent ones as a stall. CQEs the kernel parked on its
// overflow list are moved in by PeekBatch; a rise of its dropped-CQE
// counter is counted and logged. The path allocates nothing.
func (d *uringDriver) poll(timeout time.Duration, max int, sink completionSink) (pollResult, error) {
	var res pollResult
	if d.takeStall() {
		return res, nil // injected stall: nothing seen
	}
	if d.closed {
		return res, errDriverClosed
	}
	if d.pendingWoken {
		d.pendingWoken = false
		res.woken = true
		timeout = 0
	}
	if !d.wakeArmed {
		if err := d.armWake(); err != nil {
			return res, err
		}
	}
	if d.cfg.shared {
		d.multishotRecv = sharedMultishot()
	}
	var err error
	d.cancelQueued = false
	// A wait, or a submit that may run long (the kernel sends inline): no
	// callback runs meanwhile.
	enterWait()
	switch {
	case timeout == 0 || d.r.CQReady() > 0:
		_, err = d.r.Submit()
	case d.netpoll:
		err = d.waitNetpoll(timeout, &res)
	case timeout < 0:
		_, err = d.r.SubmitAndWait(1)
	default:
		_, err = d.r.SubmitAndWaitTimeout(1, timeout)
	}
	leaveWait()
	switch {
	case err == nil:
	case err == errETIME:
		err = nil
		res.timedOut = true
	case err == errEINTR:
		err = nil
		res.interrupted = true
	}
	if max <= 0 {
		max = math.MaxInt
	}
	if faultsEnabled {
		max = d.faults.reapMax(max)
	}
	overflowed := d.r.CQOverflowPending()
	d.reap(max, sink, &res)
	if overflowed || d.r.CQOverflowPending() {
		d.cqOverflows.Add(1)
	}
	if res.completions > 0 || res.woken {
		res.timedOut = false
	} else if timeout == 0 && err == nil {
		res.timedOut = true
	}
	if ov := d.r.Overflow(); ov != d.lastOverflow {
		lost := ov - d.lastOverflow
		d.lastOverflow = ov
		d.lostCQEs.Add(uint64(lost))
		d.cfg.logger.Error("io_uring completion queue overflowed: completions lost",
			"loop", d.cfg.name, "lost", lost)
	}
	if !d.wakeArmed {
		if aerr := d.armWake(); err == nil {
			err = aerr
		}
	}
	return res, err
}

// reap delivers up to max completions of the current ring to sink. A
// cancel queued by a completion ends the reap after its batch: while the
// loop reaps, the kernel keeps posting (a multishot receive refills from
// the buffers reap recycles), and a cancel waiting in the SQ would not
// take effect until the CQ ran dry.
func (d *uringDriver) reap(max int, sink completionSink, res *pollResult) {
	for res.completions < max && !d.cancelQueued {
		n := d.r.PeekBatch(d.cqeBatch[:min(len(d.cqeBatch), max-res.completions)])
		if n == 0 {
			return
		}
		// The CQEs are copies: give the slots back to the kernel first.
		d.r.CQAdvance(uint32(n))
		for i := range n {
			c := &d.cqeBatch[i]
			if opTag(c.UserData>>(slotBits+genBits)) == tagInternal {
				d.internal(c, res)
				continue
			}
			d.deliver(c, d.rings(), sink)
			res.completions++
		}
	}
}

// deliver passes one completion of a table op to sink. For a receive into
// a provided buffer (from rings, the buffer rings of the ring that posted
// c) the bytes go along and the buffer is recycled right after the call.
func (d *uringDriver) deliver(c *ring.CQE, rings bufRings, sink completionSink) {
	if faultsEnabled {
		d.faults.result(c, d.bufRing)
	}
	ud, res, flags := c.UserData, c.Res, c.Flags
	tag := opTag(ud >> (slotBits + genBits))
	switch {
	case tag == tagRecvBuf && flags&ring.CQEFBuffer != 0 && d.featureSet.RecvBundle:
		d.deliverBundle(c, rings.stream, sink)
		return
	case tag.providedRecv() && flags&ring.CQEFBuffer != 0 && rings.forTag(tag) == nil:
		// No such ring: nothing the loop handed the kernel.
		sink.complete(ud, -int32(unix.EIO), flags, nil)
		d.bufferHeld(uint16(flags>>ring.CQEBufferShift), res)
		return
	case tag.providedRecv() && flags&ring.CQEFBuffer != 0:
		br := rings.forTag(tag)
		// The buffer id is the CQE's, also on failure (a kernel may post
		// res < 0 with the buffer the receive selected): that buffer,
		// and no other, goes back to the ring.
		data, bid, ok := br.Take(c)
		if !ok && res > 0 {
			// Bytes in a buffer the loop already held: they cannot
			// be trusted, and must not vanish as a silent gap.
			res = -int32(unix.EIO)
		}
		sink.complete(ud, res, flags, data)
		if faultsEnabled && ok && res > 0 && d.faults.holdBuf(br, d.bufRing, bid) {
			return
		}
		if !ok || !br.Recycle(bid) {
			d.bufferHeld(bid, res)
		}
		return
	case tag == tagConnect && len(d.connWait) != 0:
		if fd, ok := d.connWait[ud]; ok {
			delete(d.connWait, ud)
			res = connectResult(fd, res)
			flags = 0
		}
	}
	sink.complete(ud, res, flags, nil)
}

// deliverBundle passes a provided-buffer completion that may carry several
// buffers (IORING_RECVSEND_BUNDLE): the bytes as one Data when the buffers
// lie together, else one completion per buffer, in order, all but the last
// with CQEFMore added. Every buffer is recycled after the calls.
func (d *uringDriver) deliverBundle(c *ring.CQE, br *ring.BufRing, sink completionSink) {
	ud, res, flags := c.UserData, c.Res, c.Flags
	bids, ok := br.TakeBundle(c, d.bundleBufIDs[:0])
	d.bundleBufIDs = bids
	switch {
	case !ok:
		if res > 0 {
			res = -int32(unix.EIO) // bytes in buffers the loop already held: not to be trusted
		}
		sink.complete(ud, res, flags, nil)
		d.bufferHeld(uint16(flags>>ring.CQEBufferShift), res)
		return
	case res <= 0:
		sink.complete(ud, res, flags, nil)
	case len(bids) == 1:
		sink.complete(ud, res, flags, br.Buf(bids[0])[:res])
	default:
		d.bundles.Add(1)
		if v := br.Bundle(bids, int(res)); v != nil {
			sink.complete(ud, res, flags, v)
			break
		}
		left, size := int(res), br.BufSize()
		for i, bid := range bids {
			k := min(left, size)
			f := flags
			if i < len(bids)-1 {
				f |= ring.CQEFMore
			}
			sink.complete(ud, int32(k), f, br.Buf(bid)[:k])
			left -= k
		}
	}
	for _, bid := range bids {
		if faultsEnabled && res > 0 && d.faults.holdBuf(br, d.bufRing, bid) {
			continue
		}
		if !br.Recycle(bid) {
			d.bufMisuse.Add(1)
		}
	}
}

// bufferHeld counts and reports a completion naming provided buffer bid,
// which the loop already held (or could not give back); uringdebug panics.
func (d *uringDriver) bufferHeld(bid uint16, res int32) {
	d.bufMisuse.Add(1)
	d.cfg.logger.Error("io_uring completion names a buffer the loop already holds",
		"loop", d.cfg.name, "bid", bid, "res", res)
	if debugChecks {
		panic("loop: provided buffer " + strconv.Itoa(int(bid)) + " handed out twice")
	}
}

// connectResult turns the POLLOUT completion of a connect continued by a
// rebuild into the connect's result: the socket's pending error.
func connectResult(fd int32, res int32) int32 {
	if res < 0 {
		return res // canceled, or the poll itself failed
	}
	return socketError(int(fd))
}

// internal handles the completion of one of the driver's own ops.
func (d *uringDriver) internal(c *ring.CQE, res *pollResult) {
	switch internalID(uint32(c.UserData)) {
	case internalWake:
		d.wakeArmed = false
		res.woken = c.Res >= 0 // else canceled (rebuild, close)
		// Re-armed before poll returns (see poll), so a wake written
		// from now on completes the next READ at once: the counter is
		// sticky.
	case internalCancel:
		d.cancelCQEs++
	}
}

// wake implements driver: the eventfd's counter completes the armed READ,
// or the next one (it is sticky). Safe for concurrent use.
func (d *uringDriver) wake() error {
	d.wakeMu.RLock()
	defer d.wakeMu.RUnlock()
	if d.eventFd < 0 {
		return errDriverClosed
	}
	// Before the signal: a netpoll wait that sees the signal tells wake's
	// from the kernel's by this flag.
	d.wakeReq.Store(true)
	return writeEventfd(d.eventFd)
}

// close implements driver: it closes the ring (the kernel cancels what is
// still in flight, such as the eventfd read, whose target is this struct
// and stays valid) and the eventfd. Idempotent.
func (d *uringDriver) close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	first := d.r.Close()
	d.wakeArmed = false
	if err := d.waiter.close(); err != nil && first == nil {
		first = err
	}
	d.waiter = nil
	d.wakeMu.Lock()
	if d.eventFd >= 0 {
		if err := unix.Close(d.eventFd); err != nil && first == nil {
			first = err
		}
		d.eventFd = -1
	}
	d.wakeMu.Unlock()
	return first
}

// counters implements driver. Safe for concurrent use.
func (d *uringDriver) counters(s *Stats) {
	s.LostCompletions = d.lostCQEs.Load()
	s.CQOverflows = d.cqOverflows.Load()
	s.BufferMisuse = d.bufMisuse.Load()
	s.RecvBundles = d.bundles.Load()
}

// setHandOff implements driver.
func (d *uringDriver) setHandOff(on bool) { d.r.SetHandOff(on) }

// quarantineBufs implements driver: the current provided buffers, stream
// and datagram, stay mapped after close.
func (d *uringDriver) quarantineBufs() uint64 {
	n := uint64(d.bufRing.Quarantine())
	if d.dgramRing != nil {
		n += uint64(d.dgramRing.Quarantine())
	}
	return n
}

// features implements driver. Safe for concurrent use.
func (d *uringDriver) features() Features { return *d.publishedFeatures.Load() }

// bundleBufs is how many buffers a bundle takes at most: 16, 64 KiB of
// the default 4 KiB buffers.
const bundleBufs = 16

// setRecvCap decides whether bundles run, and their length. Without a cap a
// bundle may take up to 256 buffers, so bundles run only where the kernel
// takes a length on multishot receives (6.17), which start probes once;
// the length is bundleBufs buffers, on single shots as well (where it bounds
// only the first of the buffers a single shot appends while the socket
// holds more, as long as free buffers last: a rotated receive is therefore
// a multishot one limited to one bundle in all, where the kernel takes
// that limit; a
// shared thread's receives are single shots on more than one P
// (sharedMultishot), which prep keeps to one buffer each for the same
// reason). Features.RecvCap is that length, else 0.
func (d *uringDriver) setRecvCap() {
	d.featureSet.RecvCap, d.bundleLen = 0, 0
	if !d.featureSet.RecvBundle {
		return
	}
	// The probe also stands for bundles' length: kernels before 6.17
	// ignore it on a bundle, single shot or not. It also keeps bundles off
	// kernels that may post a single shot's completion after a later
	// multishot one (fixed in 6.15), which TakeBundle's ring positions
	// cannot survive (TestBundleRotationOrder; docs/op-lifecycle.md,
	// "Memory and the kernel's final word").
	if !d.probeMultishotLen(false) {
		d.cfg.logger.Debug("io_uring receives take no length on bundles or multishot: no bundles", "loop", d.cfg.name)
		d.featureSet.RecvBundle = false
		return
	}
	d.bundleLen = bundleBufs * d.cfg.bufSize
	d.featureSet.RecvCap = d.bundleLen
	// A multishot receive ends after multishotTotal bytes (half that for one
	// that asks for a limit) and is re-armed: a socket whose queue is full
	// would otherwise fill buffer after buffer in one turn (the kernel
	// requeues a capped receive and runs it again, and posts more as the
	// loop recycles buffers), and a connection that pauses on the first of
	// them must keep all the others.
	if d.probeMultishotLen(true) {
		d.multishotTotal = recvTotalBufs * d.cfg.bufSize
	}
}

// recvTotalBufs is how many buffers' worth a multishot receive takes
// before it ends: 16 bundles, 1 MiB of the default 4 KiB buffers, or half
// that for a receive that asks for a limit (RecvLimiter). A connection
// that pauses keeps what its receive took in the same turn, at most that
// much (docs/decisions.md, "Multishot receive total").
const recvTotalBufs = 16 * bundleBufs

// probeMultishotLen reports whether the kernel takes a length on a
// multishot receive with provided buffers. Before 6.17 the prep fails at
// once with -EINVAL; from 6.17 the receive arms (its socket pair is empty)
// and the probe cancels it. It runs in start, before anything else is in
// flight, and reaps its own completions.
//
// With total, the probe also sets a limit on the bytes the whole receive
// takes (IORING_RECV_MSHOT_LIM), which a kernel without it refuses.
func (d *uringDriver) probeMultishotLen(total bool) bool {
	if hiddenFeatures.multishotLen || !d.cfg.kernel.HasFeature(ring.FeatureMultishotRecvLen) {
		return false
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	leak := false
	defer func() {
		if !leak {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
	}()
	ud := internalUserData(internalProbe)
	sqe, err := d.getSQE()
	if err != nil {
		return false
	}
	sqe.PrepRecvMultishot(fds[0], 0)
	sqe.SetBufferGroup(d.bufRing.Group())
	sqe.Len = 64
	if total {
		sqe.SetRecvTotal(128)
	}
	sqe.UserData = ud
	if _, err := d.r.Submit(); err != nil {
		// The SQE may still be queued: keep the pair open, so that the
		// receive cannot land on a socket that reuses its fd.
		leak = true
		return false
	}
	if _, ok := d.r.PeekCQE(); ok { // failed at prep: posted before submit returned
		d.r.CQESeen()
		return false
	}
	sqe, err = d.getSQE()
	if err != nil {
		return false
	}
	sqe.PrepCancel64(ud, 0)
	sqe.UserData = internalUserData(internalCancel)
	if _, err := d.r.Submit(); err != nil {
		leak = true
		return false
	}
	// Two completions: the cancel's and the receive's last (-ECANCELED).
	// Bounded: should one never come, its late arrival is an internal
	// completion the loop ignores.
	recvDone, cancelDone, took := false, false, false
	deadline := time.Now().Add(time.Second)
	for !(recvDone && cancelDone) && time.Now().Before(deadline) {
		c, err := d.r.WaitCQETimeout(100 * time.Millisecond)
		if err != nil {
			continue
		}
		switch c.UserData {
		case ud:
			if c.Flags&ring.CQEFMore == 0 {
				// Armed, then canceled: the kernel took the length.
				recvDone, took = true, c.Res == -int32(unix.ECANCELED)
			}
		case internalUserData(internalCancel):
			cancelDone = true
		}
		d.r.CQESeen()
	}
	if !recvDone {
		leak = true // the receive may still be armed on the pair
	}
	return took
}

// sharedMultishot reports whether a shared-thread loop arms multishot
// receives: only while the process runs on one P. A multishot receive's
// completions run as task work on the thread that armed it, for as long as
// it lasts. With one P, the thread that runs the loop goroutine is nearly
// always the one that next waits in the netpoller, so the task work runs
// where the loop's wakeup is delivered anyway. With more, the loop
// goroutine moves between threads, and every completion would also wake
// the thread that armed the receive, idle by then; a single shot is armed
// again from the thread the loop runs on. Read once per poll (the runtime
// may change GOMAXPROCS while the program runs); ops armed before a change
// keep their kind until they end.
func sharedMultishot() bool { return runtime.GOMAXPROCS(0) == 1 }
