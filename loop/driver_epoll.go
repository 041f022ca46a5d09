//go:build linux

package loop

import (
	"errors"
	"math"
	"os"
	"sync"
	"time"

	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// epollDriver runs the op contract of docs/op-lifecycle.md on epoll, the
// way Netty's NIO loop runs on a selector: each fd that gets an op is
// registered once, edge-triggered (for room to write only while a
// write-side op waits for it: epollInterestOut), and the driver makes the
// op's system call itself when the fd is ready, with io_uring's
// user_data, results and flags. Per fd, waiting ops sit in two FIFO lists (read: accept and the
// receives; write: sends and a connect in progress), linked through a side
// table indexed by op slot, so waiting allocates nothing. An edge fires
// once per change, so a side is tried when its first op is submitted, on
// each event and on each retry, from the head, until EAGAIN; a side still
// ready after epollBudget system calls yields to the retry list, which the
// next poll serves without blocking, so one busy fd cannot starve others.
// Completions are delivered only by poll, never from inside submit or
// cancel, so a Completer is never re-entered by the op it starts. Every
// method but wake and injectStall runs on the loop goroutine.
type epollDriver struct {
	cfg        driverConfig
	featureSet Features

	epollFd int
	handOff bool // the next blocking epoll_wait gives the P back first
	eventFd int  // the wake eventfd, as the loop goroutine sees it
	closed  bool

	waiter *netWaiter // epollFd on the Go netpoller (a shared-thread loop), else nil
	timer  waitTimer  // the timerfd for waits finer than epoll_wait's milliseconds

	// wakeFd is eventFd for wake, which runs on any goroutine; close sets it
	// to -1 under the write lock so a late wake never writes into a
	// recycled fd number.
	wakeMu sync.RWMutex
	wakeFd int

	stallSeam

	events       []unix.EpollEvent // epoll_wait results
	harvested    int               // events harvest left in events
	waitLists                      // per-fd lists of waiting ops, per-op entries (driver_epoll_table.go)
	ready        epollQueue        // completions waiting for poll
	pool         recvPool          // receive buffers for recv-provided
	dpool        recvPool          // receive buffers for datagrams (WithDatagramBuffers)
	dgrams       dgramReader       // recvmmsg(2) batches of datagram receives
	retry        []int32           // fds to serve again next poll
	retrySpare   []int32           // spare backing array for retry
	starved      []int32           // fds whose read side found no receive buffer, oldest first
	starvedSpare []int32           // spare backing array for starved
	pollFds      [1]unix.PollFd    // poll(2) argument, reused
	counterBuf   [8]byte           // eventfd read target
	ctlEvent     unix.EpollEvent   // epoll_ctl argument, reused
	edgeEvents   uint32            // events of the edge being served, 0 outside onEvent
}

// epollOp is the driver's state for one op, indexed by its slot.
type epollOp struct {
	gen        uint32 // the op's gen when submitted: guards a reused slot
	next, prev uint32 // links in the fd's list, noSlot at the ends
	where      uint8  // epIdle, epRead or epWrite
}

// Where an op waits. epIdle: not waiting, either never submitted or its
// final completion is already queued (a cancel then does nothing).
const (
	epIdle uint8 = iota
	epRead
	epWrite
)

// epollWaitList is a FIFO of op slots linked through epollOp.next/prev.
type epollWaitList struct{ head, tail uint32 }

// epollFd is the driver's state for one fd.
type epollFd struct {
	lists      [2]epollWaitList // indexed by where-1: read, write
	registered bool             // added to the epoll instance
	retry      bool             // on the retry list
	starved    bool             // on the starved list
	out        bool             // the registration includes EPOLLOUT (epollInterestOut)
}

const (
	// epollWakeTag and epollTimerTag are the epoll data of the eventfd and
	// the timerfd. No fd is negative, so they cannot collide with a
	// registered fd.
	epollWakeTag  int32 = -1
	epollTimerTag int32 = -2

	// epollBudget bounds the system calls one side of one fd gets per
	// turn (accepts, provided-buffer reads, sends) before it yields to
	// the other fds; hard-coded, like Netty's maxMessagesPerRead of 16.
	epollBudget = 16

	// epollRewaits bounds how often one poll waits again after events that
	// completed nothing before it returns early and empty-handed.
	epollRewaits = 8

	// epollMaxEvents is the size of the epoll_wait result array.
	epollMaxEvents = 256

	// epollInterest is an fd's registration: input and peer shutdown,
	// edge-triggered. Room to write is asked for (epollInterestOut) only
	// once a write-side op found none, and dropped at the first report of
	// room that finds no op waiting: a socket reports room after every
	// send the peer acknowledges or the kernel frees, and with EPOLLOUT
	// always on, each of those reports would wake the loop for nothing.
	epollInterest    = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET
	epollInterestOut = epollInterest | unix.EPOLLOUT

	epollReadEvents  = unix.EPOLLIN | unix.EPOLLPRI | unix.EPOLLRDHUP | unix.EPOLLERR | unix.EPOLLHUP
	epollWriteEvents = unix.EPOLLOUT | unix.EPOLLERR | unix.EPOLLHUP
	epollEndEvents   = unix.EPOLLRDHUP | unix.EPOLLERR | unix.EPOLLHUP
)

// errEpollClosed is returned by an epoll driver used after close.
var errEpollClosed = errors.New("loop: epoll driver closed")

// newEpollDriver creates the epoll instance, the wake eventfd and the wait
// timerfd, and registers both (level-triggered EPOLLIN, data epollWakeTag
// and epollTimerTag).
//
// epoll_wait counts its timeout in milliseconds, io_uring in nanoseconds.
// So that a timer is neither early nor up to a millisecond late, a wait
// with a sub-millisecond part arms the timerfd for its exact length
// (timerfd_create(2), CLOCK_MONOTONIC) and epoll_wait's own timeout,
// rounded up, is only a backstop.
func newEpollDriver(cfg driverConfig) (*epollDriver, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	d := &epollDriver{
		cfg:     cfg,
		epollFd: epfd,
		eventFd: evfd,
		timer:   waitTimer{fd: tfd},
		wakeFd:  evfd,
		events:  make([]unix.EpollEvent, epollMaxEvents),
		featureSet: Features{
			Backend:       BackendEpoll,
			BufCount:      cfg.bufCount,
			BufSize:       cfg.bufSize,
			DgramBufCount: cfg.dgramCount,
			DgramBufSize:  cfg.dgramSize,
			SharedThread:  cfg.shared,
			Kernel:        cfg.kernel.String(),
		},
		pool:  recvPool{count: int(cfg.bufCount), size: int(cfg.bufSize)},
		dpool: recvPool{count: int(cfg.dgramCount), size: int(cfg.dgramSize), lazy: true},
	}
	if err := d.addInternal(epfd); err != nil {
		unix.Close(tfd)
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, err
	}
	if cfg.shared {
		d.startNetpoll()
	}
	return d, nil
}

// addInternal registers the eventfd and the timerfd on epfd, an epoll
// instance.
func (d *epollDriver) addInternal(epfd int) error {
	d.ctlEvent = unix.EpollEvent{Events: unix.EPOLLIN, Fd: epollWakeTag}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, d.eventFd, &d.ctlEvent); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	d.ctlEvent = unix.EpollEvent{Events: unix.EPOLLIN, Fd: epollTimerTag}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, d.timer.fd, &d.ctlEvent); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

func (d *epollDriver) backend() Backend { return BackendEpoll }

// start has nothing to do: the epoll instance has no thread affinity.
func (d *epollDriver) start() error { return nil }

// startNetpoll puts the epoll instance on the Go netpoller: a loop then
// waits parked there rather than in epoll_wait. If the netpoller refuses
// it the loop keeps waiting in epoll_wait, and says so once.
func (d *epollDriver) startNetpoll() {
	w, err := newNetWaiter(d.epollFd, d.cfg.name+"-epoll", d.harvest, d.cfg.park)
	if err != nil {
		d.cfg.logger.Warn("loop: cannot wait on the Go netpoller; waiting in epoll_wait",
			"loop", d.cfg.name, "err", err)
		return
	}
	d.waiter = w
}

// harvest is the waiter's readiness check: a non-blocking epoll_wait whose
// events stay in d.events, counted in d.harvested.
func (d *epollDriver) harvest() bool {
	n, err := unix.EpollWait(d.epollFd, d.events, 0)
	if err != nil {
		n = 0 // EINTR; the netpoller reports the edge again if it matters
	}
	d.harvested = n
	return n > 0
}

// waitEvents is one epoll_wait of up to w (w < 0: no limit). On the
// netpoller it looks without blocking, parks until the epoll instance is
// readable or w passes, and looks again; an edge that brings no event (the
// instance's readiness is only a hint) parks it again.
func (d *epollDriver) waitEvents(w time.Duration) (int, error) {
	// On the netpoller too: the runtime sleeps in whole milliseconds, and
	// the timerfd, in the epoll set, ends a wait with a sub-millisecond
	// part on time.
	d.timer.set(w)
	if w == 0 {
		return ring.EpollWait(d.epollFd, d.events, 0, false)
	}
	enterWait()
	defer leaveWait()
	if d.waiter == nil {
		return ring.EpollWait(d.epollFd, d.events, epollWaitMillis(w), d.handOff)
	}
	ready, err := d.waiter.wait(w)
	if err != nil || !ready {
		return 0, err
	}
	return d.harvested, nil
}

func (d *epollDriver) features() Features { return d.featureSet }

// counters implements driver: epoll has no counters of its own.
func (d *epollDriver) counters(*Stats) {}

// quarantineBufs implements driver: epoll receives with recv(2) on the loop
// thread, so the kernel never holds a provided buffer after the call.
func (d *epollDriver) quarantineBufs() uint64 { return 0 }

// setHandOff implements driver.
func (d *epollDriver) setHandOff(on bool) { d.handOff = on }

// submit starts o. An op that can finish at once (close, shutdown, a
// recv with data waiting, …) gets its completion queued for the next poll.
func (d *epollDriver) submit(o *op) error {
	if d.closed {
		return errEpollClosed
	}
	if err := d.waitLists.track(o); err != nil {
		return err
	}
	o.state = opInFlight // as on io_uring: the backend owns it now
	if faultsEnabled {
		// Fault injection: the op completes at once with a fake result
		// instead of running.
		if res := fakeResult(o.tag); res != 0 {
			d.final(o, res)
			return nil
		}
	}
	switch o.tag {
	case tagNop:
		d.final(o, 0)
	case tagClose:
		d.closeFd(o)
	case tagShutdown:
		d.final(o, errnoResult(unix.Shutdown(int(o.fd), int(o.arg))))
	case tagAccept, tagRecv, tagRecvBuf, tagRecvmsgBuf:
		d.wait(o, epRead)
	case tagSend, tagSendmsg, tagPollOut:
		d.wait(o, epWrite)
	case tagConnect:
		d.connect(o)
	}
	return nil
}

// cancel withdraws o if it is still waiting; its final completion,
// -ECANCELED, follows on the next poll. An op whose final completion is
// already queued is left alone: its real result stands.
func (d *epollDriver) cancel(o *op) error {
	if d.closed {
		return errEpollClosed
	}
	if int(o.slot) < d.side.len() {
		if e := d.side.at(o.slot); e.gen == o.gen && e.where != epIdle {
			d.finish(int(o.fd), o, -int32(unix.ECANCELED))
		}
	}
	return nil
}

// final queues o's last completion. o must not be waiting any more.
func (d *epollDriver) final(o *op, res int32) {
	d.side.at(o.slot).where = epIdle
	d.ready.push(epollCQE{ud: o.userData(), res: res, buf: -1})
}

// more queues a completion of a multishot op that stays armed.
func (d *epollDriver) more(o *op, res int32, flags uint32, buf int32) {
	d.ready.push(epollCQE{ud: o.userData(), res: res, flags: flags | ring.CQEFMore, buf: buf})
}

// poll delivers queued completions, waits for readiness (not at all when
// something is already queued or due for a retry), performs the system
// calls of the ops whose fds became ready and delivers at most max
// completions in all.
func (d *epollDriver) poll(timeout time.Duration, max int, sink completionSink) (pollResult, error) {
	var r pollResult
	if d.takeStall() {
		return r, nil // injected stall: nothing seen
	}
	if d.closed {
		return r, errEpollClosed
	}
	if max <= 0 {
		max = math.MaxInt
	}
	r.completions = d.deliver(max, sink)
	if r.completions >= max {
		// The caller's batch is full: leave the wait, and the new work it
		// would bring, to the next poll.
		return r, nil
	}

	busy := r.completions > 0 || d.ready.n > 0 || len(d.retry) > 0 || len(d.starved) > 0
	wait := timeout
	if busy {
		wait = 0
	}
	var deadline time.Time // for a bounded wait
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	d.runRetries()
	for round := 0; ; round++ {
		n, err := d.waitEvents(wait)
		if err != nil {
			if err != unix.EINTR {
				return r, os.NewSyscallError("epoll_wait", err)
			}
			r.interrupted = true
			n = 0
		}
		fdEvents := 0 // events of registered fds, not the eventfd or the timerfd
		for i := 0; i < n; i++ {
			ev := &d.events[i]
			switch ev.Fd {
			case epollWakeTag:
				readCounter(d.eventFd, d.counterBuf[:])
				r.woken = true
			case epollTimerTag:
				d.timer.drain(d.counterBuf[:])
			default:
				fdEvents++
				d.onEvent(int(ev.Fd), ev.Events)
			}
		}
		if fdEvents == 0 || r.woken || r.interrupted || d.ready.n > 0 || len(d.retry) > 0 || len(d.starved) > 0 || wait == 0 {
			// With no fd event, no wakeup and no signal, the wait (or
			// the timerfd) ran its length.
			r.timedOut = fdEvents == 0 && !r.woken && !busy && !r.interrupted && d.ready.n == 0
			break
		}
		// Events that completed nothing (an edge on an fd with no waiter
		// on that side, such as the writable edge a new registration
		// reports) are not what the caller waits for: wait on for the rest
		// of the timeout. Only a few times, though: an instance that keeps
		// returning empty-handed is the stall the loop must be able to
		// see, so then the poll returns early with nothing.
		if round == epollRewaits {
			break
		}
		if wait > 0 {
			left := time.Until(deadline)
			if left <= 0 {
				r.timedOut = true
				break
			}
			wait = left
		}
	}
	r.completions += d.deliver(max-r.completions, sink)
	return r, nil
}

// epollWaitMillis converts a wait to epoll_wait's milliseconds, rounding up so a
// timer is never reported early; negative means no limit.
func epollWaitMillis(wait time.Duration) int {
	if wait < 0 {
		return -1
	}
	ms := (wait + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(ms)
}

// deliver hands up to max queued completions to sink, in order, and
// recycles each provided buffer once its completion returns. Completions
// queued by the Completers themselves wait for the next call, so a chain of
// callbacks cannot keep one poll going forever.
func (d *epollDriver) deliver(max int, sink completionSink) int {
	n := min(d.ready.n, max)
	for i := 0; i < n; i++ {
		c := d.ready.pop()
		if c.buf < 0 {
			sink.complete(c.ud, c.res, c.flags, nil)
			continue
		}
		p, bi := d.poolOf(c.buf)
		sink.complete(c.ud, c.res, c.flags, p.bytes(bi, int(c.res)))
		p.put(bi)
	}
	return n
}

// dgramBuf marks an epollCQE's buffer as one of the datagram pool's
// (dpool): the index is the rest.
const dgramBuf = 1 << 30

// poolOf returns the pool of a queued completion's buffer, and the
// buffer's index in it.
func (d *epollDriver) poolOf(buf int32) (*recvPool, int32) {
	if buf&dgramBuf != 0 {
		return &d.dpool, buf &^ dgramBuf
	}
	return &d.pool, buf
}

// wake makes the current or next poll return. A full counter (EAGAIN)
// means a wakeup is already pending. Safe for concurrent use.
func (d *epollDriver) wake() error {
	d.wakeMu.RLock()
	defer d.wakeMu.RUnlock()
	if d.wakeFd < 0 {
		return errEpollClosed
	}
	return writeEventfd(d.wakeFd)
}

// rebuild is Netty's selector rebuild: a new epoll instance gets the
// eventfd and every fd that has waiters, with the same interest; the old
// one is closed. Nothing of an op lives in the kernel, so every waiter
// simply stays. Readiness the old instance reported but nobody
// consumed would be lost, so every waiter is tried once more; the results
// are queued for the next poll (sink is not used). An fd that cannot be
// registered again (closed behind the loop's back) fails its waiters with
// the error. If the new instance cannot be set up, the old one stays.
// t is not needed: the driver's side array already names every op it holds.
func (d *epollDriver) rebuild(t *opTable, sink completionSink) (int, error) {
	if d.closed {
		return 0, errEpollClosed
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return 0, os.NewSyscallError("epoll_create1", err)
	}
	if err := d.addInternal(epfd); err != nil {
		unix.Close(epfd)
		return 0, err
	}
	migrated := 0
	for fd := range d.fds.len() {
		f := d.fds.at(fd)
		if !f.registered {
			continue
		}
		n := d.waitLists.count(f)
		if n == 0 {
			f.registered, f.out = false, false // added again with its next op
			continue
		}
		d.ctlEvent = unix.EpollEvent{Events: interestOf(f), Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &d.ctlEvent); err != nil && err != unix.EEXIST {
			f.registered = false
			d.failFd(fd, errnoResult(err))
			continue
		}
		migrated += n
	}
	old := d.epollFd
	d.epollFd = epfd
	if d.waiter != nil {
		d.waiter.close()
		d.waiter = nil
		d.startNetpoll()
	}
	if err := unix.Close(old); err != nil {
		d.cfg.logger.Warn("failed to close the old epoll instance", "loop", d.cfg.name, "err", err)
	}
	for fd := range d.fds.len() {
		if d.fds.at(fd).registered {
			d.run(fd, epWrite)
			d.run(fd, epRead)
		}
	}
	return migrated, nil
}

// close releases the epoll instance and the eventfd. Accepted fds still
// queued for delivery are closed: no one will ever receive them.
// Idempotent.
func (d *epollDriver) close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	d.wakeMu.Lock()
	d.wakeFd = -1
	d.wakeMu.Unlock()
	first := d.waiter.close()
	d.waiter = nil
	for _, fd := range [...]int{d.epollFd, d.eventFd, d.timer.fd} {
		if err := unix.Close(fd); err != nil && first == nil {
			first = os.NewSyscallError("close", err)
		}
	}
	d.epollFd, d.eventFd, d.timer.fd = -1, -1, -1
	for d.ready.n > 0 {
		c := d.ready.pop()
		if tag, _, _ := unpackUserData(c.ud); tag == tagAccept && c.res >= 0 {
			unix.Close(int(c.res))
		}
	}
	d.pool.release()
	d.dpool.release()
	d.waitLists = waitLists{}
	return first
}
