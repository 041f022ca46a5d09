//go:build linux

package loop

import (
	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// Per-fd waiting and the system calls the epoll driver performs for ops.
// See epollDriver for the model.

// epStep is what trying one op at the head of a side achieved.
type epStep uint8

const (
	epDone   epStep = iota // the op finished and left the list: try the next one
	epWait                 // EAGAIN: the side waits for the next edge
	epYield                // still ready after the budget (or out of receive buffers after some): retry next poll
	epStarve               // no receive buffer at all: wait for one, in turn (starved list)
)

// internalFd reports whether fd is one of the driver's own: ops on it are
// refused with EBADF rather than let a stray fd number break the loop.
func (d *epollDriver) internalFd(fd int) bool {
	return fd == d.epollFd || fd == d.eventFd || fd == d.timer.fd
}

// register adds fd to the epoll instance, edge-triggered for both
// directions, and makes it non-blocking (io_uring needs neither, so the
// fds the loop is given may be blocking).
//
// An fd closed with close(2) behind the loop's back leaves its entry
// marked registered while epoll dropped the file, and a new file under
// the same number would never be added. So an op for a registered fd on
// which no op waits (the only time such a close can have happened within
// the op contract) asks again with EPOLL_CTL_ADD: EEXIST means the same
// file; success means a new one, now registered and made non-blocking. An
// fd with waiters, the hot path, costs nothing extra.
func (d *epollDriver) register(fd int) error {
	if fd < 0 || d.internalFd(fd) {
		return unix.EBADF
	}
	d.fds.grow(fd)
	f := d.fds.at(fd)
	if f.registered {
		if !fdIdle(f) {
			return nil
		}
		d.ctlEvent = unix.EpollEvent{Events: epollInterest, Fd: int32(fd)}
		switch err := unix.EpollCtl(d.epollFd, unix.EPOLL_CTL_ADD, fd, &d.ctlEvent); err {
		case unix.EEXIST:
			return nil // the same file, still registered
		case nil:
			// A new file under a reused number: registered now.
			f.retry, f.starved, f.out = false, false, false
			return setNonblock(fd)
		default:
			f.registered = false
			f.retry, f.starved = false, false
			return err
		}
	}
	if err := setNonblock(fd); err != nil {
		return err
	}
	d.ctlEvent = unix.EpollEvent{Events: epollInterest, Fd: int32(fd)}
	if err := unix.EpollCtl(d.epollFd, unix.EPOLL_CTL_ADD, fd, &d.ctlEvent); err != nil && err != unix.EEXIST {
		return err
	}
	f.registered, f.out = true, false
	return nil
}

// interestOf is f's registration: with EPOLLOUT while f.out.
func interestOf(f *epollFd) uint32 {
	if f.out {
		return epollInterestOut
	}
	return epollInterest
}

// setOut adds EPOLLOUT to fd's registration (on) or drops it. Adding it
// reports room that is there already as an event, so an op that found
// none just before misses nothing. If the kernel refuses (the fd was
// closed behind the loop's back), the write side's ops end with the
// error, since no report of room would ever reach them.
func (d *epollDriver) setOut(fd int, f *epollFd, on bool) {
	f.out = on
	d.ctlEvent = unix.EpollEvent{Events: interestOf(f), Fd: int32(fd)}
	err := unix.EpollCtl(d.epollFd, unix.EPOLL_CTL_MOD, fd, &d.ctlEvent)
	if err == nil {
		return
	}
	f.out = false
	if on {
		for f.lists[epWrite-1].head != noSlot {
			d.finish(fd, d.cfg.ops.at(f.lists[epWrite-1].head), errnoResult(err))
		}
	}
}

// fdIdle reports whether no op waits on f.
func fdIdle(f *epollFd) bool {
	for _, l := range f.lists {
		if l.head != noSlot {
			return false
		}
	}
	return true
}

// setNonblock sets O_NONBLOCK on fd unless it is set already.
func setNonblock(fd int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if fl&unix.O_NONBLOCK == 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
			return err
		}
	}
	return nil
}

// finish takes the waiting o off fd's list and queues its final completion.
func (d *epollDriver) finish(fd int, o *op, res int32) {
	d.waitLists.unlist(d.fds.at(fd), o.slot)
	d.final(o, res)
}

// failFd ends every op waiting on fd with res.
func (d *epollDriver) failFd(fd int, res int32) {
	f := d.fds.at(fd)
	for i := range f.lists {
		for f.lists[i].head != noSlot {
			o := d.cfg.ops.at(f.lists[i].head)
			d.finish(fd, o, res)
		}
	}
}

// addRetry puts fd on the retry list served by the next poll.
func (d *epollDriver) addRetry(fd int) {
	f := d.fds.at(fd)
	if !f.retry {
		f.retry = true
		d.retry = append(d.retry, int32(fd))
	}
}

// addStarved puts fd on the starved list: its read side found no receive
// buffer free. The list is first in line for the buffers the next poll
// frees, oldest first.
func (d *epollDriver) addStarved(fd int) {
	f := d.fds.at(fd)
	if !f.starved {
		f.starved = true
		d.starved = append(d.starved, int32(fd))
	}
}

// runRetries serves first the fds starved of receive buffers, in the order
// they ran short, then those that yielded during the previous poll. Fds
// that starve again keep their place (those not reached because the
// buffers ran out are not even tried); fds that yield again go on a fresh
// list for the next poll, behind every starved one. So when many
// connections have more bytes waiting than the pool holds, the pool goes
// round them in turn, epollBudget buffers each at most, instead of to the
// same few every poll (docs/loop.md, "Sharing receive buffers").
func (d *epollDriver) runRetries() {
	if len(d.starved) > 0 {
		list := d.starved
		d.starved = d.starvedSpare[:0]
		for i, fd := range list {
			f := d.fds.at(int(fd))
			if !f.starved {
				continue // closed since, or served by an edge
			}
			if d.pool.exhausted() {
				for _, fd := range list[i:] {
					if d.fds.at(int(fd)).starved {
						d.starved = append(d.starved, fd)
					}
				}
				break
			}
			f.starved = false
			d.run(int(fd), epRead)
		}
		clear(list)
		d.starvedSpare = list[:0]
	}
	if len(d.retry) == 0 {
		return
	}
	list := d.retry
	d.retry = d.retrySpare[:0]
	for _, fd := range list {
		f := d.fds.at(int(fd))
		if !f.retry {
			continue // closed since
		}
		f.retry = false
		d.run(int(fd), epWrite)
		d.run(int(fd), epRead)
	}
	d.retrySpare = list[:0]
}

// onEvent serves fd after epoll reported events on it: the write side
// first (it may free memory, as in Netty), then the read side.
func (d *epollDriver) onEvent(fd int, events uint32) {
	if fd < 0 || fd >= d.fds.len() || !d.fds.at(fd).registered {
		return
	}
	if events&epollWriteEvents != 0 {
		f := d.fds.at(fd)
		if f.out && events&unix.EPOLLOUT != 0 && f.lists[epWrite-1].head == noSlot {
			d.setOut(fd, f, false) // room nobody waits for
		}
		d.run(fd, epWrite)
	}
	if events&epollReadEvents != 0 {
		d.edgeEvents = events
		d.run(fd, epRead)
		d.edgeEvents = 0
	}
}

// wait registers fd and queues o on side where; if o is first in line, the
// side is tried at once, since an edge that already fired will not fire
// again.
func (d *epollDriver) wait(o *op, where uint8) {
	fd := int(o.fd)
	if err := d.register(fd); err != nil {
		d.final(o, errnoResult(err))
		return
	}
	f := d.fds.at(fd)
	first := f.lists[where-1].head == noSlot
	d.waitLists.enlist(fd, where, o.slot)
	switch {
	case !first:
	case where == epRead && len(d.starved) > 0 && o.tag.providedRecv():
		// Others wait for receive buffers: this one waits behind them.
		d.addStarved(fd)
	default:
		d.run(fd, where)
	}
}

// run tries side where of fd from its head until it would block, or yields
// (the read side's ops count their own budgets; the write side gets
// epollBudget ops).
func (d *epollDriver) run(fd int, where uint8) {
	for i := 0; ; i++ {
		s := d.fds.at(fd).lists[where-1].head
		if s == noSlot {
			return
		}
		o := d.cfg.ops.at(s)
		var st epStep
		switch {
		case where == epWrite && i == epollBudget:
			st = epYield
		case o.tag == tagAccept:
			st = d.tryAccept(fd, o)
		case o.tag == tagRecv:
			st = d.tryRecv(fd, o)
		case o.tag == tagRecvmsgBuf:
			st = d.tryRecvmsgBuf(fd, o)
		case o.tag == tagRecvBuf:
			st = d.tryRecvBuf(fd, o)
		case o.tag == tagConnect:
			st = d.tryConnect(fd, o)
		case o.tag == tagSendmsg:
			st = d.trySendmsg(fd, o)
		case o.tag == tagPollOut:
			st = d.tryPollOut(fd, o)
		default: // tagSend
			st = d.trySend(fd, o)
		}
		switch st {
		case epWait:
			if f := d.fds.at(fd); where == epWrite && !f.out {
				d.setOut(fd, f, true)
			}
			return
		case epYield:
			d.addRetry(fd)
			return
		case epStarve:
			d.addStarved(fd)
			return
		}
	}
}

// epollAccept4 accepts one connection as non-blocking and close-on-exec. The
// peer address is not asked for (multishot accept on io_uring cannot
// return one either); getpeername(2) gives it when needed. The errno is
// returned unboxed, so a steady accept loop does not allocate.
func epollAccept4(fd int) (int, unix.Errno) {
	r, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), 0, 0,
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), 0
}

// tryAccept accepts while connections are pending. Multishot: each one is
// a completion with F_MORE, and any error but EAGAIN ends the op (EMFILE
// and ENFILE included, so the loop above can back off and re-arm).
func (d *epollDriver) tryAccept(fd int, o *op) epStep {
	for i := 0; i < epollBudget; i++ {
		nfd, e := epollAccept4(fd)
		switch e {
		case 0:
			if !o.multishot {
				d.finish(fd, o, int32(nfd))
				return epDone
			}
			d.more(o, int32(nfd), 0, -1)
		case unix.EINTR:
		case unix.EAGAIN:
			return epWait
		default:
			d.finish(fd, o, -int32(e))
			return epDone
		}
	}
	return epYield
}

// epollRecv reads from fd into p with flags, retrying on EINTR.
func epollRecv(fd int, p []byte, flags uint32) (int, error) {
	for {
		var n int
		var err error
		if flags == 0 {
			n, err = unix.Read(fd, p)
		} else {
			n, _, err = unix.Recvfrom(fd, p, int(flags)|unix.MSG_DONTWAIT)
		}
		if err != unix.EINTR {
			return n, err
		}
	}
}

// tryRecv reads once into the op's buffer: bytes, 0 at end of stream, or
// -errno.
func (d *epollDriver) tryRecv(fd int, o *op) epStep {
	n, err := epollRecv(fd, o.buf, o.arg)
	if err == unix.EAGAIN {
		return epWait
	}
	if err != nil {
		d.finish(fd, o, errnoResult(err))
	} else {
		d.finish(fd, o, int32(n))
	}
	return epDone
}

// tryRecvBuf is the multishot receive into provided buffers: each read
// fills a pool buffer and becomes a completion with F_MORE, F_BUFFER and
// the buffer id, as on io_uring. End of stream (0) and errors end the op.
//
// Serving an edge, a read shorter than the buffer drained the socket, and a
// socket signals every later arrival (data, FIN, error) as a new edge, so
// the side waits without spending a system call on EAGAIN. Not when the
// edge itself carried RDHUP, HUP or ERR: that news may have come before the
// data just read, with no edge left to announce it, so the side reads on
// until EAGAIN, end of stream or the error. Outside an edge (submit, retry,
// rebuild) it always reads until EAGAIN.
//
// With every buffer still held by queued completions, the op yields until
// poll has delivered (and so freed) some: behind the other starved fds if
// it got none, behind those and the fds that yielded if it got some.
func (d *epollDriver) tryRecvBuf(fd int, o *op) epStep {
	budget := epollBudget
	if limit := o.limit(); limit > 0 {
		// So many buffers per readiness event (RecvLimiter).
		budget = min(budget, buffersFor(limit, d.pool.size))
	}
	for i := 0; i < budget; i++ {
		bi, b := d.pool.get()
		if bi < 0 {
			if i == 0 {
				return epStarve
			}
			return epYield
		}
		n, err := epollRecv(fd, b, o.arg)
		if err != nil || n == 0 {
			d.pool.put(bi)
			if err == unix.EAGAIN {
				return epWait
			}
			d.finish(fd, o, errnoResult(err))
			return epDone
		}
		d.more(o, int32(n), ring.CQEFBuffer|uint32(uint16(bi))<<16, bi)
		if n < len(b) && d.edgeEvents != 0 && d.edgeEvents&epollEndEvents == 0 {
			return epWait
		}
	}
	return epYield
}

// tryRecvmsgBuf is the multishot receive of datagrams into provided
// buffers: each recvmmsg(2) reads up to dgramBatch of them into buffers
// of the datagram pool, laid out as io_uring's multishot RECVMSG lays them out, and
// each becomes a completion with F_MORE and F_BUFFER. An error ends the op
// (the Completer re-arms); an empty datagram does not. Serving an edge
// without ERR or HUP, a batch that came back short drained the socket;
// otherwise it reads until EAGAIN. With every buffer held by queued
// completions the op yields until poll has delivered some (starving in
// turn with the others if it got none).
func (d *epollDriver) tryRecvmsgBuf(fd int, o *op) epStep {
	for i := 0; i < epollBudget; i += dgramBatch {
		n, err := d.dgrams.read(fd, &d.dpool, o.arg, dgramBatch, int(recvControlRoom(o)))
		for j := range n {
			bi := d.dgrams.bufs[j]
			d.more(o, int32(d.dgrams.used[j]), ring.CQEFBuffer|uint32(uint16(bi))<<16, bi|dgramBuf)
		}
		switch {
		case n > 0:
			if n < dgramBatch && d.edgeEvents != 0 && d.edgeEvents&epollEndEvents == 0 {
				return epWait
			}
		case err == unix.EAGAIN:
			return epWait
		case err == errNoBufs && i == 0:
			return epStarve
		case err == errNoBufs:
			return epYield
		default:
			d.finish(fd, o, errnoResult(err))
			return epDone
		}
	}
	return epYield
}

// epollSendFlags are the flags every send carries: no SIGPIPE, never block
// (the fd is non-blocking already; this covers fds shared with code that
// cleared O_NONBLOCK).
const epollSendFlags = unix.MSG_NOSIGNAL | unix.MSG_DONTWAIT

// trySend makes one send(2): its byte count, short or not, is the op's
// result, as on io_uring.
func (d *epollDriver) trySend(fd int, o *op) epStep {
	for {
		buf := o.buf
		if faultsEnabled {
			buf = buf[:faultSendLen(len(buf))]
		}
		n, err := unix.SendmsgN(fd, buf, nil, nil, int(o.arg)|epollSendFlags)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if o.arg&unix.MSG_DONTWAIT != 0 {
				d.finish(fd, o, -int32(unix.EAGAIN)) // the caller asked not to wait
				return epDone
			}
			return epWait
		case nil:
			d.finish(fd, o, int32(n))
		default:
			d.finish(fd, o, errnoResult(err))
		}
		return epDone
	}
}

// trySendmsg makes one gathered send of the op's buffers: sendmsg(2) on
// the op's own msghdr and iovec array, built as for io_uring (buildMsg), so
// it allocates nothing once the op record's iovec array has grown.
func (d *epollDriver) trySendmsg(fd int, o *op) epStep {
	buildMsg(o)
	if faultsEnabled && len(o.extras().iov) > 1 {
		o.extras().msg.SetIovlen(faultSendLen(len(o.extras().iov)))
	}
	n, err := sock.Sendmsg(fd, &o.extras().msg, int(o.arg)|epollSendFlags) // EINTR retried inside
	switch err {
	case unix.EAGAIN:
		if o.arg&unix.MSG_DONTWAIT != 0 {
			d.finish(fd, o, -int32(unix.EAGAIN)) // the caller asked not to wait
			return epDone
		}
		return epWait
	case nil:
		d.finish(fd, o, int32(n))
	default:
		d.finish(fd, o, errnoResult(err))
	}
	return epDone
}

// tryPollOut completes a PollWritable once poll(2) finds fd writable (or
// failed, or hung up); until then the op waits on the write side, whose
// edges try it again.
func (d *epollDriver) tryPollOut(fd int, o *op) epStep {
	pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		n, err := unix.Poll(pfd[:], 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			d.finish(fd, o, errnoResult(err))
		case n == 0:
			return epWait
		default:
			d.finish(fd, o, int32(pfd[0].Revents))
		}
		return epDone
	}
}

// connect starts a non-blocking connect(2). EINPROGRESS parks the op on the
// write side; tryConnect finishes it. The target is kept in the kernel's
// layout for io_uring (opExt.connectTo, opExt.connectToLen); connect(2) through x/sys/unix
// wants a unix.Sockaddr, so it is decoded (sock.ParseSockaddr: one small
// allocation per connect, next to the socket and epoll system calls).
func (d *epollDriver) connect(o *op) {
	fd := int(o.fd)
	sa, err := sock.ParseSockaddr(&o.extras().connectTo, o.extras().connectToLen)
	if err != nil {
		d.final(o, errnoResult(err))
		return
	}
	if err := d.register(fd); err != nil {
		d.final(o, errnoResult(err))
		return
	}
	switch err := unix.Connect(fd, sa); err {
	case unix.EINPROGRESS, unix.EINTR:
		// EINTR: the connection still goes on asynchronously (connect(2)).
		first := d.fds.at(fd).lists[epWrite-1].head == noSlot
		d.waitLists.enlist(fd, epWrite, o.slot)
		if first {
			d.run(fd, epWrite)
		}
	default:
		d.final(o, errnoResult(err))
	}
}

// tryConnect finishes a connect in progress once the socket has settled:
// writable (connected) or in error. Edges are not trusted for this (an fd
// registered before connect(2) reports a stale "writable, hung up"), so
// the socket is asked with poll(2); then SO_ERROR gives the result.
func (d *epollDriver) tryConnect(fd int, o *op) epStep {
	if d.pollNow(fd, unix.POLLOUT) == 0 {
		return epWait
	}
	d.finish(fd, o, socketError(fd))
	return epDone
}

// pollNow returns fd's current readiness for mask (POLLERR and POLLHUP
// always included), from poll(2) with a zero timeout.
func (d *epollDriver) pollNow(fd int, mask uint32) uint32 {
	d.pollFds[0] = unix.PollFd{Fd: int32(fd), Events: int16(mask)}
	for {
		n, err := unix.Poll(d.pollFds[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0
		}
		return uint32(uint16(d.pollFds[0].Revents))
	}
}

// closeFd is the close op: the fd's waiters end with -ECANCELED, the fd
// leaves the epoll instance, then close(2) gives the result.
func (d *epollDriver) closeFd(o *op) {
	fd := int(o.fd)
	if d.internalFd(fd) {
		d.final(o, -int32(unix.EBADF))
		return
	}
	if fd >= 0 && fd < d.fds.len() {
		f := d.fds.at(fd)
		d.failFd(fd, -int32(unix.ECANCELED))
		if f.registered {
			unix.EpollCtl(d.epollFd, unix.EPOLL_CTL_DEL, fd, &d.ctlEvent)
			f.registered, f.out = false, false
		}
		f.retry, f.starved = false, false
	}
	d.final(o, errnoResult(unix.Close(fd)))
}
