package conn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
)

// Datagram sockets on the loops (docs/udp.md): datagrams arrive through
// loop.IO.RecvmsgProvided and reach the PacketHandler on the loop goroutine;
// writes from any goroutine are copied into the socket's queue and go out
// at the end of the loop turn, one SENDMSG per datagram. A datagram the
// socket cannot take yet waits for it to be writable and goes again.

// A PacketHandler receives a datagram socket's datagrams. OnPacket runs on
// the socket's loop goroutine, one datagram at a time, and must not block.
type PacketHandler interface {
	// OnPacket delivers one datagram: data is its payload, valid only
	// during the call (it is one of the loop's provided buffers), and
	// from its source. A datagram may be empty. Any UDP datagram fits
	// the loop's default datagram buffers; one longer than they hold
	// (MaxDatagram: a Unix datagram past 69,504 bytes, or smaller
	// buffers set with loop.WithDatagramBuffers) is never delivered: it
	// is counted (PacketStats.Truncated), logged once per socket, and
	// reported to OnPacketError as truncated.
	OnPacket(pc *PacketConn, data []byte, from Addr)
}

// PacketErrorHandler is optionally implemented by a PacketHandler. It
// receives the failures that do not close the socket, each a
// *DatagramError: a datagram truncated on arrival (ErrTruncated), an ICMP
// error reported on a connected UDP socket (syscall.ECONNREFUSED, …), a
// datagram the kernel refused to send (syscall.EMSGSIZE, a full device
// queue: syscall.ENOBUFS). A datagram the socket has no room for yet is
// not a failure: it is sent once there is room. Without the handler such
// failures are only counted (PacketConn.Stats). It runs on the socket's
// loop goroutine.
type PacketErrorHandler interface {
	OnPacketError(pc *PacketConn, err error)
}

// PacketCloseHandler is optionally implemented by a PacketHandler.
// OnPacketClose runs once, on the loop goroutine, after the socket's fd is
// closed: err is nil after Close, net.ErrClosed when the loop shut down
// under it, or the failure that closed it.
type PacketCloseHandler interface {
	OnPacketClose(pc *PacketConn, err error)
}

// PacketHandlerFunc adapts a function to PacketHandler.
type PacketHandlerFunc func(pc *PacketConn, data []byte, from Addr)

// OnPacket calls f.
func (f PacketHandlerFunc) OnPacket(pc *PacketConn, data []byte, from Addr) { f(pc, data, from) }

var (
	// ErrTruncated is the cause a *DatagramError reports for a datagram
	// longer than the loop's datagram buffers hold (MaxDatagram; set with
	// loop.WithDatagramBuffers): its first bytes arrived, the rest was
	// cut off by the kernel, so it is not delivered.
	ErrTruncated = errors.New("conn: datagram truncated: longer than the loop's datagram buffers hold")
	// ErrQueueFull is returned by a PacketConn's write when the socket's
	// queue of datagrams not yet handed to the kernel is full
	// (WithDatagramQueue): the datagram was not queued. A NetPacketConn's
	// write waits for room instead, but on a loop goroutine.
	ErrQueueFull = errors.New("conn: datagram queue full")
	// ErrNotConnected is returned by Write on a socket ListenPacket made:
	// it has no peer (use WriteTo).
	ErrNotConnected = errors.New("conn: datagram socket not connected")
)

// DefaultDatagramQueue is how many datagrams a socket queues for sending
// before writes fail with ErrQueueFull, or a NetPacketConn's wait
// (WithDatagramQueue).
const DefaultDatagramQueue = 4096

// maxSendsInFlight bounds the SENDMSGs one socket has in flight; the rest
// wait in its queue.
const maxSendsInFlight = 256

// A DatagramError is a failure that does not close a datagram socket,
// delivered to PacketErrorHandler.
type DatagramError struct {
	Op   string // "read" or "write"
	Addr Addr   // the datagram's source or destination; zero when unknown (an ICMP error on a receive)
	Len  int    // the datagram's length: a truncated one's whole length
	Err  error  // ErrTruncated, or a *os.SyscallError (errors.Is(err, syscall.ECONNREFUSED))
}

func (e *DatagramError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("conn: datagram %s %v (%d bytes): %v", e.Op, e.Addr, e.Len, e.Err)
	}
	return fmt.Sprintf("conn: datagram %s: %v", e.Op, e.Err)
}

func (e *DatagramError) Unwrap() error { return e.Err }

// Addr is a datagram's source or destination: an IP address and port, or a
// Unix socket name. It is a value: handing one to OnPacket allocates
// nothing (but for a Unix socket name not seen just before). The zero Addr
// is invalid (an unnamed Unix peer).
type Addr struct {
	ap   netip.AddrPort
	name string // Unix: the name, '@' first for an abstract one
	unix bool
}

// UnixAddr returns the Addr of a Unix socket name ('@' first: abstract).
func UnixAddr(name string) Addr { return Addr{name: name, unix: true} }

// AddrPort returns the IP address and port (invalid for a Unix address).
func (a Addr) AddrPort() netip.AddrPort { return a.ap }

// Name returns a Unix socket's name ("" for an IP address).
func (a Addr) Name() string { return a.name }

// IsValid reports whether a names anything: an IP address and port, or a
// named Unix socket.
func (a Addr) IsValid() bool { return a.ap.IsValid() || a.unix && a.name != "" }

// Network returns "udp" or "unixgram", so that Addr is a net.Addr.
func (a Addr) Network() string {
	if a.unix {
		return "unixgram"
	}
	return "udp"
}

// String returns the address as package net prints it.
func (a Addr) String() string {
	if a.unix {
		return a.name
	}
	return a.ap.String()
}

// NetAddr returns a as a *net.UDPAddr or *net.UnixAddr (allocating).
func (a Addr) NetAddr() net.Addr {
	switch {
	case a.unix:
		return &net.UnixAddr{Name: a.name, Net: "unixgram"}
	case a.ap.IsValid():
		return net.UDPAddrFromAddrPort(a.ap)
	}
	return nil
}

// PacketStats counts a datagram socket's traffic.
type PacketStats struct {
	Received      uint64 // datagrams delivered to OnPacket
	Sent          uint64 // sends the kernel took: datagrams, or GSO batches of them (a batch of segments counts once)
	BytesReceived uint64 // payload bytes of the datagrams counted in Received
	BytesSent     uint64 // payload bytes of the sends counted in Sent
	Truncated     uint64 // datagrams too long for the loop's datagram buffers (MaxDatagram), not delivered
	ReadErrors    uint64 // receive errors that did not close the socket (ICMP errors on a connected socket)
	WriteErrors   uint64 // datagrams the kernel refused (EMSGSIZE, ENOBUFS, an ICMP error, …), and those dropped at close (see Close)
	QueueFull     uint64 // writes refused with ErrQueueFull
	// Dropped counts the datagrams a NetPacketConn over the socket
	// dropped because its inbound queue was full; 0 under a handler of
	// your own. Those too long to receive are in Truncated only
	// (NetPacketConn.Dropped is the sum of both).
	Dropped uint64
	// KernelDrops counts the datagrams the kernel dropped before the
	// socket could receive them (its receive buffer was full: raise it
	// with WithReadBuffer), read from the socket when Stats is called.
	KernelDrops uint64
}

// A PacketConn is a datagram socket on a loop. Its handler runs on that
// loop; its methods are safe for concurrent use.
type PacketConn struct {
	l            *loop.Loop
	flushFn      func() // pc.flush, made once: queuing it allocates nothing
	fd           int
	family       int
	network      string
	laddr        net.Addr
	raddr        net.Addr
	connected    bool
	path         string // a bound Unix socket's path, removed on close
	h            PacketHandler
	errHandler   PacketErrorHandler   // h, if it implements PacketErrorHandler
	closeHandler PacketCloseHandler   // h, if it implements PacketCloseHandler
	roomHandler  queueRoomHandler     // h, if its writers wait for room in the queue
	ctlHandler   packetControlHandler // h, if it takes control messages
	queueMax     int
	wantRoom     atomic.Int32 // room for control messages the receive options ask for

	// mu guards the outbound queue and the close request.
	mu          sync.Mutex
	out         fifo[dgramOut] // queued, not yet handed to the loop
	free        [][]byte       // spare datagram buffers of smallDgram bytes
	freeCtl     [][]byte       // and control message buffers of smallControl
	flushQueued bool
	closeReq    bool
	roomWanted  bool        // a write that waits found the queue full
	directMsg   unix.Msghdr // sendDirect's message header, iovec and destination
	directIov   unix.Iovec
	directTo    [unix.SizeofSockaddrAny]byte

	// handed counts the datagrams the flush took from out that have not
	// ended yet (in flight or stalled): a direct send waits for them, so
	// that datagrams leave in the order they were written.
	handed atomic.Int32
	// direct: writes off the loops may go out from the writing goroutine
	// (sendDirect). Not on epoll: there, a quic-go server at GOMAXPROCS=1
	// answering from its goroutines while the loop slept had a p99 of
	// 7× package net's (1.6× with every datagram queued), and bulk
	// gained nothing measurable.
	direct bool

	// Owned by the loop goroutine.
	recvArmed       bool
	recvID          loop.OpID
	recvRoom        int      // room for control messages the armed receive reserves
	roomWaiters     []func() // Control calls waiting for a receive with the room wanted
	inflight        int
	sends           []*dgramSend // free send records
	closing         bool
	closeErr        error
	fdClosed        bool
	unhook          func()
	truncLogged     bool   // a datagram too long for the loop's buffers was logged (once per socket)
	lastSrcName     []byte // the last Unix source name seen, whether it is abstract, and its string
	lastSrcAbstract bool
	lastSrc         string

	// The sends (owned by the loop goroutine).
	sendFlags   int            // MSG_DONTWAIT on a Unix socket: a full peer refuses a send (EAGAIN) instead of the kernel retrying it
	maxInflight int            // sends in flight at most: 1 on a Unix socket, so that its datagrams stay in order
	stalled     fifo[dgramOut] // datagrams the socket refused for now (EAGAIN): sent again first, in order
	blocked     bool           // the socket refused a datagram: nothing more goes out until it is writable
	waited      bool           // the sends going out follow a wait for writability
	waitArmed   bool           // a PollWritable (waitID) or a retry timer (waitTimer) is pending
	waitID      loop.OpID
	waitTimer   *sched.Timer
	retryDelay  time.Duration // the next wait's timer; 0: PollWritable
	retryFn     func()        // pc.retryStalled, made once

	received, sent, truncated, readErrs, writeErrs, queueFull atomic.Uint64
	bytesReceived, bytesSent                                  atomic.Uint64
	drops                                                     atomic.Uint64 // the kernel's count when the fd closed
	fdGone                                                    bool          // under mu: the fd is closed, or will be by the last of fdRefs
	fdRefs                                                    int           // under mu: control calls running on the fd
	done                                                      chan struct{}
}

// dgramOut is a queued datagram: its bytes (a buffer the socket owns) and
// its destination as a raw sockaddr (none: the connected peer).
type dgramOut struct {
	buf     []byte
	ctl     []byte // control messages (NetPacketConn.WriteMsgUDP), if any
	to      [unix.SizeofSockaddrAny]byte
	toLen   uint8
	toValid Addr
}

// dgramSend is one SENDMSG in flight, its Completer.
type dgramSend struct {
	pc    *PacketConn
	dgram dgramOut
}

// rearmDelay is how long a socket waits before arming its receive again
// when the loop could not take it.
const rearmDelay = 10 * time.Millisecond

// A send that ended without sending its datagram for a reason that
// passes (EAGAIN: no room; EINTR; a cancel nobody asked for) blocks the
// socket: the datagram is kept, and once the socket is writable
// (loop.IO.PollWritable) it goes again, first. Writability is not always
// room: an unconnected Unix socket is writable whatever its destination's
// queue holds. So a send refused right after a wait waits on a timer
// instead, minRetryDelay and doubling up to maxRetryDelay, until a send
// goes through.
const (
	minRetryDelay = time.Millisecond
	maxRetryDelay = 16 * time.Millisecond
)

// ListenPacket opens a datagram socket bound to address on network ("udp",
// "udp4", "udp6" or "unixgram"; port 0 picks a free port) and serves it on
// one loop of workers (WithLoop chooses which). h receives its datagrams.
// Options that apply: WithLoop, WithReadBuffer, WithWriteBuffer,
// WithReusePort and WithDatagramQueue.
func ListenPacket(ctx context.Context, workers *loop.Group, network, address string, h PacketHandler, opts ...Option) (*PacketConn, error) {
	return openPacket(ctx, workers, "listen", network, address, h, opts)
}

// DialPacket opens a datagram socket connected to address on network
// ("udp", "udp4", "udp6" or "unixgram") and serves it on one loop of
// workers: Write sends to the peer, and only the peer's datagrams arrive.
// A unixgram socket is bound to an abstract name the kernel picks, so
// that the peer can reply. Options as for ListenPacket.
func DialPacket(ctx context.Context, workers *loop.Group, network, address string, h PacketHandler, opts ...Option) (*PacketConn, error) {
	return openPacket(ctx, workers, "dial", network, address, h, opts)
}

func openPacket(ctx context.Context, workers *loop.Group, op, network, address string, h PacketHandler, opts []Option) (*PacketConn, error) {
	fail := func(err error) (*PacketConn, error) { return nil, opError(op, network, "", nil, nil, err) }
	if workers == nil {
		return fail(errors.New("conn: nil group"))
	}
	if h == nil {
		return fail(errors.New("conn: nil handler"))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	pc := &PacketConn{network: network, h: h, queueMax: cfg.datagramQueue, done: make(chan struct{})}
	pc.flushFn = pc.flush
	pc.errHandler, _ = h.(PacketErrorHandler)
	pc.closeHandler, _ = h.(PacketCloseHandler)
	pc.roomHandler, _ = h.(queueRoomHandler)
	pc.ctlHandler, _ = h.(packetControlHandler)
	pc.connected = op == "dial"
	t, err := resolvePacket(ctx, network, address, !pc.connected)
	if err != nil {
		return fail(err)
	}
	pc.family = t.family
	pc.maxInflight, pc.retryFn = maxSendsInFlight, pc.retryStalled
	if t.family == unix.AF_UNIX {
		// The kernel's own retry of a send refused by a full peer sends
		// an empty datagram on io_uring (loop.IO.SendTo); and with one
		// send in flight, a datagram refused cannot be overtaken by the
		// next one as the peer reads.
		pc.sendFlags, pc.maxInflight = unix.MSG_DONTWAIT, 1
	}
	pc.fd, err = packetSocket(t.family, t.sa, t.v6only, op == "dial", cfg)
	if err != nil {
		return fail(err)
	}
	if u, ok := t.sa.(*unix.SockaddrUnix); ok && op == "listen" {
		pc.path = unixPath(u)
	}
	if bound, err := unix.Getsockname(pc.fd); err == nil {
		pc.laddr = packetAddr(bound)
	}
	if pc.connected {
		pc.raddr = packetAddr(t.sa)
	}
	pc.l = cfg.dialLoop
	if pc.l == nil {
		pc.l = workers.Next()
	}
	pc.direct = pc.l.Backend() == loop.BackendUring
	if pc.l.IO().MaxDatagram() <= 0 {
		pc.closeFd()
		return fail(fmt.Errorf("%w: the loop's datagram buffers hold no datagram (loop.WithDatagramBuffers)", ErrInvalidOption))
	}
	track(live.packets, pc) // before it can close: its close untracks
	if err := pc.l.Execute(pc.open); err != nil {
		untrack(live.packets, pc)
		pc.closeFd() // no task ran: the loop has not seen the fd
		return fail(err)
	}
	return pc, nil
}

// open hooks the socket to its loop's shutdown and arms its receive. Runs
// on the loop, so a shutdown starting meanwhile either finds the hook or
// makes it fail, and the fd is closed once either way.
func (pc *PacketConn) open() {
	remove, err := pc.l.AddShutdownHook(pc.loopShutdown)
	if err != nil {
		pc.closeNow(net.ErrClosed) // the loop is shutting down
		return
	}
	pc.unhook = remove
	pc.arm()
}

// Loop returns the loop the socket lives on.
func (pc *PacketConn) Loop() *loop.Loop { return pc.l }

// LocalAddr returns the address the socket is bound to.
func (pc *PacketConn) LocalAddr() net.Addr { return pc.laddr }

// RemoteAddr returns the peer of a socket DialPacket made, else nil.
func (pc *PacketConn) RemoteAddr() net.Addr { return pc.raddr }

// MaxDatagram is the longest datagram the socket receives whole: the size
// of its loop's datagram buffers less 128 bytes (loop.IO.MaxDatagram:
// 69,504 bytes by default, more than any UDP datagram carries; set with
// loop.WithDatagramBuffers), and less the room its receive reserves for
// control messages while receive options set through SyscallConn ask for
// them (at most 1 KiB).
func (pc *PacketConn) MaxDatagram() int { return pc.l.IO().MaxDatagram() - pc.receiveRoom() }

// Done is closed once the socket is closed and OnPacketClose has run.
func (pc *PacketConn) Done() <-chan struct{} { return pc.done }

// Stats returns the socket's counters.
func (pc *PacketConn) Stats() PacketStats {
	st := PacketStats{Received: pc.received.Load(), Sent: pc.sent.Load(),
		BytesReceived: pc.bytesReceived.Load(), BytesSent: pc.bytesSent.Load(), Truncated: pc.truncated.Load(),
		ReadErrors: pc.readErrs.Load(), WriteErrors: pc.writeErrs.Load(), QueueFull: pc.queueFull.Load(),
		KernelDrops: pc.drops.Load()}
	if np, ok := pc.h.(*NetPacketConn); ok {
		st.Dropped = np.dropped.Load()
	}
	pc.mu.Lock()
	if !pc.fdGone {
		if d, err := sock.SocketDrops(pc.fd); err == nil {
			st.KernelDrops = uint64(d)
		}
	}
	pc.mu.Unlock()
	return st
}

// SetReadBuffer sets the socket's receive buffer, SO_RCVBUF (the kernel
// doubles n and caps it at net.core.rmem_max): the datagrams that can wait
// while the loop is busy. Safe for concurrent use.
func (pc *PacketConn) SetReadBuffer(n int) error { return pc.setBuffer(false, n) }

// SetWriteBuffer sets the socket's send buffer, SO_SNDBUF. Safe for
// concurrent use.
func (pc *PacketConn) SetWriteBuffer(n int) error { return pc.setBuffer(true, n) }

func (pc *PacketConn) setBuffer(write bool, n int) error {
	if n < 0 {
		return invalidOption("buffer %d (expected >= 0)", n)
	}
	return pc.control("setsockopt", func(fd int) error { return setBuffer(fd, write, n) })
}

// control runs f on the socket's fd, holding a reference that keeps the fd
// open (its number cannot be reused underneath f): a close meanwhile is
// carried out by the last reference's release. f runs without a lock, so it
// may call the socket's methods. An error of f is wrapped as a
// *net.OpError of call.
func (pc *PacketConn) control(call string, f func(fd int) error) error {
	pc.mu.Lock()
	if pc.fdGone {
		pc.mu.Unlock()
		return opError("set", pc.network, "", pc.laddr, pc.raddr, net.ErrClosed)
	}
	pc.fdRefs++
	pc.mu.Unlock()
	err := f(pc.fd)
	pc.mu.Lock()
	pc.fdRefs--
	last := pc.fdGone && pc.fdRefs == 0
	pc.mu.Unlock()
	if last {
		unix.Close(pc.fd)
	}
	if err != nil {
		return opError("set", pc.network, call, pc.laddr, pc.raddr, err)
	}
	return nil
}

// SyscallConn returns a syscall.RawConn whose Control runs a function on
// the socket's fd (to read or set socket options; the fd stays open while
// it runs). After the function, Control reads back the options that ask
// for control messages on received datagrams (IP_RECVTOS, IP_PKTINFO,
// IPV6_RECVTCLASS, IPV6_RECVPKTINFO, UDP_GRO, SO_TIMESTAMP, …); when they
// changed, it has the loop re-arm the receive with room for those
// messages (or without it) and, off the loops, waits until it has, so
// that the datagrams that arrive after it returns carry them. The loop
// owns the socket's reads and writes, so the RawConn's Read and Write
// return a *net.OpError wrapping an error that says so, without calling
// their function: code that reads through them (golang.org/x/net's
// ipv4.PacketConn.ReadBatch) must use NetPacketConn's own methods.
func (pc *PacketConn) SyscallConn() (syscall.RawConn, error) { return packetRawConn{pc}, nil }

// packetRawConn is a PacketConn's syscall.RawConn.
type packetRawConn struct{ pc *PacketConn }

func (rc packetRawConn) Control(f func(fd uintptr)) error {
	changed := false
	err := rc.pc.control("", func(fd int) error {
		f(uintptr(fd))
		changed = rc.pc.noteReceiveOptions(fd)
		return nil
	})
	if changed {
		rc.pc.applyReceiveOptions()
	}
	return err
}

func (rc packetRawConn) Read(func(fd uintptr) bool) error {
	return opError("read", rc.pc.network, "", rc.pc.laddr, rc.pc.raddr, errRawIO)
}

func (rc packetRawConn) Write(func(fd uintptr) bool) error {
	return opError("write", rc.pc.network, "", rc.pc.laddr, rc.pc.raddr, errRawIO)
}

// errRawIO is the error of a RawConn's Read and Write: the loop owns the
// socket's I/O.
var errRawIO = errors.New("conn: the loop owns the socket's reads and writes; RawConn.Read and Write are not supported")

// arm starts the receive. Runs on the loop.
func (pc *PacketConn) arm() {
	if pc.closing {
		return
	}
	room := pc.receiveRoom()
	id, err := pc.l.IO().RecvmsgProvidedControl(pc.fd, 0, room, (*packetRecv)(pc))
	if err != nil {
		if errors.Is(err, loop.ErrClosed) {
			pc.closeNow(net.ErrClosed) // the loop is shutting down
			return
		}
		// The loop could not take the op now (its op table or submission
		// queue full): reported, and tried again shortly, as a stream
		// server retries its accepts; the datagrams wait in the socket.
		pc.readErrs.Add(1)
		pc.report(&DatagramError{Op: "read", Err: err})
		if _, serr := pc.l.Schedule(rearmDelay, pc.arm); serr != nil {
			pc.closeNow(net.ErrClosed)
		}
		return
	}
	pc.recvID, pc.recvArmed = id, true
	pc.armedWithRoom(room)
}

// packetRecv is a PacketConn seen as its receive's Completer.
type packetRecv PacketConn

// Complete handles one completion of the receive: a datagram, or the
// receive's end.
func (r *packetRecv) Complete(c *loop.Completion) {
	pc := (*PacketConn)(r)
	final := !c.More()
	if final {
		pc.recvArmed = false
	}
	switch {
	case pc.closing && c.Res >= 0:
		// Closed: the datagrams still arriving are not delivered.
	case c.Res >= 0 && c.MsgFlags&unix.MSG_TRUNC != 0:
		pc.truncated.Add(1)
		from := pc.source(c.Name)
		pc.logTruncated(from, int(c.Res))
		pc.report(&DatagramError{Op: "read", Addr: from, Len: int(c.Res), Err: ErrTruncated})
	case c.Res >= 0:
		pc.received.Add(1)
		pc.bytesReceived.Add(uint64(c.Res))
		pc.deliver(c.Data, pc.source(c.Name), c.Control, c.MsgFlags&unix.MSG_CTRUNC != 0)
	case pc.closing:
		// The receive ends as the socket closes.
	case c.Quarantined:
		// Given up at a ring rebuild: a datagram the kernel took for it
		// may be gone, and that must not pass silently.
		pc.readErrs.Add(1)
		pc.report(&DatagramError{Op: "read", Err: loop.ErrGivenUp})
	case c.Res == -int32(unix.ECANCELED), c.Res == -int32(unix.EAGAIN), c.Res == -int32(unix.EINTR):
		// The receive ended without taking a datagram: it is armed
		// again below. While the socket is open, the loop's shutdown
		// cancels it (then the loop refuses the new receive and the
		// socket closes, arm), and so does a change of the room for
		// control messages (rearmForRoom).
	case softDatagramErr(unix.Errno(-c.Res)):
		pc.readErrs.Add(1)
		pc.report(&DatagramError{Op: "read", Err: os.NewSyscallError("recvmsg", unix.Errno(-c.Res))})
	default:
		pc.closeNow(opError("read", pc.network, "recvmsg", pc.laddr, pc.raddr, unix.Errno(-c.Res)))
		return
	}
	if final {
		if pc.closing {
			pc.maybeFinish()
			return
		}
		pc.arm()
	}
}

// logTruncated logs the first datagram of the socket that was too long
// for the loop's datagram buffers: a warning, once per socket, since the
// next ones likely come from the same sender and are counted
// (PacketStats.Truncated). Runs on the loop.
func (pc *PacketConn) logTruncated(from Addr, n int) {
	if pc.truncLogged {
		return
	}
	pc.truncLogged = true
	pc.l.Logger().Warn("conn: datagram dropped: longer than the loop's datagram buffers hold (loop.WithDatagramBuffers); later ones are only counted in Truncated",
		"loop", pc.l.String(), "local", pc.laddr, "from", from, "len", n, "max", pc.MaxDatagram())
}

// softDatagramErr reports whether a receive or send error leaves the
// socket usable: an ICMP error reported on a connected socket, a datagram
// the kernel would not take, a full buffer.
func softDatagramErr(e unix.Errno) bool {
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENETDOWN,
		unix.EMSGSIZE, unix.ENOBUFS, unix.EAGAIN, unix.EACCES, unix.EPERM, unix.EADDRNOTAVAIL,
		unix.EAFNOSUPPORT, unix.EINVAL, unix.ENOENT, unix.EDESTADDRREQ, unix.EISCONN, unix.ENOTCONN:
		return true
	}
	return false
}

// logPanic, deferred around a handler callback, logs and counts a panic
// (RecoveredPanics). The socket goes on serving: one datagram's handling
// failed, not the socket.
func (pc *PacketConn) logPanic(callback string) {
	if r := recover(); r != nil {
		panics.Add(1)
		pc.l.Logger().Error("conn: datagram handler panicked; the socket goes on", "loop", pc.l.String(),
			"callback", callback, "panic", r, "local", pc.laddr, "stack", stackValue(debug.Stack()))
	}
}

// deliver runs OnPacket under logPanic (onPacketControl, with the
// datagram's control messages, for a handler that takes them).
func (pc *PacketConn) deliver(data []byte, from Addr, control []byte, ctrunc bool) {
	defer pc.logPanic("OnPacket")
	if pc.ctlHandler != nil {
		pc.ctlHandler.onPacketControl(pc, data, from, control, ctrunc)
		return
	}
	pc.l.Running(&runOnPacket)
	pc.h.OnPacket(pc, data, from)
}

// report hands a failure that keeps the socket open to the error handler.
func (pc *PacketConn) report(err *DatagramError) {
	if pc.errHandler == nil {
		return
	}
	defer pc.logPanic("OnPacketError")
	pc.l.Running(&runOnPacketError)
	pc.errHandler.OnPacketError(pc, err)
}

// source converts a datagram's raw source address. A Unix name seen just
// before is not converted again, so a steady peer costs no allocation.
func (pc *PacketConn) source(name []byte) Addr {
	if ap, ok := sock.ParseAddrPort(name); ok {
		return Addr{ap: ap}
	}
	n, abstract, ok := sock.UnixName(name)
	if !ok || len(n) == 0 && !abstract {
		return Addr{unix: true} // unnamed
	}
	if string(n) != string(pc.lastSrcName) || abstract != pc.lastSrcAbstract || pc.lastSrc == "" {
		pc.lastSrcName, pc.lastSrcAbstract = append(pc.lastSrcName[:0], n...), abstract
		if abstract {
			pc.lastSrc = "@" + string(n)
		} else {
			pc.lastSrc = string(n)
		}
	}
	return Addr{name: pc.lastSrc, unix: true}
}

// WriteTo sends b as one datagram to addr (a *net.UDPAddr, *net.UnixAddr
// or Addr). It copies b and returns len(b) once the datagram is queued; the
// kernel's verdict on it (EMSGSIZE, …) goes to OnPacketError. Safe for
// concurrent use; called on the socket's loop (from OnPacket), the
// datagram goes out at the end of the turn.
func (pc *PacketConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	to, err := pc.destination(addr)
	if err != nil {
		return 0, err
	}
	return pc.WriteToAddr(b, to)
}

// destination converts a write's net.Addr (a *net.UDPAddr, *net.UnixAddr
// or Addr) to an Addr.
func (pc *PacketConn) destination(addr net.Addr) (Addr, error) {
	switch a := addr.(type) {
	case *net.UDPAddr:
		if a == nil {
			break
		}
		ap := a.AddrPort()
		if len(a.IP) == 0 && pc.family != unix.AF_UNIX {
			// As package net: no IP is the unspecified address, which
			// the kernel delivers to this host.
			ip := netip.IPv4Unspecified()
			if pc.family == unix.AF_INET6 {
				ip = netip.IPv6Unspecified()
			}
			ap = netip.AddrPortFrom(ip, uint16(a.Port))
		}
		return Addr{ap: ap}, nil
	case *net.UnixAddr:
		if a == nil {
			break
		}
		return UnixAddr(a.Name), nil
	case Addr:
		return a, nil
	}
	return Addr{}, pc.writeError(addr, fmt.Errorf("conn: datagram destination %v (%T): want a *net.UDPAddr, *net.UnixAddr or conn.Addr", addr, addr))
}

// WriteToAddrPort sends b as one datagram to ap, as WriteTo does.
func (pc *PacketConn) WriteToAddrPort(b []byte, ap netip.AddrPort) (int, error) {
	return pc.WriteToAddr(b, Addr{ap: ap})
}

// WriteToAddr sends b as one datagram to a, as WriteTo does; replying to
// OnPacket's from this way allocates nothing.
func (pc *PacketConn) WriteToAddr(b []byte, a Addr) (int, error) {
	if err := pc.checkDestination(a); err != nil {
		return 0, err
	}
	return pc.queue(b, a, false)
}

// checkDestination fails a write to an invalid destination.
func (pc *PacketConn) checkDestination(a Addr) error {
	if !a.IsValid() {
		return pc.writeError(a, errors.New("conn: invalid datagram destination"))
	}
	return nil
}

// Write sends b as one datagram to the peer of a socket DialPacket made.
func (pc *PacketConn) Write(b []byte) (int, error) {
	if err := pc.checkConnected(); err != nil {
		return 0, err
	}
	return pc.queue(b, Addr{}, false)
}

// checkConnected fails a write without a destination on a socket that has
// no peer.
func (pc *PacketConn) checkConnected() error {
	if !pc.connected {
		return pc.writeError(nil, ErrNotConnected)
	}
	return nil
}

func (pc *PacketConn) writeError(to net.Addr, err error) error {
	if a, ok := to.(Addr); ok && !a.IsValid() {
		to = nil
	}
	return &net.OpError{Op: "write", Net: pc.network, Source: pc.laddr, Addr: to, Err: err}
}

// errQueueFullWait is what queue returns to a write that will wait for
// room: the queue was full, and the handler's onQueueRoom will say when
// it has room again.
var errQueueFullWait = errors.New("conn: datagram queue full; waiting for room")

// queue copies b into the outbound queue (to the connected peer when to
// is the zero Addr) and has it flushed at the end of the loop's turn. A
// full queue refuses the datagram: with ErrQueueFull, counted in
// QueueFull; or, when wait is set, with errQueueFullWait, not counted,
// and the handler's onQueueRoom runs once the queue is down to half.
func (pc *PacketConn) queue(b []byte, to Addr, wait bool) (int, error) {
	return pc.queueMsg(b, nil, to, wait)
}

// queueMsg is queue for a datagram with control messages (ctl, copied
// too).
func (pc *PacketConn) queueMsg(b, ctl []byte, to Addr, wait bool) (int, error) {
	var d dgramOut
	if to.IsValid() {
		n, err := pc.putAddr(d.to[:], to)
		if err != nil {
			return 0, pc.writeError(to, err)
		}
		d.toLen, d.toValid = uint8(n), to
	}
	pc.mu.Lock()
	if pc.closeReq {
		pc.mu.Unlock()
		return 0, pc.writeError(to, net.ErrClosed)
	}
	if pc.out.n >= pc.queueMax {
		if wait && pc.roomHandler != nil {
			pc.roomWanted = true
			pc.mu.Unlock()
			return 0, errQueueFullWait
		}
		pc.mu.Unlock()
		pc.queueFull.Add(1)
		return 0, pc.writeError(to, ErrQueueFull)
	}
	d.buf = pc.bufLocked(len(b))
	copy(d.buf, b)
	if len(ctl) > 0 {
		d.ctl = pc.ctlBufLocked(len(ctl))
		copy(d.ctl, ctl)
	}
	pc.out.push(d)
	kick := !pc.flushQueued
	pc.flushQueued = true
	pc.mu.Unlock()
	if kick {
		if err := pc.l.ExecuteAfterTurn(pc.flushFn); err != nil {
			pc.mu.Lock()
			pc.flushQueued = false
			pc.mu.Unlock()
			if pc.l.InLoop() {
				pc.flush() // the loop is terminating: its close drops what is left
			}
		}
	}
	return len(b), nil
}

// sendDirect sends b, with the control messages ctl, to to (the zero
// Addr: the connected peer) from the calling goroutine, with one
// non-blocking sendmsg, when the socket's sends are idle (nothing queued,
// nothing with the loop) and its loop waits between turns: queueing would
// cost the loop a wakeup and the datagram a hand-off. It reports whether
// it took the datagram; it leaves it to the queue when the socket is busy
// or closed, or had no room for it (EAGAIN, ENOBUFS), so that waiting for
// room stays the queue's. The kernel's other verdicts are what the loop's
// send would have got: counted in WriteErrors, an EIO handed back as
// refused, for the caller to note, as OnPacketError notes the loop's.
// Only on io_uring loops (pc.direct); off the loops only.
func (pc *PacketConn) sendDirect(b, ctl []byte, to Addr) (took, refusedEIO bool) {
	if !pc.direct || !pc.l.Idle() || pc.handed.Load() > 0 {
		return false, false
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	// fdGone is set under mu, so the fd stays open while it is held.
	if pc.closeReq || pc.fdGone || pc.out.n > 0 || pc.flushQueued || pc.handed.Load() > 0 {
		return false, false
	}
	msg := &pc.directMsg // left zeroed by the last call
	if to.IsValid() {
		n, err := pc.putAddr(pc.directTo[:], to)
		if err != nil {
			return false, false // the queue reports it
		}
		msg.Name, msg.Namelen = &pc.directTo[0], uint32(n)
	}
	if len(b) > 0 {
		pc.directIov = unix.Iovec{Base: &b[0]}
		pc.directIov.SetLen(len(b))
		msg.Iov = &pc.directIov
		msg.SetIovlen(1)
	}
	if len(ctl) > 0 {
		msg.Control = &ctl[0]
		msg.SetControllen(len(ctl))
	}
	n, err := sock.SendmsgNow(pc.fd, msg, unix.MSG_NOSIGNAL)
	*msg, pc.directIov = unix.Msghdr{}, unix.Iovec{} // keep no pointer to the caller's buffers
	switch {
	case err == unix.EAGAIN || err == unix.ENOBUFS:
		return false, false
	case err == nil && n == len(b):
		pc.sent.Add(1)
		pc.bytesSent.Add(uint64(n))
	default:
		pc.writeErrs.Add(1)
		return true, err == unix.EIO
	}
	return true, false
}

// putAddr writes a destination as the raw sockaddr the socket's family
// takes.
func (pc *PacketConn) putAddr(dst []byte, to Addr) (int, error) {
	if to.unix {
		if pc.family != unix.AF_UNIX {
			return 0, fmt.Errorf("conn: a Unix address on a %s socket", pc.network)
		}
		return sock.PutUnixName(dst, to.name)
	}
	if pc.family == unix.AF_UNIX {
		return 0, fmt.Errorf("conn: an IP address on a unixgram socket")
	}
	return sock.PutAddrPort(dst, to.ap, pc.family)
}

// bufLocked returns a buffer of n bytes for a queued datagram: up to
// 2 KiB a spare one of the socket's when it has one, up to 64 KiB (large
// datagrams, segmented writes) one from a pool all sockets share, so that
// a bulk sender's queue reuses its buffers instead of allocating and
// clearing 64 KiB for every write. Caller holds pc.mu.
func (pc *PacketConn) bufLocked(n int) []byte {
	switch {
	case n <= smallDgram:
		if k := len(pc.free); k > 0 {
			b := pc.free[k-1]
			pc.free = pc.free[:k-1]
			return b[:n]
		}
		return make([]byte, n, smallDgram)
	case n <= largeDgram:
		return largeBufs.Get().(*[largeDgram]byte)[:n]
	}
	return make([]byte, n)
}

// The spare buffers' sizes.
const (
	smallDgram = 2048
	largeDgram = 64 << 10
)

// largeBufs holds the large datagram buffers no queue uses; the garbage
// collector frees those left unused.
var largeBufs = sync.Pool{New: func() any { return new([largeDgram]byte) }}

// putBuf keeps a sent datagram's buffer for reuse.
func (pc *PacketConn) putBuf(b []byte) {
	switch cap(b) {
	case smallDgram:
		pc.mu.Lock()
		if len(pc.free) < min(pc.queueMax, maxSendsInFlight*2) {
			pc.free = append(pc.free, b[:0])
		}
		pc.mu.Unlock()
	case largeDgram:
		largeBufs.Put((*[largeDgram]byte)(b[:largeDgram]))
	}
}

// fifo is a queue in a ring buffer that doubles when full.
type fifo[T any] struct {
	q       []T
	head, n int
}

func (f *fifo[T]) push(v T) {
	if f.n == len(f.q) {
		nq := make([]T, max(16, 2*len(f.q)))
		for i := range f.n {
			nq[i] = f.q[(f.head+i)%len(f.q)]
		}
		f.q, f.head = nq, 0
	}
	f.q[(f.head+f.n)%len(f.q)] = v
	f.n++
}

// pop takes the first entry out; the queue must not be empty.
func (f *fifo[T]) pop() T {
	v := f.q[f.head]
	var zero T
	f.q[f.head] = zero
	f.head = (f.head + 1) % len(f.q)
	f.n--
	return v
}

// flush hands queued datagrams to the loop, one SendTo each (the ones
// the socket refused for now first), up to maxInflight in flight;
// completions continue it. A blocked socket sends nothing until it is
// writable. Once the queue, found full by a write that waits, is down to
// half, the handler hears of it (onQueueRoom). Runs on the loop.
func (pc *PacketConn) flush() {
	pc.mu.Lock()
	pc.flushQueued = false
	pc.mu.Unlock()
	room := false
	for pc.inflight < pc.maxInflight && !pc.fdClosed && !pc.blocked {
		var d dgramOut
		if pc.stalled.n > 0 {
			d = pc.stalled.pop()
		} else {
			pc.mu.Lock()
			if pc.out.n == 0 {
				pc.mu.Unlock()
				break
			}
			d = pc.out.pop()
			pc.handed.Add(1)
			if pc.roomWanted && pc.out.n <= pc.queueMax/2 {
				pc.roomWanted, room = false, true
			}
			pc.mu.Unlock()
		}
		s := pc.sendRecord()
		s.dgram = d
		if _, err := pc.l.IO().SendToControl(pc.fd, d.buf, d.to[:d.toLen], d.ctl, pc.sendFlags, s); err != nil {
			s.dgram = dgramOut{}
			pc.writeErrs.Add(1)
			pc.handed.Add(-1)
			pc.sends = append(pc.sends, s)
			pc.putDgram(d)
			if errors.Is(err, loop.ErrClosed) {
				break
			}
			pc.report(&DatagramError{Op: "write", Addr: d.toValid, Len: len(d.buf), Err: err})
			continue
		}
		pc.inflight++
	}
	if room {
		pc.roomHandler.onQueueRoom(pc)
	}
	if pc.closing {
		pc.maybeFinish()
	}
}

// queueRoomHandler is implemented by a handler whose writers wait while
// the outbound queue is full (NetPacketConn). onQueueRoom runs on the
// loop once the queue, found full by such a write, is down to half.
type queueRoomHandler interface {
	onQueueRoom(pc *PacketConn)
}

func (pc *PacketConn) sendRecord() *dgramSend {
	if k := len(pc.sends); k > 0 {
		s := pc.sends[k-1]
		pc.sends = pc.sends[:k-1]
		return s
	}
	return &dgramSend{pc: pc}
}

// Complete handles a SENDMSG's result.
func (s *dgramSend) Complete(c *loop.Completion) {
	pc := s.pc
	pc.inflight--
	d := s.dgram
	s.dgram = dgramOut{}
	if !c.Quarantined {
		pc.sends = append(pc.sends, s)
		if c.Res < 0 && pc.refusedForNow(c.Res) {
			pc.stall(d)
			return
		}
	}
	pc.handed.Add(-1)
	switch {
	case c.Quarantined:
		// Given up at a ring rebuild: whether it went out is unknown.
		pc.writeErrs.Add(1)
		pc.report(&DatagramError{Op: "write", Addr: d.toValid, Len: len(d.buf), Err: loop.ErrGivenUp})
	case c.Res >= 0 && int(c.Res) == len(d.buf):
		pc.sent.Add(1)
		pc.bytesSent.Add(uint64(c.Res))
		pc.waited, pc.retryDelay = false, 0
	case c.Res >= 0:
		// A datagram goes whole or not at all: a shorter send (an empty
		// one above all) is never taken for a success.
		pc.writeErrs.Add(1)
		pc.report(&DatagramError{Op: "write", Addr: d.toValid, Len: len(d.buf), Err: io.ErrShortWrite})
	case c.Res == -int32(unix.ECANCELED):
		// The loop is going away: dropped, and counted, as the
		// datagrams still queued are.
		pc.writeErrs.Add(1)
	default:
		pc.writeErrs.Add(1)
		pc.report(&DatagramError{Op: "write", Addr: d.toValid, Len: len(d.buf), Err: os.NewSyscallError("sendmsg", unix.Errno(-c.Res))})
	}
	if !c.Quarantined {
		pc.putDgram(d)
	}
	pc.sendsGoOn()
}

// sendsGoOn continues the sends after a completion: the close, the wait
// of a blocked socket once nothing is in flight, or the flush.
func (pc *PacketConn) sendsGoOn() {
	switch {
	case pc.closing:
		pc.maybeFinish()
	case pc.blocked:
		if pc.inflight == 0 {
			pc.waitWritable()
		}
	default:
		pc.mu.Lock()
		more := pc.out.n > 0
		pc.mu.Unlock()
		if more || pc.stalled.n > 0 {
			pc.flush()
		}
	}
}

// refusedForNow reports whether a send ended without sending its
// datagram for a reason that passes: no room in the socket or its Unix
// peer (-EAGAIN), a signal, a cancel nobody asked for while the loop runs.
func (pc *PacketConn) refusedForNow(res int32) bool {
	switch -res {
	case int32(unix.EAGAIN), int32(unix.EINTR):
		return true
	case int32(unix.ECANCELED):
		return pc.l.State() < loop.StateShuttingDown
	}
	return false
}

// stall keeps d, which the socket refused for now, to be sent again
// first, and blocks the socket until it is writable. A closing socket
// drops it instead, with everything still queued.
func (pc *PacketConn) stall(d dgramOut) {
	if pc.closing {
		pc.writeErrs.Add(1)
		pc.handed.Add(-1)
		pc.putDgram(d)
		pc.dropQueued()
		pc.maybeFinish()
		return
	}
	if pc.waited {
		// Refused right after a wait: writability did not mean room.
		pc.retryDelay = min(max(2*pc.retryDelay, minRetryDelay), maxRetryDelay)
		pc.waited = false
	}
	pc.stalled.push(d)
	pc.blocked = true
	pc.sendsGoOn()
}

// waitWritable arms a blocked socket's wait: PollWritable, or the retry
// timer once a send refused right after a wait showed that writability
// does not mean room here.
func (pc *PacketConn) waitWritable() {
	if pc.waitArmed {
		return
	}
	if pc.retryDelay == 0 {
		if id, err := pc.l.IO().PollWritable(pc.fd, (*packetWritable)(pc)); err == nil {
			pc.waitArmed, pc.waitID = true, id
			return
		}
		pc.retryDelay = minRetryDelay // the loop could not take the poll now
	}
	t, err := pc.l.Schedule(pc.retryDelay, pc.retryFn)
	if err != nil {
		pc.closeNow(net.ErrClosed) // the loop is shutting down
		return
	}
	pc.waitArmed, pc.waitTimer = true, t
}

// packetWritable is a PacketConn seen as its PollWritable's Completer.
type packetWritable PacketConn

// Complete ends the wait: the socket is writable (or failed, which the
// send handed over again reports), or Close canceled the wait.
func (w *packetWritable) Complete(*loop.Completion) { (*PacketConn)(w).retryStalled() }

// retryStalled ends a blocked socket's wait: the datagrams it refused go
// out again, first. On a closing socket they are dropped.
func (pc *PacketConn) retryStalled() {
	pc.waitArmed, pc.waitTimer = false, nil
	if pc.closing {
		pc.dropQueued()
		pc.maybeFinish()
		return
	}
	pc.blocked, pc.waited = false, true
	pc.flush()
}

// cancelWait ends a blocked socket's wait, if one is armed: at once for
// the timer; the PollWritable's final completion follows.
func (pc *PacketConn) cancelWait() {
	switch {
	case !pc.waitArmed:
	case pc.waitTimer != nil:
		if pc.waitTimer.Stop() {
			pc.waitArmed, pc.waitTimer = false, nil
		}
	case !cancelOp(pc.l, pc.waitID):
		pc.waitArmed = false // it had ended
	}
}

// dropQueued drops the datagrams not yet handed to the kernel, counting
// each as a write error: the socket closes and cannot take them now.
func (pc *PacketConn) dropQueued() {
	n := uint64(pc.stalled.n)
	pc.handed.Add(-int32(pc.stalled.n))
	for pc.stalled.n > 0 {
		pc.stalled.pop()
	}
	pc.blocked = false
	pc.mu.Lock()
	n += uint64(pc.out.n)
	for pc.out.n > 0 {
		pc.out.pop()
	}
	pc.mu.Unlock()
	pc.writeErrs.Add(n)
}

// Close closes the socket: later writes fail with net.ErrClosed, the
// receive ends, and OnPacketClose follows. The datagrams already queued
// are still handed to the kernel while the socket takes them; once it
// refuses one for want of room (a Unix peer that does not read), that one
// and all behind it are dropped and counted in Stats().WriteErrors, so
// that Close never waits for a peer. Safe for concurrent use; Done reports
// the end. Closing again returns net.ErrClosed.
func (pc *PacketConn) Close() error {
	pc.mu.Lock()
	if pc.closeReq {
		pc.mu.Unlock()
		return &net.OpError{Op: "close", Net: pc.network, Source: pc.laddr, Addr: pc.raddr, Err: net.ErrClosed}
	}
	pc.closeReq = true
	pc.mu.Unlock()
	if pc.l.InLoop() {
		pc.closeNow(nil)
		return nil
	}
	if err := executeRetrying(pc.l, func() { pc.closeNow(nil) }); err != nil && loop.Current() == nil {
		// The loop is ending: its shutdown hook closes the socket.
		<-pc.done
	}
	return nil
}

// loopShutdown is the loop's shutdown hook: the socket closes with
// net.ErrClosed.
func (pc *PacketConn) loopShutdown() { pc.closeNow(net.ErrClosed) }

// closeNow starts closing on the loop: it cancels the receive, sends what
// is queued (drops it when the socket is blocked, or err is set), and
// closes the fd once no op is left. err is what OnPacketClose reports.
func (pc *PacketConn) closeNow(err error) {
	if pc.closing {
		return
	}
	pc.closing, pc.closeErr = true, err
	pc.mu.Lock()
	pc.closeReq = true
	pc.mu.Unlock()
	pc.cancelRecv()
	if err == nil && !pc.blocked {
		pc.flush() // what was queued before Close still goes out
	} else {
		pc.cancelWait()
		pc.dropQueued()
	}
	pc.maybeFinish()
}

// cancelRecv cancels the armed receive; its final completion ends it.
func (pc *PacketConn) cancelRecv() {
	if pc.recvArmed && !cancelOp(pc.l, pc.recvID) {
		pc.recvArmed = false // it had ended
	}
}

// maybeFinish closes the fd once the receive, every send and the wait
// for writability have ended, then reports the close.
func (pc *PacketConn) maybeFinish() {
	if pc.fdClosed || pc.recvArmed || pc.inflight > 0 || pc.waitArmed {
		return
	}
	pc.mu.Lock()
	more := pc.out.n > 0 || pc.stalled.n > 0
	pc.mu.Unlock()
	if pc.closeErr == nil && more && !pc.blocked && pc.l.State() < loop.StateShuttingDown {
		// More was queued than may be in flight: the flush goes on (and
		// comes back here when it has handed everything over).
		pc.flush()
		return
	}
	pc.dropQueued() // the socket or its loop is gone
	pc.closeFd()
	if pc.unhook != nil {
		pc.unhook()
	}
	if pc.closeHandler != nil {
		func() {
			defer pc.logPanic("OnPacketClose")
			pc.l.Running(&runOnPacketClose)
			pc.closeHandler.OnPacketClose(pc, pc.closeErr)
		}()
	}
	untrack(live.packets, pc)
	close(pc.done)
}

// closeFd closes the socket's fd (and removes a bound Unix socket's path)
// once.
func (pc *PacketConn) closeFd() {
	if pc.fdClosed {
		return
	}
	pc.fdClosed = true
	if d, err := sock.SocketDrops(pc.fd); err == nil {
		pc.drops.Store(uint64(d))
	}
	pc.mu.Lock()
	pc.fdGone = true
	held := pc.fdRefs > 0 // the last control call closes it
	pc.mu.Unlock()
	if !held {
		unix.Close(pc.fd)
	}
	if pc.path != "" {
		_ = os.Remove(pc.path)
	}
}
