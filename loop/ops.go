package loop

import (
	"errors"
	"strconv"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// IO is a loop's op API: asynchronous socket operations (accept, receive,
// send, connect, close, shutdown, cancel) whose completions are delivered
// to a Completer on the loop goroutine, identically on both backends
// (docs/op-lifecycle.md). Loop.IO returns it.
//
// Every method must be called on the loop goroutine (from a task, a timer
// or a completion); built with the uringdebug tag they check it. Each op
// returns its OpID, for Cancel, or an error, in which case no completion
// will follow.
//
// A buffer passed to an op belongs to the loop until the op's final
// completion, which keeps it referenced until then: do not modify or reuse
// it before.
type IO struct {
	l   *Loop
	drv driver
	ops *opTable

	current Completion  // the completion being delivered, reused (valid during the Complete call only)
	parked  parkedQueue // receives waiting for provided buffers (starved.go)

	// delivering is set by the first completion a poll delivers, at the
	// clock instant deliveringSince: the turn's I/O time starts there.
	delivering      bool
	deliveringSince int64
}

// init sets io up for l, whose backend is drv and op table ops.
func (io *IO) init(l *Loop, drv driver, ops *opTable) {
	*io = IO{l: l, drv: drv, ops: ops}
	budget := max(1, int(l.cfg.bufCount)/starvedPerBuffers)
	if l.cfg.sharedThread {
		// A shared-thread loop's receives are single shots of one
		// buffer each: the ring feeds one per buffer.
		budget = int(l.cfg.bufCount)
	}
	io.parked = parkedQueue{io: io, budget: budget}
}

// An OpID names one in-flight op of a loop: its packed user_data (slot,
// generation and tag; never a pointer). It is unique among the loop's live
// ops, and a stale OpID (of an op that completed) is recognised as such.
type OpID uint64

// maxIovecs is the kernel's UIO_MAXIOV, the most buffers one sendmsg takes.
const maxIovecs = 1024

// newOp checks the common arguments and allocates a record.
func (io *IO) newOp(tag opTag, fd int, c Completer) (*op, error) {
	io.l.assertLoop()
	if c == nil {
		return nil, ErrNilCompleter
	}
	if State(io.l.state.Load()) >= StateShutdown {
		return nil, ErrClosed
	}
	if fd < 0 || fd > 1<<31-1 {
		return nil, invalidArgument("%s: fd %d", tag, fd)
	}
	o := io.ops.alloc(tag)
	if o == nil {
		return nil, ErrTooManyOps
	}
	o.fd = int32(fd)
	o.completer = c
	return o, nil
}

// simpleOp allocates, fills and starts an op of the fields most ops use.
func (io *IO) simpleOp(tag opTag, fd int, buf []byte, arg uint32, multishot bool, c Completer) (OpID, error) {
	o, err := io.newOp(tag, fd, c)
	if err != nil {
		return 0, err
	}
	o.buf, o.arg, o.multishot = buf, arg, multishot
	return io.startOp(o)
}

// startOp hands a filled record to the backend.
func (io *IO) startOp(o *op) (OpID, error) {
	id := OpID(o.userData())
	if err := io.drv.submit(o); err != nil {
		io.ops.release(o)
		return 0, err
	}
	io.l.stats.submitted.Add(1)
	return id, nil
}

// Accept accepts connections on the listening socket fd. With multishot it
// stays armed and completes once per connection (ring.CQEFMore set while it
// stays armed; re-arm after a completion without it). Res is the new
// fd (non-blocking, close-on-exec) or -errno. Must be called on the loop
// goroutine.
func (io *IO) Accept(fd int, multishot bool, c Completer) (OpID, error) {
	return io.simpleOp(tagAccept, fd, nil, 0, multishot, c)
}

// Recv receives into buf (single shot). Res is the byte count, 0 at end of
// stream, or -errno. flags are recv(2) flags. Must be called on the loop
// goroutine.
func (io *IO) Recv(fd int, buf []byte, flags int, c Completer) (OpID, error) {
	if len(buf) == 0 {
		return 0, invalidArgument("recv: empty buffer")
	}
	return io.simpleOp(tagRecv, fd, buf, uint32(flags), false, c)
}

// RecvProvided receives into the loop's provided buffers, multishot: each
// completion's Data holds the bytes received (valid only during Complete),
// Res their count (0 at end of stream) or -errno. ring.CQEFMore is set while
// the op stays armed. When the buffers run out the loop parks the receive
// and resubmits it once buffers are back (-ENOBUFS never reaches c where the
// loop has a buffer ring); a completion without ring.CQEFMore still ends it
// (re-arm then). While receives are parked, the loop rotates them: one resubmitted from the queue completes once, with
// bytes and without ring.CQEFMore, and one armed meanwhile is queued behind
// the parked ones before it runs.
// Must be called on the loop goroutine.
func (io *IO) RecvProvided(fd int, flags int, c Completer) (OpID, error) {
	return io.recvProvided(tagRecvBuf, fd, flags, true, c)
}

// RecvProvidedOnce is RecvProvided without the kernel's multishot receive:
// on io_uring each submission completes once, without ring.CQEFMore (a
// bundle whose buffers lie apart still arrives as one completion per
// buffer, all but the last with it), and the caller re-arms after it (as
// after any completion without F_MORE).
// Everything else is as for RecvProvided: provided buffers, bundles where
// enabled, parking while the buffers run out.
//
// Use it for AF_UNIX stream sockets: there a multishot receive can miss
// the peer's shutdown on current kernels (all the bytes arrive, the end
// of stream never does), which a single shot does not. The epoll backend
// reads until EAGAIN either way, so its completions may still carry
// ring.CQEFMore; a caller handles both.
// Must be called on the loop goroutine.
func (io *IO) RecvProvidedOnce(fd int, flags int, c Completer) (OpID, error) {
	return io.recvProvided(tagRecvBuf, fd, flags, false, c)
}

func (io *IO) recvProvided(tag opTag, fd int, flags int, multishot bool, c Completer) (OpID, error) {
	o, err := io.newOp(tag, fd, c)
	if err != nil {
		return 0, err
	}
	o.multishot = multishot
	o.arg = uint32(flags)
	if tag == tagRecvBuf && io.parked.len() > 0 && io.parked.rotating() {
		// Others wait for buffers: this one waits behind them.
		id := OpID(o.userData())
		io.parked.push(o)
		return id, nil
	}
	return io.startOp(o)
}

// Send sends buf (MSG_NOSIGNAL is always added to flags). Res is the byte
// count, possibly short, or -errno. Must be called on the loop goroutine.
func (io *IO) Send(fd int, buf []byte, flags int, c Completer) (OpID, error) {
	if len(buf) == 0 {
		return 0, invalidArgument("send: empty buffer")
	}
	return io.simpleOp(tagSend, fd, buf, uint32(flags), false, c)
}

// Sendmsg sends bufs in order as one gathered write (at most 1024 buffers).
// It copies the list itself, so the caller may reuse it at once; the
// buffers belong to the kernel until the final completion.
// Res is the byte count, possibly short, or -errno. Must be called on the
// loop goroutine.
func (io *IO) Sendmsg(fd int, bufs [][]byte, flags int, c Completer) (OpID, error) {
	if len(bufs) == 0 || len(bufs) > maxIovecs {
		return 0, invalidArgument("sendmsg: %d buffers (expected 1..%d)", len(bufs), maxIovecs)
	}
	o, err := io.newOp(tagSendmsg, fd, c)
	if err != nil {
		return 0, err
	}
	x := o.extras()
	x.bufs = append(x.bufs[:0], bufs...) // the slot's own list: the caller's may be on its stack
	o.arg = uint32(flags)
	return io.startOp(o)
}

// Connect connects the non-blocking socket fd to sa (IPv4, IPv6 or Unix).
// Res is 0 or -errno (-ECONNREFUSED …). Must be called on the loop
// goroutine.
func (io *IO) Connect(fd int, sa unix.Sockaddr, c Completer) (OpID, error) {
	if sa == nil {
		return 0, invalidArgument("connect: nil address")
	}
	if u, ok := sa.(*unix.SockaddrUnix); ok && u.Name == "" {
		return 0, invalidArgument("connect: empty unix socket name")
	}
	o, err := io.newOp(tagConnect, fd, c)
	if err != nil {
		return 0, err
	}
	n, err := sock.PutSockaddr(&o.extras().connectTo, sa)
	if err != nil {
		io.ops.release(o)
		if errors.Is(err, errors.ErrUnsupported) {
			return 0, err
		}
		return 0, invalidArgument("connect: %w", err)
	}
	o.extras().connectToLen = n
	return io.startOp(o)
}

// Close closes fd. Cancel fd's other ops and wait for their final
// completions first: an fd is closed only when no op still names it. Res is 0
// or -errno. Must be called on the loop goroutine.
func (io *IO) Close(fd int, c Completer) (OpID, error) {
	return io.simpleOp(tagClose, fd, nil, 0, false, c)
}

// Shutdown shuts down part of a full-duplex connection (how is unix.SHUT_RD,
// SHUT_WR or SHUT_RDWR). Res is 0 or -errno. Must be called on the loop
// goroutine. (It is the socket operation; the loop's own shutdown is
// ShutdownGracefully.)
func (io *IO) Shutdown(fd int, how int, c Completer) (OpID, error) {
	if how != unix.SHUT_RD && how != unix.SHUT_WR && how != unix.SHUT_RDWR {
		return 0, invalidArgument("shutdown: how %d", how)
	}
	return io.simpleOp(tagShutdown, fd, nil, uint32(how), false, c)
}

// PollWritable completes once fd is writable: Res is the poll(2) mask
// once it holds POLLOUT, POLLERR or POLLHUP, or -errno (-ECANCELED when
// canceled). One shot: arm it again to wait again. It is what a send
// refused with -EAGAIN (MSG_DONTWAIT) waits for before it is tried again.
// Writability is the socket's own: a connected Unix datagram socket is
// not writable while its peer's receive queue is full, but an unconnected
// one is whenever its send buffer has room, whatever its destinations
// hold. Must be called on the loop goroutine.
func (io *IO) PollWritable(fd int, c Completer) (OpID, error) {
	return io.simpleOp(tagPollOut, fd, nil, 0, false, c)
}

// Cancel asks the backend to stop op id. Its final completion still
// follows: its real result if it finished first, else -ECANCELED. Canceling
// an op twice is harmless. It returns ErrUnknownOp if id names no live op
// (it already completed). Must be called on the loop goroutine.
func (io *IO) Cancel(id OpID) error {
	io.l.assertLoop()
	o := io.ops.lookup(uint64(id))
	if o == nil {
		return ErrUnknownOp
	}
	switch o.state {
	case opCanceling, opParkedCanceled:
		o.marks &^= markYield // the loop's rotation cancel is now the caller's
		return nil
	case opParked:
		io.parked.cancel(o)
		return nil
	}
	if err := io.drv.cancel(o); err != nil {
		return err
	}
	o.state = opCanceling
	return nil
}

// complete implements completionSink: the backend delivers every
// completion of a table op here, on the loop goroutine. The record is looked
// up by user_data (a stale one is counted and dropped; uringdebug panics),
// released on its final completion (the one without ring.CQEFMore), and
// the Completer is called under recover.
func (io *IO) complete(ud uint64, res int32, flags uint32, data []byte) {
	if !io.delivering {
		io.delivering = true
		io.deliveringSince = io.l.clock.Now()
		// The wait is over once completions are being delivered: mark the
		// loop awake now, not after poll returns, so that callbacks calling
		// Execute or ExecuteAfterTurn (conn's Write from OnData) do not
		// write the eventfd for a loop that is already running.
		io.l.waker.nextWakeup.Store(awake)
		if io.l.tr.waiting {
			io.l.tr.dispatching() // the trace's wait region ends here, io begins
		}
	}
	o := io.ops.lookup(ud)
	if o == nil {
		io.l.stats.stale.Add(1)
		if debugChecks {
			tag, gen, slot := unpackUserData(ud)
			panic("loop: stale completion: tag " + tag.String() + " gen " + strconv.Itoa(int(gen)) + " slot " + strconv.Itoa(int(slot)) + " res " + strconv.Itoa(int(res)))
		}
		return
	}
	final := flags&ring.CQEFMore == 0
	if final {
		if io.parked.park(o, res) {
			return // resubmitted when the turn ends (starved.go)
		}
		res = noBufsResult(o, res)
	} else if o.tag == tagRecvBuf && o.multishot && o.state == opInFlight && io.parked.len() > 0 && io.parked.rotating() {
		io.parked.yield(o)
	}
	if o.marks&markRetried != 0 && res > 0 {
		o.marks &^= markRetried // it got its turn: parked again, it goes to the back
	}
	c, tag, room := o.completer, o.tag, recvControlRoom(o)
	if final {
		io.ops.release(o)
	}
	io.l.stats.completions.Add(1)
	if tag == tagRecvmsgBuf {
		io.deliverDgram(c, res, flags, data, room)
		return
	}
	io.deliver(c, res, flags, data)
}

// deliver passes one completion to c.
func (io *IO) deliver(c Completer, res int32, flags uint32, data []byte) {
	io.current = Completion{Res: res, Flags: flags, Data: data}
	io.deliverCompletion(c)
}

// deliverCompletion calls c.Complete(&io.current) under recover: a panicking
// completer is logged and counted, and the loop goes on.
func (io *IO) deliverCompletion(c Completer) {
	defer func() {
		if r := recover(); r != nil {
			io.l.stats.panics.Add(1)
			io.l.logger.Error("loop: completion callback panicked", "loop", io.l.name, "panic", r)
		}
	}()
	io.l.Running(&whatCompletion)
	c.Complete(&io.current)
}
