package conn

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// dialState follows a dial from its start to its outcome: the future the
// caller holds and why the connect was cut short, if it was. Loop goroutine
// only, except future.
type dialState struct {
	future   *sched.Future[*Conn]
	network  string // as the caller gave it, for errors
	canceled error  // set when ctx or the connect timeout ended it first
	timer    *sched.Timer
	stopCtx  func() bool // stops the ctx watch
	err      error       // why the dial failed, reported once the fd is closed
}

// Dial connects to address and returns once the connection is open and
// h.OnOpen ran. It is DialAsync waited on: see DialAsync for the loop the
// connection lives on, ctx, errors and options. Called on a loop goroutine
// (of any group), where waiting would stall that loop and every connection
// on it, Dial returns an error wrapping loop.ErrInLoop at once: use
// DialAsync there. Safe for concurrent use.
func Dial(ctx context.Context, g *loop.Group, network, address string, h Handler, opts ...Option) (*Conn, error) {
	if cur := loop.Current(); cur != nil {
		return nil, opError("dial", network, "", nil, nil,
			fmt.Errorf("conn: Dial would block loop %s (use DialAsync): %w", cur, loop.ErrInLoop))
	}
	f := DialAsync(ctx, g, network, address, h, opts...)
	<-f.Done()
	c, err, _ := f.Result()
	return c, err
}

// DialAsync starts connecting to address and returns at once with a future
// of the connection. It never blocks, so it is the way to dial from a
// handler (Netty's proxy pattern). network is "tcp", "tcp4", "tcp6" or
// "unix"; a host name is resolved on a goroutine of its own, with ctx. The
// connection lives on the loop WithLoop names, else on the calling loop when
// called on a loop of g, else on g.Next().
//
// The future completes on the connection's loop (its Wait called on that
// loop returns an error wrapping loop.ErrInLoop at once while the dial is
// pending, as loop.NewFuture says; use OnDone there): with the connection
// once h.OnOpen ran, or with a *net.OpError once the dial failed and its socket
// is closed (no Handler method runs then). When ctx ends or the connect
// timeout (WithConnectTimeout) passes first, the error wraps ctx.Err() or
// os.ErrDeadlineExceeded; a refused connection gives errors.Is(err,
// syscall.ECONNREFUSED); a loop that refuses the task gives
// loop.ErrRejected. If OnOpen panics, the connection closes (OnClose
// reports the *PanicError) and the future fails with it. Safe for
// concurrent use.
func DialAsync(ctx context.Context, g *loop.Group, network, address string, h Handler, opts ...Option) *sched.Future[*Conn] {
	var f *sched.Future[*Conn] // made once the loop is chosen, which completes it
	fail := func(err error) *sched.Future[*Conn] {
		if f == nil {
			f = sched.NewFuture[*Conn]()
		}
		f.Complete(nil, opError("dial", network, "", nil, nil, err))
		return f
	}
	if g == nil || h == nil {
		return fail(fmt.Errorf("conn: Dial: nil group or handler"))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return fail(err)
	}
	alt := "DialPacket"
	if cfg.netConn {
		alt = "DialPacketNet"
	}
	if err := datagramNetworkError(network, alt); err != nil {
		return fail(err)
	}
	l := cfg.dialLoop
	if l == nil {
		if cur := loop.Current(); cur != nil && cur.Group() == g {
			l = cur
		} else {
			l = g.Next()
		}
	} else if l.Group() != g {
		return fail(invalidOption("loop %v is not a loop of group %v", l, g))
	}
	f = loop.NewFuture[*Conn](l)
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	ds := &dialState{future: f, network: network}
	if !needsLookup(network, address) {
		t, err := resolve(ctx, network, address, false)
		if err != nil {
			return fail(err)
		}
		startDial(ctx, l, ds, t.sa, t.family, h, cfg)
		return f
	}
	// A name to look up: not on the caller's goroutine, which may be a
	// loop.
	go func() {
		t, err := resolve(ctx, network, address, false)
		if err != nil {
			fail(err)
			return
		}
		startDial(ctx, l, ds, t.sa, t.family, h, cfg)
	}()
	return f
}

// startDial opens the socket and hands the connect to l.
func startDial(ctx context.Context, l *loop.Loop, ds *dialState, sa unix.Sockaddr, family int, h Handler, cfg *config) {
	addr := sockaddrToAddr(sa)
	fd, err := newSocket(family)
	if err != nil {
		ds.future.Complete(nil, opError("dial", ds.network, "socket", nil, addr, err))
		return
	}
	c := newConn(l, fd, streamNetwork(ds.network), h, cfg, nil)
	c.raddr = addr
	c.state = stateConnecting
	lc := c.lifecycle()
	lc.ensureExtras().dial = ds
	// The fd has one owner: the start task, or the path that finds the
	// task refused. A loop whose start failed refuses the task and still
	// runs it as it terminates, so both may run: the first to claim the fd
	// closes it, the other leaves it alone (it may be another file's by
	// then).
	var claim atomic.Bool
	start := func() {
		if !claim.CompareAndSwap(false, true) {
			return
		}
		if ds.canceled != nil {
			unix.Close(fd)
			lc.finishDial(opError("dial", ds.network, "", nil, addr, ds.canceled))
			return
		}
		op := &c.extras.op // the dial state made extras
		id, err := l.IO().Connect(fd, sa, lc)
		if err != nil {
			unix.Close(fd)
			lc.finishDial(opError("dial", ds.network, "", nil, addr, err))
			return
		}
		op.id, op.kind, op.active = id, opConnect, true
		c.opsInFlight++
		if d := cfg.connectTimeout; d > 0 {
			ds.timer, _ = l.Schedule(d, func() {
				ds.timer = nil
				lc.abortDial(errDeadline)
			})
		}
	}
	if ctx.Done() != nil {
		ds.stopCtx = context.AfterFunc(ctx, func() {
			cerr := ctx.Err()
			_ = executeRetrying(l, func() { lc.abortDial(cerr) })
			// A refused task means the loop is terminating: its drain
			// cancels the connect.
		})
	}
	if l.InLoop() {
		start()
		return
	}
	if err := l.Execute(start); err != nil {
		if !claim.CompareAndSwap(false, true) {
			return // the task ran after all and owns the outcome
		}
		unix.Close(fd)
		c.state = stateClosed
		c.extras.dial = nil
		if ds.stopCtx != nil {
			ds.stopCtx()
		}
		ds.future.Complete(nil, opError("dial", ds.network, "", nil, addr, err))
	}
}

// abortDial cuts a dial short with cause (ctx.Err() or the connect
// timeout): the connect is canceled, or never started. Must be called on
// c's loop.
func (c *lifecycle) abortDial(cause error) {
	ds := c.extras.dial
	if ds == nil || c.state != stateConnecting || ds.canceled != nil {
		return
	}
	ds.canceled = cause
	if op := c.activeOp(); op != nil && op.kind == opConnect {
		cancelOp(c.l, op.id)
	}
}

// finishDial ends a failed dial whose socket is closed: the future fails
// with err. Must be called on c's loop.
func (c *lifecycle) finishDial(err error) {
	ds := c.extras.dial
	c.extras.dial = nil
	c.state = stateClosed
	ds.stop()
	ds.future.Complete(nil, err)
}

// stop ends the dial's ctx watch and connect timer.
func (ds *dialState) stop() {
	if ds.stopCtx != nil {
		ds.stopCtx()
	}
	stopTimer(&ds.timer)
}

// connectedAs handles the CONNECT's completion; givenUp is the completion's
// Quarantined: a connect given up at a ring rebuild reports
// loop.ErrGivenUp. Must be called on c's loop.
func (c *lifecycle) connectedAs(res int32, givenUp bool) {
	ds := c.extras.dial
	if res < 0 || ds.canceled != nil {
		var err error
		switch {
		case ds.canceled != nil:
			err = opError("dial", ds.network, "", nil, c.raddr, ds.canceled)
		case givenUp:
			err = opError("dial", ds.network, "", nil, c.raddr, loop.ErrGivenUp)
		case errnoOf(res) == unix.ECANCELED:
			err = opError("dial", ds.network, "", nil, c.raddr, net.ErrClosed)
		default:
			err = opError("dial", ds.network, "connect", nil, c.raddr, errnoOf(res))
		}
		// Close through the loop (the backend may track the fd), then
		// report.
		c.state = stateClosed
		ds.err = err
		op := &c.ensureExtras().op
		id, cerr := c.l.IO().Close(int(c.fd), c)
		if cerr != nil {
			_ = unix.Close(int(c.fd))
			c.finishDial(err)
			return
		}
		op.id, op.kind, op.active = id, opDialClose, true
		return
	}
	c.extras.dial = nil
	ds.stop()
	if err := c.open(); err != nil {
		// OnOpen panicked: the connection closes (OnClose reports it)
		// and the dial fails with the panic.
		ds.future.Complete(nil, opError("dial", ds.network, "", nil, c.raddr, err))
		return
	}
	ds.future.Complete(c.conn(), nil)
}
