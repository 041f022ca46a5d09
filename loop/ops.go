package loop

import (
	"errors"
	"strconv"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// The op API: asynchronous operations with a completion callback, identical
// on both backends (docs/op-lifecycle.md). Every method here must be called
// on the loop goroutine (from a task, a timer or a completion); built with
// the uringdebug tag they check it. Each returns the op's OpID, for Cancel,
// or an error, in which case no completion will follow.
//
// Memory: a buffer passed to an op belongs to the loop until the op's final
// completion; the op table keeps it
// referenced until then. Do not modify or reuse it before.

// An OpID names one in-flight op of a loop: its packed user_data (slot,
// generation and tag; never a pointer). It is unique among the loop's live
// ops, and a stale OpID (of an op that completed) is recognised as such.
type OpID uint64

// maxIovecs is the kernel's UIO_MAXIOV, the most buffers one sendmsg takes.
const maxIovecs = 1024

// newOp checks the common arguments and allocates a record.
func (l *Loop) newOp(tag opTag, fd int, c Completer) (*op, error) {
	l.assertLoop()
	if c == nil {
		return nil, ErrNilCompleter
	}
	if State(l.state.Load()) >= StateShutdown {
		return nil, ErrClosed
	}
	if fd < 0 || fd > 1<<31-1 {
		return nil, invalidArgument("%s: fd %d", tag, fd)
	}
	o := l.ops.alloc(tag)
	if o == nil {
		return nil, ErrTooManyOps
	}
	o.fd = int32(fd)
	o.c = c
	return o, nil
}

// simpleOp allocates, fills and starts an op of the fields most ops use.
func (l *Loop) simpleOp(tag opTag, fd int, buf []byte, arg uint32, multishot bool, c Completer) (OpID, error) {
	o, err := l.newOp(tag, fd, c)
	if err != nil {
		return 0, err
	}
	o.buf, o.arg, o.multishot = buf, arg, multishot
	return l.startOp(o)
}

// startOp hands a filled record to the backend.
func (l *Loop) startOp(o *op) (OpID, error) {
	id := OpID(o.userData())
	if err := l.drv.submit(o); err != nil {
		l.ops.release(o)
		return 0, err
	}
	l.stats.submitted.Add(1)
	return id, nil
}

// Accept accepts connections on the listening socket fd. With multishot it
// stays armed and completes once per connection (ring.CQEFMore set while it
// stays armed; re-arm after a completion without it). Res is the new
// fd (non-blocking, close-on-exec) or -errno. Must be called on the loop
// goroutine.
func (l *Loop) Accept(fd int, multishot bool, c Completer) (OpID, error) {
	return l.simpleOp(tagAccept, fd, nil, 0, multishot, c)
}

// Recv receives into buf (single shot). Res is the byte count, 0 at end of
// stream, or -errno. flags are recv(2) flags. Must be called on the loop
// goroutine.
func (l *Loop) Recv(fd int, buf []byte, flags int, c Completer) (OpID, error) {
	if len(buf) == 0 {
		return 0, invalidArgument("recv: empty buffer")
	}
	return l.simpleOp(tagRecv, fd, buf, uint32(flags), false, c)
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
func (l *Loop) RecvProvided(fd int, flags int, c Completer) (OpID, error) {
	return l.recvProvided(tagRecvBuf, fd, flags, true, c)
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
func (l *Loop) RecvProvidedOnce(fd int, flags int, c Completer) (OpID, error) {
	return l.recvProvided(tagRecvBuf, fd, flags, false, c)
}

func (l *Loop) recvProvided(tag opTag, fd int, flags int, multishot bool, c Completer) (OpID, error) {
	o, err := l.newOp(tag, fd, c)
	if err != nil {
		return 0, err
	}
	o.multishot = multishot
	o.arg = uint32(flags)
	if tag == tagRecvBuf && l.parked.len() > 0 && l.rotating() {
		// Others wait for buffers: this one waits behind them.
		id := OpID(o.userData())
		l.queueParked(o)
		return id, nil
	}
	return l.startOp(o)
}

// Send sends buf (MSG_NOSIGNAL is always added to flags). Res is the byte
// count, possibly short, or -errno. Must be called on the loop goroutine.
func (l *Loop) Send(fd int, buf []byte, flags int, c Completer) (OpID, error) {
	if len(buf) == 0 {
		return 0, invalidArgument("send: empty buffer")
	}
	return l.simpleOp(tagSend, fd, buf, uint32(flags), false, c)
}

// Sendmsg sends bufs in order as one gathered write (at most 1024 buffers).
// It copies the list itself, so the caller may reuse it at once; the
// buffers belong to the kernel until the final completion.
// Res is the byte count, possibly short, or -errno. Must be called on the
// loop goroutine.
func (l *Loop) Sendmsg(fd int, bufs [][]byte, flags int, c Completer) (OpID, error) {
	if len(bufs) == 0 || len(bufs) > maxIovecs {
		return 0, invalidArgument("sendmsg: %d buffers (expected 1..%d)", len(bufs), maxIovecs)
	}
	o, err := l.newOp(tagSendmsg, fd, c)
	if err != nil {
		return 0, err
	}
	x := o.x()
	x.bufs = append(x.bufs[:0], bufs...) // the slot's own list: the caller's may be on its stack
	o.arg = uint32(flags)
	return l.startOp(o)
}

// Connect connects the non-blocking socket fd to sa (IPv4, IPv6 or Unix).
// Res is 0 or -errno (-ECONNREFUSED …). Must be called on the loop
// goroutine.
func (l *Loop) Connect(fd int, sa unix.Sockaddr, c Completer) (OpID, error) {
	if sa == nil {
		return 0, invalidArgument("connect: nil address")
	}
	if u, ok := sa.(*unix.SockaddrUnix); ok && u.Name == "" {
		return 0, invalidArgument("connect: empty unix socket name")
	}
	o, err := l.newOp(tagConnect, fd, c)
	if err != nil {
		return 0, err
	}
	n, err := sock.PutSockaddr(&o.x().sa, sa)
	if err != nil {
		l.ops.release(o)
		if errors.Is(err, ring.ErrNotSupported) {
			return 0, err
		}
		return 0, invalidArgument("connect: %w", err)
	}
	o.x().saLen = n
	return l.startOp(o)
}

// Close closes fd. Cancel fd's other ops and wait for their final
// completions first: an fd is closed only when no op still names it. Res is 0
// or -errno. Must be called on the loop goroutine.
func (l *Loop) Close(fd int, c Completer) (OpID, error) {
	return l.simpleOp(tagClose, fd, nil, 0, false, c)
}

// Shutdown shuts down part of a full-duplex connection (how is unix.SHUT_RD,
// SHUT_WR or SHUT_RDWR). Res is 0 or -errno. Must be called on the loop
// goroutine. (It is the socket operation; the loop's own shutdown is
// ShutdownGracefully.)
func (l *Loop) Shutdown(fd int, how int, c Completer) (OpID, error) {
	if how != unix.SHUT_RD && how != unix.SHUT_WR && how != unix.SHUT_RDWR {
		return 0, invalidArgument("shutdown: how %d", how)
	}
	return l.simpleOp(tagShutdown, fd, nil, uint32(how), false, c)
}

// Cancel asks the backend to stop op id. Its final completion still
// follows: its real result if it finished first, else -ECANCELED. Canceling
// an op twice is harmless. It returns ErrUnknownOp if id names no live op
// (it already completed). Must be called on the loop goroutine.
func (l *Loop) Cancel(id OpID) error {
	l.assertLoop()
	o := l.ops.lookup(uint64(id))
	if o == nil {
		return ErrUnknownOp
	}
	switch o.state {
	case opCanceling, opParkedCanceled:
		o.marks &^= markYield // the loop's rotation cancel is now the caller's
		return nil
	case opParked:
		l.cancelParked(o)
		return nil
	}
	if err := l.drv.cancel(o); err != nil {
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
func (l *Loop) complete(ud uint64, res int32, flags uint32, data []byte) {
	if !l.ioStarted {
		l.ioStarted = true
		l.ioStart = l.clock.Now()
		// The wait is over once completions are being delivered: mark the
		// loop awake now, not after poll returns, so that callbacks calling
		// Execute or ExecuteAfterTurn (conn's Write from OnData) do not
		// write the eventfd for a loop that is already running.
		l.nextWakeup.Store(awake)
	}
	o := l.ops.lookup(ud)
	if o == nil {
		l.stats.stale.Add(1)
		if debugChecks {
			tag, gen, slot := unpackUserData(ud)
			panic("loop: stale completion: tag " + tag.String() + " gen " + strconv.Itoa(int(gen)) + " slot " + strconv.Itoa(int(slot)) + " res " + strconv.Itoa(int(res)))
		}
		return
	}
	final := flags&ring.CQEFMore == 0
	if final {
		if l.park(o, res) {
			return // resubmitted when the turn ends (starved.go)
		}
		res = l.noBufsResult(o, res)
	} else if o.tag == tagRecvBuf && o.multishot && o.state == opInFlight && l.parked.len() > 0 && l.rotating() {
		l.yieldRecv(o)
	}
	c, tag := o.c, o.tag
	if final {
		l.ops.release(o)
	}
	l.stats.completions.Add(1)
	if tag == tagRecvmsgBuf {
		l.deliverDgram(c, res, flags, data)
		return
	}
	l.deliver(c, res, flags, data)
}

// deliver passes one completion to c.
func (l *Loop) deliver(c Completer, res int32, flags uint32, data []byte) {
	l.cpl = Completion{Res: res, Flags: flags, Data: data}
	l.deliverCompletion(c)
}

// deliverCompletion calls c.Complete(&l.cpl) under recover: a panicking
// completer is logged and counted, and the loop goes on.
func (l *Loop) deliverCompletion(c Completer) {
	defer func() {
		if r := recover(); r != nil {
			l.stats.panics.Add(1)
			l.logger.Error("loop: completion callback panicked", "loop", l.name, "panic", r)
		}
	}()
	c.Complete(&l.cpl)
}
