package conn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/loop"
)

// A NetPacketConn is a datagram socket on a loop seen as a net.PacketConn
// (and, when DialPacketNet made it, a net.Conn). Datagrams that arrive wait
// in an inbound queue bounded by WithInboundLimit (one that finds it full
// is dropped, as the kernel drops one that finds a full socket buffer;
// Dropped counts them). A write made off the loops while the socket's
// sends are idle and its loop waits between turns goes out at once from
// the writing goroutine, as package net's does; otherwise writes queue a
// copy on the loop, which sends it in order after the ones before. While
// the queue is full (WithDatagramQueue) they wait for room, as package
// net's wait for room in the socket's send buffer, until the write
// deadline passes.
// They fail as package net's do: a datagram longer than UDP carries with
// EMSGSIZE, a write with a destination on a connected socket with
// net.ErrWriteToConnected. On a loop goroutine, which must not wait, a
// write that finds the queue full fails at once with an error wrapping
// ErrQueueFull and loop.ErrInLoop. Close unblocks every pending call with
// net.ErrClosed. Safe for concurrent use.
type NetPacketConn struct {
	pc    *PacketConn
	limit int

	mu           sync.Mutex
	received     fifo[netDgram]
	receivedCost int      // memory the queued datagrams take (dgramCost)
	spare        [][]byte // buffers of read datagrams, for reuse
	closed       bool
	ended        error             // the socket closed under us (OnPacketClose)
	softErr      error             // an ICMP error on a connected socket, for the next read that finds no datagram
	gsoRefused   map[Addr]struct{} // destinations of segmented sends the kernel refused with EIO (WriteMsgUDP)
	deadlines    deadlines

	readWakeup  wakeup       // a datagram, an error, Close or the read deadline
	writeWakeup wakeup       // room in the outbound queue, Close, the socket's end or the write deadline
	waiters     atomic.Int32 // goroutines blocked in reads or writes
	dropped     atomic.Uint64
}

// A queued datagram is charged the memory it takes, as the kernel charges
// a socket buffer the whole of each packet: its buffer (dgramMinBuf at
// least, so that read buffers can be reused for the next ones) and
// dgramOverhead for its queue slot, address and slice header. An empty
// datagram costs as much as a 2 KiB one, so the bound also caps how many
// are queued: 1 MiB holds 481.
const (
	dgramMinBuf   = 2048
	dgramOverhead = 128
)

// dgramCost is what a queued datagram of n bytes is charged.
func dgramCost(n int) int { return max(n, dgramMinBuf) + dgramOverhead }

// netDgram is a datagram waiting in the inbound queue: its payload, its
// source, and its control messages (in buf's array, after the payload),
// ctrunc when they did not fit in the receive's room.
type netDgram struct {
	buf    []byte
	from   Addr
	ctl    []byte
	ctrunc bool
}

// ListenPacketNet is ListenPacket returning a net.PacketConn. Options as
// for ListenPacket, and WithInboundLimit.
func ListenPacketNet(ctx context.Context, g *loop.Group, network, address string, opts ...Option) (*NetPacketConn, error) {
	return openPacketNet(ctx, g, "listen", network, address, opts)
}

// DialPacketNet is DialPacket returning a NetPacketConn, which is also a
// net.Conn (Read and Write go to the peer), as net.Dial("udp", …) returns.
func DialPacketNet(ctx context.Context, g *loop.Group, network, address string, opts ...Option) (*NetPacketConn, error) {
	return openPacketNet(ctx, g, "dial", network, address, opts)
}

func openPacketNet(ctx context.Context, g *loop.Group, op, network, address string, opts []Option) (*NetPacketConn, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	np := &NetPacketConn{limit: netLimit(cfg.netInbound)}
	np.readWakeup.init()
	np.writeWakeup.init()
	pc, err := openPacket(ctx, g, op, network, address, np, opts)
	if err != nil {
		return nil, err
	}
	np.pc = pc // before any call of ours that reads it; the handler is given pc
	return np, nil
}

// DefaultNetPacketInbound bounds a NetPacketConn's inbound queue when
// WithInboundLimit does not: 1 MiB of memory for queued datagrams, more
// than a socket's default receive buffer holds.
const DefaultNetPacketInbound = 1 << 20

// netLimit is the inbound bound WithInboundLimit asks for.
func netLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultNetPacketInbound
	case n > 1<<30:
		return 1 << 30
	}
	return n
}

// PacketConn returns the underlying socket (its loop and counters).
func (np *NetPacketConn) PacketConn() *PacketConn { return np.pc }

// Dropped counts the datagrams that arrived and will never be read: those
// dropped because the inbound queue was full (PacketConn().Stats().Dropped)
// and those longer than the loop's datagram buffers hold
// (PacketConn().Stats().Truncated; PacketConn.MaxDatagram, more than any
// UDP datagram by default). Each is counted once.
func (np *NetPacketConn) Dropped() uint64 { return np.dropped.Load() + np.pc.truncated.Load() }

// OnPacket implements PacketHandler: the datagram is copied into the
// inbound queue (or dropped when it is full) and a blocked reader woken.
func (np *NetPacketConn) OnPacket(pc *PacketConn, data []byte, from Addr) {
	np.onPacketControl(pc, data, from, nil, false)
}

// onPacketControl implements packetControlHandler: OnPacket keeping the
// datagram's control messages for ReadMsgUDP and ReadBatch.
func (np *NetPacketConn) onPacketControl(pc *PacketConn, data []byte, from Addr, control []byte, ctrunc bool) {
	size := len(data) + len(control)
	np.mu.Lock()
	cost := dgramCost(size)
	if np.closed || np.receivedCost+cost > np.limit && np.received.n > 0 {
		np.mu.Unlock()
		np.dropped.Add(1)
		return
	}
	var b []byte
	if k := len(np.spare); k > 0 && cap(np.spare[k-1]) >= size {
		b = np.spare[k-1][:size]
		np.spare = np.spare[:k-1]
	} else {
		b = make([]byte, size, max(size, dgramMinBuf))
	}
	copy(b, data)
	d := netDgram{buf: b[:len(data)], from: from, ctrunc: ctrunc}
	if len(control) > 0 {
		d.ctl = b[len(data):]
		copy(d.ctl, control)
	}
	np.received.push(d)
	np.receivedCost += cost
	np.mu.Unlock()
	np.readWakeup.wake(pc.l, &np.waiters)
}

// OnPacketError implements PacketErrorHandler. A datagram too long for the
// loop's datagram buffers (ErrTruncated) is dropped: the socket counted it
// (Truncated, part of Dropped) and logged the first; an
// error the kernel reports on a connected socket (ECONNREFUSED after an
// ICMP port unreachable, …) fails the next Read that finds no datagram
// waiting, as package net's Read does. Send errors are only counted
// (PacketConn().Stats()), but for an EIO, which the kernel returns for a
// segmented send (UDP_SEGMENT) the route cannot take: the next
// WriteMsgUDP with UDP_SEGMENT to that destination fails with it.
func (np *NetPacketConn) OnPacketError(pc *PacketConn, err error) {
	var de *DatagramError
	if errors.As(err, &de) && de.Op == "write" && errors.Is(err, syscall.EIO) {
		np.noteGSORefused(de.Addr)
		return
	}
	if !errors.As(err, &de) || de.Op != "read" {
		return
	}
	if errors.Is(err, ErrTruncated) {
		return // counted by the socket (Truncated), which Dropped adds in
	}
	var errno syscall.Errno
	if !pc.connected || !errors.As(err, &errno) {
		return
	}
	np.mu.Lock()
	np.softErr = os.NewSyscallError("read", errno)
	np.mu.Unlock()
	np.readWakeup.wake(pc.l, &np.waiters)
}

// OnPacketClose implements PacketCloseHandler: a socket closed under us
// (its loop shut down) ends pending and later reads and writes.
func (np *NetPacketConn) OnPacketClose(pc *PacketConn, err error) {
	np.mu.Lock()
	if err == nil {
		err = net.ErrClosed
	}
	np.ended = err
	np.mu.Unlock()
	np.readWakeup.wake(pc.l, &np.waiters)
	np.writeWakeup.wake(pc.l, &np.waiters)
}

// onQueueRoom implements queueRoomHandler: a writer waiting for room in
// the outbound queue is woken (and wakes the next).
func (np *NetPacketConn) onQueueRoom(pc *PacketConn) { np.writeWakeup.wake(pc.l, &np.waiters) }

// ReadFrom reads the next datagram into p and returns its length and
// source. A datagram longer than p is cut to len(p), as package net does.
// It blocks until a datagram arrives, the read deadline passes
// (os.ErrDeadlineExceeded) or the socket closes (net.ErrClosed).
func (np *NetPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, from, err := np.read(p)
	if err != nil {
		return n, nil, err
	}
	return n, from.NetAddr(), nil
}

// ReadFromAddrPort is ReadFrom returning the source as a netip.AddrPort,
// without allocating (invalid for a Unix source).
func (np *NetPacketConn) ReadFromAddrPort(p []byte) (int, netip.AddrPort, error) {
	n, from, err := np.read(p)
	return n, from.AddrPort(), err
}

// ReadFromAddr is ReadFrom returning the source as a conn.Addr, without
// allocating; WriteToAddr replies to it.
func (np *NetPacketConn) ReadFromAddr(p []byte) (int, Addr, error) { return np.read(p) }

// Read reads the next datagram into p, as ReadFrom does without the source.
func (np *NetPacketConn) Read(p []byte) (int, error) {
	n, _, err := np.read(p)
	return n, err
}

func (np *NetPacketConn) read(p []byte) (int, Addr, error) {
	n, _, _, from, err := np.readMsg(p, nil)
	return n, from, err
}

// waitDgram waits until a datagram is queued and returns nil with np.mu
// held; or it returns the read's error, unlocked: the read deadline
// passed, an error reported on a connected socket, the socket's end, or
// (noWait) nothing queued.
func (np *NetPacketConn) waitDgram(noWait bool) error {
	np.mu.Lock()
	for {
		// As package net: once the deadline passed, reads fail even with
		// datagrams queued.
		if !np.closed && np.deadlines.passedLocked(dirRead) {
			np.mu.Unlock()
			np.readWakeup.signal() // pass it on: every blocked reader times out
			return np.opError("read", os.ErrDeadlineExceeded)
		}
		if np.received.n > 0 || np.closed || np.ended != nil || np.softErr != nil {
			break
		}
		np.mu.Unlock()
		if noWait {
			return np.opError("read", os.NewSyscallError("recvmmsg", syscall.EAGAIN))
		}
		if np.pc.l.InLoop() {
			return np.opError("read", loop.ErrInLoop)
		}
		np.readWakeup.wait(&np.waiters)
		np.mu.Lock()
	}
	if np.received.n == 0 && !np.closed && np.softErr != nil {
		err := np.softErr
		np.softErr = nil
		np.mu.Unlock()
		return np.opError("read", err)
	}
	if np.closed || np.received.n == 0 {
		err := np.ended
		if np.closed || err == nil {
			err = net.ErrClosed
		}
		np.mu.Unlock()
		np.readWakeup.signal() // pass it on to another reader
		return np.opError("read", err)
	}
	return nil
}

// popLocked takes the first queued datagram out. Caller holds np.mu.
func (np *NetPacketConn) popLocked() netDgram {
	d := np.received.pop()
	np.receivedCost -= dgramCost(len(d.buf) + len(d.ctl))
	return d
}

// recycleLocked keeps a read datagram's buffer for the next ones. Caller
// holds np.mu.
func (np *NetPacketConn) recycleLocked(d netDgram) {
	if cap(d.buf) <= dgramMinBuf && len(np.spare) < 256 {
		np.spare = append(np.spare, d.buf[:0])
	}
}

// readDoneLocked ends a read: it unlocks np.mu and passes the wakeup on to
// another reader when datagrams are left.
func (np *NetPacketConn) readDoneLocked() {
	more := np.received.n > 0
	np.mu.Unlock()
	if more {
		np.readWakeup.signal()
	}
}

// WriteTo sends p as one datagram to addr (a *net.UDPAddr, *net.UnixAddr
// or Addr). It copies p, waiting while the socket's queue is full; it
// fails once the write deadline has passed (os.ErrDeadlineExceeded), after
// Close (net.ErrClosed), and for a datagram longer than UDP carries
// (EMSGSIZE). The kernel's verdict on a datagram, sent at once or queued,
// is only counted (PacketConn().Stats()).
func (np *NetPacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if np.pc.connected {
		return 0, np.opError("write", net.ErrWriteToConnected)
	}
	to, err := np.pc.destination(addr)
	if err != nil {
		return 0, err
	}
	return np.writeTo(p, to)
}

// WriteToAddrPort is WriteTo to a netip.AddrPort.
func (np *NetPacketConn) WriteToAddrPort(p []byte, ap netip.AddrPort) (int, error) {
	return np.WriteToAddr(p, Addr{ap: ap})
}

// WriteToAddr is WriteTo to a conn.Addr, without allocating.
func (np *NetPacketConn) WriteToAddr(p []byte, a Addr) (int, error) {
	if np.pc.connected {
		return 0, np.opError("write", net.ErrWriteToConnected)
	}
	return np.writeTo(p, a)
}

func (np *NetPacketConn) writeTo(p []byte, to Addr) (int, error) {
	if err := np.pc.checkDestination(to); err != nil {
		return 0, err
	}
	return np.send(p, to, "sendto")
}

// Write sends p as one datagram to the peer of a socket DialPacketNet
// made, as WriteTo does.
func (np *NetPacketConn) Write(p []byte) (int, error) {
	if err := np.pc.checkConnected(); err != nil {
		return 0, err
	}
	return np.send(p, Addr{}, "write")
}

// send queues p for to (the zero Addr: the connected peer), waiting while
// the queue is full. call names the system call package net would report
// an EMSGSIZE of.
func (np *NetPacketConn) send(p []byte, to Addr, call string) (int, error) {
	return np.sendMsg(p, nil, to, call)
}

// sendMsg is send for a datagram with control messages (oob).
func (np *NetPacketConn) sendMsg(p, oob []byte, to Addr, call string) (int, error) {
	inLoop := loop.Current() != nil
	waited := false
	for {
		if err := np.writable(to); err != nil {
			if waited {
				np.writeWakeup.signal() // pass it on: every blocked writer fails
			}
			return 0, err
		}
		if !waited && len(p) > np.maxPayload(to) {
			return 0, np.writeErrorTo(to, os.NewSyscallError(call, syscall.EMSGSIZE))
		}
		if !inLoop && !waited {
			if took, refusedEIO := np.pc.sendDirect(p, oob, to); took {
				if refusedEIO {
					np.noteGSORefused(to)
				}
				return len(p), nil
			}
		}
		n, err := np.pc.queueMsg(p, oob, to, !inLoop)
		if err != errQueueFullWait {
			if waited {
				// Pass the wakeup on to another writer: one the
				// queue's room did not reach would wait for a room
				// nobody announces.
				np.writeWakeup.signal()
			}
			if inLoop && errors.Is(err, ErrQueueFull) {
				err = np.writeErrorTo(to, errQueueFullInLoop)
			}
			return n, err
		}
		np.writeWakeup.wait(&np.waiters)
		waited = true
	}
}

// errQueueFullInLoop fails a write that finds the queue full on a loop
// goroutine, where it must not wait.
var errQueueFullInLoop = fmt.Errorf("%w, and a loop goroutine cannot wait for room (%w)", ErrQueueFull, loop.ErrInLoop)

// maxPayload is the longest datagram the kernel sends to to (the zero
// Addr: the connected peer): 65,507 bytes over IPv4 (a v4-mapped
// destination included), 65,527 over IPv6. A Unix datagram socket's limit
// is its send buffer, which the kernel checks.
func (np *NetPacketConn) maxPayload(to Addr) int {
	if np.pc.family == unix.AF_UNIX {
		return math.MaxInt
	}
	ap := to.ap
	if !to.IsValid() {
		if ua, ok := np.pc.raddr.(*net.UDPAddr); ok {
			ap = ua.AddrPort()
		}
	}
	if np.pc.family == unix.AF_INET6 && !ap.Addr().Unmap().Is4() {
		return maxUDPPayload6
	}
	return maxUDPPayload
}

// maxUDPPayload6 is the longest UDP datagram over IPv6 (no jumbograms).
const maxUDPPayload6 = 65527

// writable fails a write after Close or once its deadline has passed.
// (After the socket's end, the queue refuses it with net.ErrClosed.)
func (np *NetPacketConn) writable(to Addr) error {
	np.mu.Lock()
	defer np.mu.Unlock()
	switch {
	case np.closed:
		return np.writeErrorTo(to, net.ErrClosed)
	case np.deadlines.passedLocked(dirWrite):
		return np.writeErrorTo(to, os.ErrDeadlineExceeded)
	}
	return nil
}

// writeErrorTo is a write's error: a *net.OpError naming the destination
// (the zero Addr: the connected peer).
func (np *NetPacketConn) writeErrorTo(to Addr, err error) error {
	oe := &net.OpError{Op: "write", Net: np.pc.network, Source: np.pc.laddr, Addr: np.pc.raddr, Err: err}
	if to.IsValid() {
		oe.Addr = to
	}
	return oe
}

func (np *NetPacketConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: np.pc.network, Source: np.pc.laddr, Addr: np.pc.raddr, Err: err}
}

// Close closes the socket and unblocks pending reads and writes with
// net.ErrClosed, without waiting for the peer: queued datagrams the
// socket cannot take at once are dropped and counted (PacketConn.Close).
// Closing again returns an error wrapping net.ErrClosed.
func (np *NetPacketConn) Close() error {
	np.mu.Lock()
	if np.closed {
		np.mu.Unlock()
		return np.opError("close", net.ErrClosed)
	}
	np.closed = true
	np.mu.Unlock()
	np.readWakeup.signal()
	np.writeWakeup.signal()
	if err := np.pc.Close(); err != nil && !isClosedErr(err) {
		return err
	}
	return nil
}

// isClosedErr reports an error wrapping net.ErrClosed.
func isClosedErr(err error) bool {
	oe, ok := err.(*net.OpError)
	return ok && oe.Err == net.ErrClosed
}

// LocalAddr returns the address the socket is bound to.
func (np *NetPacketConn) LocalAddr() net.Addr { return np.pc.LocalAddr() }

// SetReadBuffer sets the socket's receive buffer (SO_RCVBUF), as
// net.UDPConn's does. Safe for concurrent use.
func (np *NetPacketConn) SetReadBuffer(n int) error { return np.pc.SetReadBuffer(n) }

// SetWriteBuffer sets the socket's send buffer (SO_SNDBUF). Safe for
// concurrent use.
func (np *NetPacketConn) SetWriteBuffer(n int) error { return np.pc.SetWriteBuffer(n) }

// SyscallConn returns the socket's syscall.RawConn (PacketConn.SyscallConn:
// Control only; receive options set through it, IP_RECVTOS and the like,
// make ReadMsgUDP and ReadBatch return their control messages).
func (np *NetPacketConn) SyscallConn() (syscall.RawConn, error) { return np.pc.SyscallConn() }

// RemoteAddr returns the peer of a socket DialPacketNet made, else nil.
func (np *NetPacketConn) RemoteAddr() net.Addr { return np.pc.RemoteAddr() }

// SetDeadline sets both deadlines.
func (np *NetPacketConn) SetDeadline(t time.Time) error {
	if err := np.SetReadDeadline(t); err != nil {
		return err
	}
	return np.SetWriteDeadline(t)
}

// SetReadDeadline bounds pending and future reads (zero: no bound).
func (np *NetPacketConn) SetReadDeadline(t time.Time) error { return np.setDeadline(dirRead, t) }

// SetWriteDeadline bounds pending and future writes (zero: no bound):
// once t has passed, a write waiting for room in the queue and every
// later write fail.
func (np *NetPacketConn) SetWriteDeadline(t time.Time) error { return np.setDeadline(dirWrite, t) }

func (np *NetPacketConn) setDeadline(dir int, t time.Time) error {
	np.mu.Lock()
	if np.closed {
		np.mu.Unlock()
		return np.opError("set", net.ErrClosed)
	}
	passed := np.deadlines.setLocked(np.pc.l, np, dir, t, true)
	np.mu.Unlock()
	if passed {
		np.wakeupFor(dir).signal()
	}
	return nil
}

// wakeupFor returns the wakeup of dir's blocked calls.
func (np *NetPacketConn) wakeupFor(dir int) *wakeup {
	if dir == dirRead {
		return &np.readWakeup
	}
	return &np.writeWakeup
}

// fire implements deadliner: a check queued for at came due.
func (np *NetPacketConn) fire(dir int, at int64) {
	np.mu.Lock()
	expired := np.deadlines.fireLocked(np.pc.l, np, dir, at, np.closed)
	np.mu.Unlock()
	if expired {
		np.wakeupFor(dir).wake(np.pc.l, &np.waiters)
	}
}
