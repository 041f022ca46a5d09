package conn

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// DefaultNetInbound is the default bound of a NetConn's inbound buffer
// (WithInboundLimit): the received bytes no Read has taken yet. Past it the
// connection stops receiving until Read brings the buffer back to half of
// it.
const DefaultNetInbound = 64 << 10

// maxNetInbound caps a NetConn's bound (WithInboundLimit).
const maxNetInbound = 1 << 30

// netWriteMax is the largest piece a NetConn's Write hands to the
// connection at once: a larger Write waits for the connection to become
// writable between pieces, so its queue never holds much more than the
// high-water mark.
const netWriteMax = 64 << 10

// A NetConn is a net.Conn on a ringloop connection: the connection runs on
// its loop, and Read and Write hand bytes to and from it. Accept on a
// [NetListener] and [DialNet] return one.
//
//   - Read blocks until bytes, the peer's FIN (io.EOF), an error or the read
//     deadline arrive. Received bytes wait in a per-connection buffer bounded
//     by [WithInboundLimit]; a full buffer pauses receiving, so a goroutine
//     that stops reading makes the peer stall, not the memory grow.
//   - Write returns once every byte is handed to the connection's outbound
//     queue. While the connection is unwritable (above the high-water mark
//     of [WithWaterMarks]) it blocks, so a writer faster than the peer waits
//     instead of queueing without bound.
//   - Deadlines run on the loop and end a blocked call with an error
//     wrapping os.ErrDeadlineExceeded (a net.Error whose Timeout is true).
//   - Close unblocks pending Reads and Writes with net.ErrClosed.
//     CloseWrite sends a FIN after the queued bytes (TCP and Unix).
//
// Read, Write, Close and the deadline setters are safe for concurrent use.
// They block, so they must not be called on a loop goroutine, where they
// return an error wrapping loop.ErrInLoop instead of waiting (a Read with
// bytes already buffered, or a Write to a writable connection, still
// succeeds there).
type NetConn struct {
	c           *Conn
	mu          sync.Mutex
	writeMu     sync.Mutex   // held through a whole Write (and a ReadFrom's chunk), so concurrent ones do not interleave
	waiters     atomic.Int32 // goroutines blocked in Read, Write, ReadFrom or WriteTo
	paused      bool         // receiving paused because received is full; under mu
	mark        int          // the bound received was held to when it last grew (limitNow); under mu
	ahead       int          // how far receives run ahead of Reads now (recvAhead); under mu
	tookSince   int          // bytes Reads took since the receive was last sized (recvAhead); under mu
	closed      bool         // Close was called; under mu
	eof         bool         // the peer's FIN arrived; under mu
	ended       bool         // the connection ended (OnClose ran) with cause; under mu
	readWakeup  wakeup       // input, EOF, an error, Close or the read deadline
	writeWakeup wakeup       // writable, an error, Close or the write deadline

	// Under mu.
	since     time.Duration // loop clock (Loop.Now) of the last Read progress, or of the first byte received since (the loop's budget of kept bytes)
	received  chunkQueue    // received, not yet read; counted in its loop's netKept
	cause     error         // what OnClose reported (see readEnd, writeEnd)
	deadlines deadlines     // read and write deadlines
}

func newNetConn() *NetConn {
	nc := new(NetConn)
	nc.readWakeup.init()
	nc.writeWakeup.init()
	return nc
}

// limit is the NetConn's inbound bound: WithInboundLimit's, else
// DefaultNetInbound.
func (nc *NetConn) limit() int {
	if n := nc.c.cfg.netInbound; n > 0 {
		return min(n, maxNetInbound)
	}
	return DefaultNetInbound
}

// limitNow returns the NetConn's inbound bound of the moment: how far its
// receives run ahead (recvAhead) within its own bound (limit), or, while its loop keeps more than its budget of kept bytes,
// half the budget shared among the loop's connections if that is less (at
// least minNetShare), so that many readers that stopped reading hold
// about the budget between them, as package net leaves their bytes in the
// kernel. On the connection's loop.
func (nc *NetConn) limitNow(r *loopConns) int {
	own := min(nc.limit(), max(nc.ahead, minNetShare))
	if budget, _ := nc.c.l.BufferBudget(); r.keptTotal() > budget {
		return min(own, max(budget/max(2*r.conns.n, 1), minNetShare))
	}
	return own
}

// recvAhead sizes the connection's next receive (loop.RecvLimiter) to what
// the reader takes: the NetConn receives ahead of its Reads up to twice
// what they took since the last receive was sized, or half as far as
// before if that is more, at least minNetShare and at most its bound. A
// reader that keeps up is soon a bound ahead, as a bulk transfer wants;
// one that stops (a handler that never reads a request's body) leaves a
// few KiB received, not the bound, the rest in the kernel as package net
// leaves it. On the connection's loop.
func (nc *NetConn) recvAhead() loop.RecvLimit {
	nc.mu.Lock()
	nc.ahead = min(max(2*nc.tookSince, nc.ahead/2, minNetShare), nc.limit())
	nc.tookSince = 0
	room := nc.ahead - nc.received.n
	nc.mu.Unlock()
	return loop.RecvLimit(max(room, 1))
}

// minNetShare is the least a NetConn receives ahead of its Reads while
// its loop keeps more than its budget (hard-coded: one provided buffer's
// worth, what a receive then takes at most).
const minNetShare = 4 << 10

// Conn returns the underlying connection: its loop (Loop), its socket
// options (SetNoDelay, SetKeepAlive, SetReadBuffer, SetWriteBuffer), its
// outbound state (Buffered, Writable), Context and CloseFuture. Reading or
// writing through it (PauseRead, ResumeRead, Write, Close) would compete
// with the NetConn.
func (nc *NetConn) Conn() *Conn { return nc.c }

func (nc *NetConn) wake(w *wakeup) { w.wake(nc.c.l, &nc.waiters) }

// A wakeup is what a blocked Read or Write waits on: a binary semaphore
// made of a sync.Mutex, held while no wakeup is pending (a Mutex may be
// unlocked by a goroutine other than the one that locked it), and a flag
// that lets only one wakeup be pending, so the Mutex is never unlocked
// twice. It is smaller than a channel, which matters for many idle
// connections each blocked in a Read.
type wakeup struct {
	mu      sync.Mutex
	pending atomic.Bool
}

// init makes the wakeup empty: its Mutex held. Before any use.
func (w *wakeup) init() { w.mu.Lock() }

// signal leaves a wakeup unless one is pending.
func (w *wakeup) signal() {
	if w.pending.CompareAndSwap(false, true) {
		w.mu.Unlock()
	}
}

// wake signals w from l and, when a goroutine is blocked (waiters), has l
// give its P back before its next wait, so that the goroutine runs at once
// (loop.Loop.HandOffNextWait).
func (w *wakeup) wake(l *loop.Loop, waiters *atomic.Int32) {
	w.signal()
	if waiters.Load() > 0 {
		l.HandOffNextWait()
	}
}

// wait blocks until a wakeup is pending and takes it, counted in waiters.
func (w *wakeup) wait(waiters *atomic.Int32) {
	waiters.Add(1)
	w.mu.Lock()
	w.pending.Store(false)
	waiters.Add(-1)
}

// The two directions of a NetConn, for its wakeups and deadlines.
const (
	dirRead = iota
	dirWrite
)

// wakeupFor returns dir's wakeup.
func (nc *NetConn) wakeupFor(dir int) *wakeup {
	if dir == dirRead {
		return &nc.readWakeup
	}
	return &nc.writeWakeup
}

// block waits for dir's wakeup. It is called with nc.mu held after the
// caller found nothing to do, and returns with it held, unless the caller
// is a loop goroutine: then it returns an error wrapping loop.ErrInLoop
// without the lock. Whoever changes the state the caller checked signals
// the wakeup afterwards, and a signal left before the wait is kept, so none
// is lost (a stale one only makes the caller check again).
func (nc *NetConn) block(dir int, op string) error {
	w := nc.wakeupFor(dir)
	nc.mu.Unlock()
	if loop.Current() != nil {
		return nc.c.opError(op, "", loop.ErrInLoop)
	}
	w.wait(&nc.waiters)
	nc.mu.Lock()
	return nil
}

// OnOpen implements Handler.
func (nc *NetConn) OnOpen(c *Conn) {
	nc.c = c
	if ln := c.cfg.netListener; ln != nil {
		ln.push(nc)
	}
}

// OnData implements Handler: the bytes are copied into the inbound buffer.
func (nc *NetConn) OnData(c *Conn, data []byte) {
	if r := registryFor(c.l); r.directSent.Load() {
		r.directSent.Store(false) // the reply may go out from its goroutine
	}
	nc.mu.Lock()
	if nc.closed {
		nc.mu.Unlock()
		return
	}
	if nc.received.n == 0 {
		nc.since = c.l.Now()
	}
	nc.received.push(data, true)
	r := registryFor(c.l)
	r.netKept.Add(int64(len(data)))
	r.checkOverload(c.l)
	nc.mark = nc.limitNow(r)
	pause := nc.received.n >= nc.mark && !nc.paused
	if pause {
		nc.paused = true
	}
	// Decided under nc.mu, as took reads the flag: a Read either ran
	// before (and the bytes it took are not held) or sees the flag and
	// resumes the connection.
	budget := c.inbound().stallsBudget(nc.received.n, nc.since)
	if budget {
		c.shared.set(sharedBudgetPaused)
	}
	nc.mu.Unlock()
	if pause {
		_ = c.PauseRead()
	}
	if budget {
		c.inbound().pauseForBudget()
	}
	nc.wake(&nc.readWakeup)
}

// took accounts for n received bytes a Read or WriteTo took (or Close
// dropped): progress, for the loop's budget of kept bytes. Caller holds
// nc.mu.
func (nc *NetConn) took(n int) {
	if n <= 0 {
		return
	}
	c := nc.c
	nc.since = c.l.Now()
	nc.tookSince += n
	r := registryFor(c.l)
	r.netKept.Add(-int64(n))
	if c.shared.has(sharedBudgetPaused) {
		_ = c.l.Execute(c.inbound().progressed)
	} else if r.budgetPaused.Load() > 0 {
		_ = c.l.Execute(func() { r.resumeUnderBudget(c.l) })
	}
}

// OnHalfClose implements HalfCloseHandler: the peer sends nothing more.
func (nc *NetConn) OnHalfClose(*Conn) {
	nc.mu.Lock()
	if !nc.ended {
		nc.eof = true
	}
	nc.mu.Unlock()
	nc.wake(&nc.readWakeup)
}

// OnWritabilityChanged implements WritabilityHandler.
func (nc *NetConn) OnWritabilityChanged(_ *Conn, writable bool) {
	if writable {
		nc.wake(&nc.writeWakeup)
	}
}

// OnClose implements Handler.
func (nc *NetConn) OnClose(_ *Conn, err error) { nc.end(err) }

// end marks the connection ended with cause and wakes every blocked Read
// and Write. OnClose calls it, and so does a close that lingers to send
// what is queued (by Close, by the server's Close or Shutdown, or by the
// loop's shutdown), so that Reads and Writes end then, not when the linger
// does. On the connection's loop.
func (nc *NetConn) end(cause error) {
	nc.mu.Lock()
	nc.ended, nc.cause = true, cause
	nc.mu.Unlock()
	nc.readWakeup.signal()
	nc.wake(&nc.writeWakeup)
}

// Read reads received bytes into p. It returns io.EOF once the peer's FIN
// was read, and an error wrapping net.ErrClosed after Close.
func (nc *NetConn) Read(p []byte) (int, error) {
	nc.mu.Lock()
	if len(p) > 0 {
		if err := nc.awaitInput(); err != nil {
			return 0, err
		}
	}
	switch {
	case nc.closed:
		nc.mu.Unlock()
		nc.readWakeup.signal() // pass the wakeup on to another reader
		return 0, nc.c.opError("read", "", net.ErrClosed)
	case nc.received.n > 0 && len(p) > 0:
		n := nc.received.read(p)
		nc.took(n)
		more := nc.received.n > 0 || nc.readEnded()
		nc.unlockResuming()
		if more {
			nc.readWakeup.signal() // pass the wakeup on to another reader
		}
		return n, nil
	case nc.readEnded() && nc.received.n == 0 && len(p) > 0:
		err := nc.readEnd()
		nc.mu.Unlock()
		nc.readWakeup.signal()
		return 0, err
	}
	nc.mu.Unlock()
	return 0, nil // len(p) == 0
}

// unlockResuming unlocks nc.mu after a read, and resumes receiving if the
// read brought a paused NetConn's buffer down to half its bound.
func (nc *NetConn) unlockResuming() {
	resume := nc.paused && nc.received.n <= nc.mark/2
	nc.paused = nc.paused && !resume
	nc.mu.Unlock()
	if resume {
		_ = nc.c.ResumeRead()
	}
}

// awaitInput waits until received bytes, the end of input or Close arrive.
// It is called with nc.mu held and returns with it held, unless it returns
// an error: the read deadline passed, or the caller is a loop goroutine.
func (nc *NetConn) awaitInput() error {
	for {
		// As package net: once the deadline passed, reads fail even with
		// bytes waiting (a reader stopped that way consumes no more).
		if !nc.closed && nc.deadlines.passedLocked(dirRead) {
			nc.mu.Unlock()
			nc.readWakeup.signal() // pass the wakeup on to another reader
			return nc.c.opError("read", "", os.ErrDeadlineExceeded)
		}
		if nc.received.n > 0 || nc.readEnded() || nc.closed {
			return nil
		}
		if err := nc.block(dirRead, "read"); err != nil {
			return err
		}
	}
}

// Write hands p to the connection, waiting while it is unwritable. It
// returns len(p) unless the connection ended, was closed, or the write
// deadline passed, and then how many bytes were handed over.
func (nc *NetConn) Write(p []byte) (int, error) {
	if nc.lockWrites() {
		defer nc.writeMu.Unlock()
	}
	total := 0
	for {
		if err := nc.awaitWritable(); err != nil {
			return total, err
		}
		k := min(len(p), nc.writePiece())
		n, err := nc.c.outbound().sendDirect(p[:k])
		total += n
		if err != nil {
			return total, err
		}
		p = p[k:]
		nc.passWritable()
		if len(p) == 0 {
			return total, nil
		}
	}
}

// writePiece returns the most a Write or ReadFrom hands to the connection
// before it waits for the connection to be writable again: netWriteMax,
// or less while the loop queues more than its budget (the high-water mark
// of the moment), so that a goroutine blocked in a long Write to a peer
// that does not read holds about its share of the budget, not a piece of
// netWriteMax.
func (nc *NetConn) writePiece() int {
	return min(netWriteMax, max(nc.c.outbound().highWaterNow(), minPauseMark))
}

// ReadFrom implements io.ReaderFrom: it reads r into the connection's own
// outbound chunks until EOF, sparing io.Copy its buffer and one copy, and
// waits while the connection is unwritable as Write does.
func (nc *NetConn) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if err := nc.awaitWritable(); err != nil {
			return total, err
		}
		t := getChunk(false, false, 0)
		n, rerr := r.Read(t.buf[:min(len(t.buf), nc.writePiece())])
		if n > 0 {
			t.w = n
			// Each chunk goes in as one Write would (package net's
			// generic ReadFrom writes buffer by buffer too): other
			// writers may go between chunks, not inside a Write.
			locked := nc.lockWrites()
			err := nc.c.outbound().queueChunks([]*chunk{t}, n)
			if locked {
				nc.writeMu.Unlock()
			}
			if err != nil {
				return total, err
			}
			total += int64(n)
			nc.passWritable()
		} else {
			putChunk(t)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// lockWrites takes the write lock and reports whether it did. A Write
// longer than netWriteMax goes out in pieces, waiting for room between them;
// as package net holds its fd's write lock for the whole call, so each
// Write's bytes stay together however many goroutines write. A holder
// waiting for room returns on Close, the end of the connection or its
// deadline, and the next one then fails the same way. On the connection's
// own loop, which must not wait for a writer that waits for the loop, a
// held lock is not waited for: such a write never waits, and can only land
// between another's pieces.
func (nc *NetConn) lockWrites() bool {
	if nc.writeMu.TryLock() {
		return true
	}
	if nc.c.l.InLoop() {
		return false
	}
	nc.writeMu.Lock()
	return true
}

// passWritable passes a writability wakeup on to another writer while the
// connection stays writable.
func (nc *NetConn) passWritable() {
	if nc.c.Writable() {
		nc.writeWakeup.signal()
	}
}

// awaitWritable waits until the connection may take more bytes: it is
// writable, or the caller runs on the connection's own loop (which must
// never wait for itself). It fails once the NetConn or the connection is
// closed, the write deadline passed, or on another loop's goroutine.
func (nc *NetConn) awaitWritable() error {
	nc.mu.Lock()
	for {
		var err error
		switch {
		case nc.closed:
			err = nc.c.opError("write", "", net.ErrClosed)
		case nc.ended:
			err = writeError(nc.c, nc.writeEnd())
		case nc.deadlines.passed[dirWrite]:
			err = nc.c.opError("write", "", os.ErrDeadlineExceeded)
		case nc.c.Writable():
			nc.mu.Unlock()
			return nil
		}
		if err != nil {
			nc.mu.Unlock()
			nc.writeWakeup.signal() // pass the wakeup on to another writer
			return err
		}
		if loop.Current() == nc.c.l {
			nc.mu.Unlock()
			return nil
		}
		if err := nc.block(dirWrite, "write"); err != nil {
			return err
		}
	}
}

// readEnded reports whether input ended: the peer's FIN, or the end of the
// connection. Caller holds nc.mu.
func (nc *NetConn) readEnded() bool { return nc.eof || nc.ended }

// readEnd is the error a Read reports once the received bytes are read:
// io.EOF after the peer's FIN, an error wrapping net.ErrClosed after a
// local close, else the cause the connection ended with. Caller holds nc.mu.
func (nc *NetConn) readEnd() error {
	switch {
	case nc.eof:
		return io.EOF
	case !nc.ended:
		return nil
	case nc.cause == nil || errors.Is(nc.cause, net.ErrClosed):
		return nc.c.opError("read", "", net.ErrClosed)
	}
	return nc.cause
}

// writeEnd is what ended the connection, for writes: EPIPE once both
// sides' FINs ended it (this side's came from CloseWrite, after which the
// socket of a net.TCPConn answers EPIPE), an error wrapping net.ErrClosed
// when the server or the group closed it, else the cause. Caller holds
// nc.mu and has checked nc.closed.
func (nc *NetConn) writeEnd() error {
	switch {
	case nc.cause == nil || errors.Is(nc.cause, net.ErrClosed):
		return nc.c.opError("write", "", net.ErrClosed)
	case errors.Is(nc.cause, io.EOF):
		return nc.c.opError("write", "write", syscall.EPIPE)
	}
	return nc.cause
}

// writeError is the error a Write reports after the connection ended with
// err (as OnClose gave it).
func writeError(c *Conn, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op != "write" {
		return c.opError("write", "", oe.Err)
	}
	return err
}

// Close closes the connection: bytes already written are still sent (see
// WithLinger), pending and later Reads and Writes fail with net.ErrClosed.
// A second Close returns an error wrapping net.ErrClosed.
func (nc *NetConn) Close() error {
	nc.mu.Lock()
	if nc.closed {
		nc.mu.Unlock()
		return nc.c.opError("close", "", net.ErrClosed)
	}
	nc.closed = true
	nc.took(nc.received.n)
	nc.received.release()
	nc.mu.Unlock()
	nc.readWakeup.signal()
	nc.writeWakeup.signal()
	err := nc.c.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil // the connection had already ended on its own
	}
	return err
}

// CloseWrite shuts down the sending side once the bytes written before it
// are sent; Reads go on. Later Writes fail with EPIPE and a second
// CloseWrite does nothing, as with package net. Once the connection has
// ended (both sides' FINs, or a reset), a TCP connection's CloseWrite
// fails with ENOTCONN, as shutdown(2) on its socket would; after Close,
// or once the server or the group closed the connection, with
// net.ErrClosed.
func (nc *NetConn) CloseWrite() error {
	nc.mu.Lock()
	closed, ended, cause := nc.closed, nc.ended, nc.cause
	nc.mu.Unlock()
	switch {
	case closed || ended && (cause == nil || errors.Is(cause, net.ErrClosed)):
		return nc.c.opError("close", "", net.ErrClosed)
	case ended && nc.c.network() == "tcp":
		return nc.c.opError("close", "shutdown", syscall.ENOTCONN)
	case ended:
		return nil // a Unix socket's shutdown(2) succeeds after its peer closed
	}
	return nc.c.CloseWrite()
}

// LocalAddr returns the local address.
func (nc *NetConn) LocalAddr() net.Addr { return nc.c.LocalAddr() }

// RemoteAddr returns the peer's address.
func (nc *NetConn) RemoteAddr() net.Addr { return nc.c.RemoteAddr() }

// SyscallConn returns a syscall.RawConn of the connection's socket, as
// package net's connections do (code that sets socket options uses it, and
// packages os and net look for it through syscall.Conn to try sendfile and
// splice). Its Control runs f with the fd on the
// connection's loop goroutine, where the fd stays open (its number cannot
// be reused) while f runs: at once when called there, else as a task
// Control waits for. f must not block, as nothing on a loop may. On
// another loop's goroutine Control returns an error wrapping
// loop.ErrInLoop without running f, and after Close, or once the
// connection ended, one wrapping net.ErrClosed. The loop owns the
// socket's reads and writes, so the RawConn's Read and Write return an
// error without calling their function (code that tries them, like
// package net's sendfile, then copies as it does for any net.Conn).
func (nc *NetConn) SyscallConn() (syscall.RawConn, error) { return netRawConn{nc}, nil }

// netRawConn is a NetConn's syscall.RawConn.
type netRawConn struct{ nc *NetConn }

// Control implements syscall.RawConn: f runs on the connection's loop. A
// panic of f is raised again on the caller's goroutine.
func (rc netRawConn) Control(f func(fd uintptr)) error {
	nc := rc.nc
	nc.mu.Lock()
	closed := nc.closed
	nc.mu.Unlock()
	if closed {
		return nc.c.opError("raw-control", "", net.ErrClosed)
	}
	var (
		panicked bool
		value    any
	)
	err := nc.c.onLoop("raw-control", true, func() error {
		defer func() {
			if r := recover(); r != nil {
				panicked, value = true, r
			}
		}()
		f(uintptr(nc.c.fd))
		return nil
	})
	if panicked {
		panic(value)
	}
	return err
}

// Read implements syscall.RawConn: it fails, since the loop owns the
// socket's reads.
func (rc netRawConn) Read(func(fd uintptr) bool) error {
	return rc.nc.c.opError("raw-read", "", errRawIO)
}

// Write implements syscall.RawConn: it fails, since the loop owns the
// socket's writes.
func (rc netRawConn) Write(func(fd uintptr) bool) error {
	return rc.nc.c.opError("raw-write", "", errRawIO)
}

// SetDeadline sets the read and write deadlines.
func (nc *NetConn) SetDeadline(t time.Time) error {
	if err := nc.setDeadline(dirRead, t); err != nil {
		return err
	}
	return nc.setDeadline(dirWrite, t)
}

// SetReadDeadline sets the deadline for pending and future Reads; the zero
// time means none.
func (nc *NetConn) SetReadDeadline(t time.Time) error { return nc.setDeadline(dirRead, t) }

// SetWriteDeadline sets the deadline for pending and future Writes; the
// zero time means none.
func (nc *NetConn) SetWriteDeadline(t time.Time) error { return nc.setDeadline(dirWrite, t) }

// WriteTo implements io.WriterTo: it writes received bytes to w straight
// from the inbound buffer until EOF or an error, sparing io.Copy its own
// buffer and one copy.
func (nc *NetConn) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		nc.mu.Lock()
		if err := nc.awaitInput(); err != nil {
			return total, err
		}
		if nc.closed {
			nc.mu.Unlock()
			return total, nc.c.opError("read", "", net.ErrClosed)
		}
		if nc.received.n == 0 {
			err := nc.readEnd()
			nc.mu.Unlock()
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		// Take the head chunk out of the queue, write it without the
		// lock, and free it.
		t := nc.received.q[nc.received.head]
		nc.received.q[nc.received.head] = nil
		nc.received.head++
		nc.received.n -= t.w - t.r
		nc.took(t.w - t.r)
		if nc.received.head == len(nc.received.q) {
			nc.received.q, nc.received.head = nc.received.q[:0], 0
		}
		nc.unlockResuming()
		n, err := w.Write(t.buf[t.r:t.w])
		total += int64(n)
		short := n < t.w-t.r
		putChunk(t)
		if err != nil {
			return total, err
		}
		if short {
			return total, io.ErrShortWrite
		}
	}
}

func (nc *NetConn) setDeadline(dir int, t time.Time) error {
	nc.mu.Lock()
	if nc.closed {
		nc.mu.Unlock()
		return nc.c.opError("set", "", net.ErrClosed)
	}
	passed := nc.deadlines.setLocked(nc.c.l, nc, dir, t, true)
	nc.mu.Unlock()
	if passed {
		nc.wakeupFor(dir).signal()
	}
	return nil
}

// fire implements deadliner: a check queued for at came due.
func (nc *NetConn) fire(dir int, at int64) {
	nc.mu.Lock()
	expired := nc.deadlines.fireLocked(nc.c.l, nc, dir, at, nc.closed)
	nc.mu.Unlock()
	if expired {
		nc.wake(nc.wakeupFor(dir))
	}
}

// asNetConn configures the connection under a NetConn: half-close on, and
// the inbound limit of a NetConn (see validate).
func asNetConn(c *config) { c.halfClose, c.netConn = true, true }

// DialNet connects to address on a loop of g, as Dial does, and returns
// the connection as a net.Conn. It must not be called on a loop goroutine.
func DialNet(ctx context.Context, g *loop.Group, network, address string, opts ...Option) (*NetConn, error) {
	if _, err := newConfig(opts); err != nil {
		return nil, err
	}
	nc := newNetConn()
	opts = append(opts[:len(opts):len(opts)], asNetConn)
	// Dial returns after OnOpen ran on the loop, which set nc.c.
	if _, err := Dial(ctx, g, network, address, nc, opts...); err != nil {
		return nil, err
	}
	return nc, nil
}

// A NetListener is a net.Listener on a ringloop Server: connections are
// accepted on the group's loops as by Listen, and Accept returns them as
// *NetConn. Connections accepted and not yet taken by Accept wait in a
// queue bounded by WithBacklog's value (default 4096); past it a new
// connection is closed at once, as a full kernel backlog drops it.
//
// Accept ends, with an error wrapping net.ErrClosed, once the server
// stops accepting, whoever stops it: Close, Server().Close or
// Server().Shutdown, a shutdown of the loops the server accepts on
// (Group.Shutdown, ShutdownGracefully), or the end of its group (Done), as
// package net's Accept ends once its socket is closed. The connections
// accepted and not yet returned are closed then.
type NetListener struct {
	srv         *Server
	maxAccepted int // WithBacklog's value: the bound of accepted

	mu       sync.Mutex
	accepted []*NetConn    // accepted connections Accept has yet to take
	closed   bool          // Close was called
	stopped  bool          // no connection comes any more: Close, or the server stopped accepting (stop)
	wakeup   chan struct{} // a pending wakeup for Accept, once one is accepted
	done     chan struct{} // closed once stopped
	dropped  atomic.Uint64
}

// ListenNet listens on address as Listen does and returns a net.Listener
// whose Accept returns the connections as *NetConn. Its handlers run on
// goroutines: serve it from a group made with loop.WithSharedThread(true)
// (docs/netconn.md, "Which thread for the adapters").
func ListenNet(ctx context.Context, g *loop.Group, network, address string, opts ...Option) (*NetListener, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	ln := &NetListener{maxAccepted: cfg.backlog, wakeup: make(chan struct{}, 1), done: make(chan struct{})}
	opts = append(opts[:len(opts):len(opts)], asNetConn, func(c *config) { c.netListener = ln })
	srv, err := ListenFunc(ctx, g, network, address, func(*Conn) Handler { return newNetConn() }, opts...)
	if err != nil {
		return nil, err
	}
	ln.srv = srv
	return ln, nil
}

// push queues an accepted connection for Accept. On the connection's loop.
func (ln *NetListener) push(nc *NetConn) {
	ln.mu.Lock()
	if ln.stopped || len(ln.accepted) >= ln.maxAccepted {
		ln.mu.Unlock()
		ln.dropped.Add(1)
		_ = nc.Close()
		return
	}
	ln.accepted = append(ln.accepted, nc)
	ln.mu.Unlock()
	select {
	case ln.wakeup <- struct{}{}:
	default: // a wakeup is pending already
	}
}

// stop ends Accept: pending and later Accepts return net.ErrClosed, and
// the connections accepted and not yet returned are closed (counted in
// Dropped). The server calls it once it stops accepting (Server.close,
// listener.closed), Accept once the group terminated, Close first. Safe
// for concurrent use, on a loop goroutine too; only the first call acts.
func (ln *NetListener) stop() {
	ln.mu.Lock()
	if ln.stopped {
		ln.mu.Unlock()
		return
	}
	ln.stopped = true
	q := ln.accepted
	ln.accepted = nil
	ln.mu.Unlock()
	close(ln.done)
	ln.dropped.Add(uint64(len(q)))
	for _, nc := range q {
		_ = nc.Close()
	}
}

// opError is the *net.OpError of one of the listener's operations.
func (ln *NetListener) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: ln.srv.Addr().Network(), Addr: ln.srv.Addr(), Err: err}
}

// Accept waits for and returns the next connection. Once the listener is
// closed or its server stopped accepting (see NetListener), it returns an
// error wrapping net.ErrClosed. On a loop goroutine, where it would wait,
// it returns an error wrapping loop.ErrInLoop instead.
func (ln *NetListener) Accept() (net.Conn, error) {
	for {
		ln.mu.Lock()
		if ln.stopped {
			ln.mu.Unlock()
			return nil, ln.opError("accept", net.ErrClosed)
		}
		if len(ln.accepted) > 0 {
			nc := ln.accepted[0]
			ln.accepted[0] = nil
			ln.accepted = ln.accepted[1:]
			more := len(ln.accepted) > 0
			if !more {
				ln.accepted = nil
			}
			ln.mu.Unlock()
			if more {
				// One wakeup stands for any number of queued
				// connections: pass it on to another Accept.
				select {
				case ln.wakeup <- struct{}{}:
				default:
				}
			}
			return nc, nil
		}
		ln.mu.Unlock()
		if loop.Current() != nil {
			return nil, ln.opError("accept", loop.ErrInLoop)
		}
		select {
		case <-ln.wakeup:
		case <-ln.done:
		case <-ln.srv.workers.Done():
			// The group terminated: no connection can come, even from an
			// acceptor loop of another group.
			ln.stop()
		}
	}
}

// Close stops accepting; connections already accepted stay open, and those
// accepted but not yet returned by Accept are closed. Pending Accepts
// return net.ErrClosed. A second Close returns an error wrapping
// net.ErrClosed; a Close after the server stopped on its own closes what
// is left and returns nil.
func (ln *NetListener) Close() error {
	ln.mu.Lock()
	if ln.closed {
		ln.mu.Unlock()
		return ln.opError("close", net.ErrClosed)
	}
	ln.closed = true
	ln.mu.Unlock()
	ln.stop()
	err := ln.srv.Close()
	if errors.Is(err, ErrServerClosed) {
		err = nil
	}
	return err
}

// Addr returns the listening address.
func (ln *NetListener) Addr() net.Addr { return ln.srv.Addr() }

// Server returns the underlying server (Conns, Shutdown). Closing or
// shutting it down ends Accept, as Close does.
func (ln *NetListener) Server() *Server { return ln.srv }

// Dropped returns how many connections were closed because the accept queue
// was full or the listener stopped before Accept took them.
func (ln *NetListener) Dropped() uint64 { return ln.dropped.Load() }
