package conn

import (
	"fmt"
	"math"
	"net"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// An Option configures Listen or Dial. Options are applied in order; later
// ones win. Zero values mean the default, and values that cannot work make
// Listen or Dial return an error wrapping ErrInvalidOption, never panic.
// Options that only make sense for a listener (WithAcceptor, WithReusePort,
// WithBacklog) are ignored by Dial.
type Option func(*config)

// Defaults.
const (
	// DefaultBacklog is the listen(2) backlog; the kernel caps it at
	// net.core.somaxconn.
	DefaultBacklog = 4096
	// DefaultLowWaterMark and DefaultHighWaterMark bound a connection's
	// outbound buffer: above the high mark the connection reports itself
	// unwritable until it drains to the low mark (Netty's defaults).
	DefaultLowWaterMark  = 32 << 10
	DefaultHighWaterMark = 64 << 10
	// DefaultLinger bounds how long Close waits for the kernel to take
	// more of the queued outbound bytes before it drops them and closes
	// the fd anyway (see WithLinger).
	DefaultLinger = 2 * time.Second
	// DefaultInboundLimit caps the bytes a ReadHandler leaves unconsumed
	// (WithInboundLimit): 1 MiB, a frame as long as real protocols send
	// in one piece (a Redis value of 512 KiB, an HTTP body of 1 MiB). The
	// loop's budget of kept bytes (loop.WithBufferBudget) bounds what
	// many connections keep together.
	DefaultInboundLimit = 1 << 20
	// netInflightLimit is the limit of the connection under a NetConn: it
	// holds only the bytes already on their way when the NetConn pauses
	// at its own bound (hard-coded).
	netInflightLimit = 4 << 20
	// DefaultOutboundLimit caps the bytes a connection queues for sending
	// (WithOutboundLimit): a Write made while more is queued fails with
	// ErrOutboundLimit and ends the connection. 16 MiB: the answers to
	// one pipelined batch (16 values of 600 KB) fit; reading pauses long
	// before (at 2 MiB queued, or the high-water mark when the loop
	// queues more than its budget).
	DefaultOutboundLimit = 16 << 20
	// MaxKeepAlive is the longest keepalive idle time and interval the
	// kernel takes (TCP_KEEPIDLE and TCP_KEEPINTVL: 32,767 s).
	MaxKeepAlive = 32767 * time.Second
	// DefaultKeepAlive is the keepalive idle time and probe interval of
	// a TCP connection (WithKeepAlive), and DefaultKeepAliveCount the
	// probes that go unanswered before the kernel drops it: package net's
	// defaults.
	DefaultKeepAlive      = 15 * time.Second
	DefaultKeepAliveCount = 9
	// maxKeepAliveCount is the most keepalive probes the kernel takes
	// (TCP_KEEPCNT).
	maxKeepAliveCount = 127
	// maxBufferOption caps WithReadBuffer and WithWriteBuffer (hard-coded:
	// 1 GiB is far above any kernel's wmem_max/rmem_max default).
	maxBufferOption = 1 << 30
)

// config holds every setting. defaultConfig is the only place defaults live.
type config struct {
	acceptor        *loop.Loop
	dialLoop        *loop.Loop
	connectTimeout  time.Duration
	reusePort       bool
	backlog         int
	nagle           bool // Nagle's algorithm on: TCP_NODELAY off (the zero value keeps it off)
	keepAlive       keepAlive
	readBuf         int
	writeBuf        int
	lowWater        int
	highWater       int
	readTimeout     time.Duration
	idleTimeout     time.Duration
	linger          time.Duration
	halfClose       bool
	pauseUnwritable pauseMode // WithPauseReadWhenUnwritable
	outboundLimit   int       // bytes queued above which a Write fails (WithOutboundLimit)
	inboundLimit    int
	netInbound      int          // WithInboundLimit as given (0: each kind's default), for the adapters
	datagramQueue   int          // datagrams a PacketConn queues (WithDatagramQueue)
	udpSegment      int          // UDP_SEGMENT size (WithUDPSegment)
	netListener     *NetListener // ListenNet's listener, which its NetConns join on open
	netConn         bool         // the connection under a NetConn (asNetConn)
	flow            *flowShared  // what the connections of this Listen or Dial share for flow control
}

func defaultConfig() config {
	return config{
		backlog:       DefaultBacklog,
		lowWater:      DefaultLowWaterMark,
		highWater:     DefaultHighWaterMark,
		datagramQueue: DefaultDatagramQueue,
		linger:        DefaultLinger,

		outboundLimit: DefaultOutboundLimit,
	}
}

// WithAcceptor sets the loop that accepts connections for Listen. nil (the
// default) means workers.Next() at the time Listen is called. Ignored with
// WithReusePort(true), where every worker loop accepts for itself.
func WithAcceptor(l *loop.Loop) Option { return func(c *config) { c.acceptor = l } }

// WithReusePort makes Listen open one SO_REUSEPORT listener per worker
// loop, each accepting for itself, so a connection lives on the loop that
// accepted it and no hand-off happens (TCP only; default false).
func WithReusePort(on bool) Option { return func(c *config) { c.reusePort = on } }

// WithBacklog sets the listen(2) backlog (default 4096; 0 means the
// default; negative values are rejected). The kernel caps it at
// net.core.somaxconn.
func WithBacklog(n int) Option { return func(c *config) { c.backlog = n } }

// WithNoDelay sets TCP_NODELAY on every TCP connection (default true:
// writes go out as soon as the loop flushes them). Ignored for Unix sockets.
func WithNoDelay(on bool) Option { return func(c *config) { c.nagle = !on } }

// WithKeepAlive sets the TCP keepalive of accepted and dialed
// connections, so that one whose peer vanished without a FIN or a reset
// (a crashed host, a dropped NAT mapping, a pulled cable) is closed
// instead of holding its fd for good. After d without traffic the kernel
// probes the peer every d (whole seconds, rounded up, at most
// MaxKeepAlive); a peer whose host answers with a reset closes the
// connection at the first probe (OnClose reports ECONNRESET), one that
// leaves DefaultKeepAliveCount (9) probes unanswered at the last
// (ETIMEDOUT). 0, the default, means DefaultKeepAlive (15 s), as package
// net's dialers and listeners do: a vanished peer is found within 15 s of
// silence when its host is up, 150 s when it is gone. Negative disables
// keepalive. Ignored for Unix sockets. WithKeepAliveConfig sets the probe
// count too.
//
// Keepalive probes only a connection with nothing unacknowledged in
// flight, and only finds peers that are gone: for live peers that stay
// silent, see WithReadTimeout and WithIdleTimeout.
func WithKeepAlive(d time.Duration) Option {
	return func(c *config) { c.keepAlive = keepAlive{off: d < 0, idle: max(d, 0), interval: max(d, 0)} }
}

// WithKeepAliveConfig sets the TCP keepalive as package net's
// KeepAliveConfig describes it: off unless k.Enable; k.Idle and
// k.Interval (whole seconds, rounded up, at most MaxKeepAlive) and k.Count
// (at most 127) mean DefaultKeepAlive and DefaultKeepAliveCount when 0,
// and leave the kernel's setting (its net.ipv4.tcp_keepalive_* sysctls)
// when negative. WithKeepAlive(d) is the same as Enable: d >= 0, Idle
// and Interval: d. Ignored for Unix sockets.
func WithKeepAliveConfig(k net.KeepAliveConfig) Option {
	return func(c *config) {
		c.keepAlive = keepAlive{off: !k.Enable, idle: k.Idle, interval: k.Interval, count: k.Count}
	}
}

// keepAlive is the TCP keepalive a connection starts with
// (WithKeepAlive, WithKeepAliveConfig). The zero value is the default.
type keepAlive struct {
	off            bool
	idle, interval time.Duration // 0: DefaultKeepAlive; negative: the kernel's
	count          int           // 0: DefaultKeepAliveCount; negative: the kernel's
}

// WithReadBuffer sets SO_RCVBUF (bytes). 0 (the default) keeps the
// kernel's autotuned size; negative values are rejected.
func WithReadBuffer(n int) Option { return func(c *config) { c.readBuf = n } }

// WithWriteBuffer sets SO_SNDBUF (bytes). 0 (the default) keeps the
// kernel's autotuned size; negative values are rejected.
func WithWriteBuffer(n int) Option { return func(c *config) { c.writeBuf = n } }

// WithWaterMarks sets the outbound water marks in bytes (defaults 32 KiB
// and 64 KiB). A connection becomes unwritable when more than high bytes are
// queued and writable again at low or fewer. Both 0 means the defaults;
// otherwise 0 <= low <= high and high > 0 are required. While the
// connection's loop queues more than its budget (loop.WithBufferBudget),
// the marks in effect shrink to half the budget shared among the loop's
// connections that queue bytes (at least 2 KiB), and the low mark to half
// that, if less.
func WithWaterMarks(low, high int) Option {
	return func(c *config) { c.lowWater, c.highWater = low, high }
}

// WithReadTimeout closes a connection with an error wrapping
// os.ErrDeadlineExceeded when no data arrives for d (0, the default, means
// no timeout; negative values are rejected). See Conn.SetReadTimeout.
func WithReadTimeout(d time.Duration) Option { return func(c *config) { c.readTimeout = d } }

// WithIdleTimeout closes a connection with an error wrapping
// os.ErrDeadlineExceeded when it neither receives nor sends for d (0, the
// default, means no timeout; negative values are rejected). See
// Conn.SetIdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.idleTimeout = d } }

// WithLinger bounds how long Close waits for progress while it sends the
// bytes queued by earlier Writes (default 2 s): once no byte has gone out
// for d (the peer stopped reading), a send still in flight is canceled, the
// rest dropped, and OnClose reports the drop with an error wrapping
// os.ErrDeadlineExceeded. A peer that keeps reading gets every byte,
// however long that takes. Unlike the other options, 0 is not the default:
// WithLinger(0) drops whatever is still queued and closes at once (OnClose
// reports nil: the drop was asked for). Negative values are rejected.
// SO_LINGER is not touched.
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// WithLoop sets the loop a dialed connection lives on (Dial and DialAsync;
// ignored by Listen). It must be a loop of the dial's group. nil (the
// default) means the calling loop when Dial runs on a loop of that group,
// else the group's Next().
func WithLoop(l *loop.Loop) Option { return func(c *config) { c.dialLoop = l } }

// WithConnectTimeout bounds a dial's connect (Dial and DialAsync; ignored
// by Listen), on the loop's timer wheel: past it the connect is canceled
// and the dial fails with an error wrapping os.ErrDeadlineExceeded. 0 (the
// default) leaves the bound to the dial's ctx and the kernel's SYN retries.
func WithConnectTimeout(d time.Duration) Option { return func(c *config) { c.connectTimeout = d } }

// WithHalfClose lets a connection outlive the peer's FIN (Netty's
// ALLOW_HALF_CLOSURE). Off (the default), the FIN closes the connection once
// its queued writes are sent (OnClose reports io.EOF). On, the FIN goes to
// a HalfCloseHandler's OnHalfClose and the connection stays open for
// writing until the handler calls Close, or CloseWrite (whose completion
// then closes it with io.EOF).
func WithHalfClose(on bool) Option { return func(c *config) { c.halfClose = on } }

// WithPauseReadWhenUnwritable(true) ties reading to the connection's own
// writability: reading pauses when the outbound buffer rises above the
// high-water mark and resumes when it drains to the low mark, so a peer
// that sends requests and never reads the replies stalls in its own socket
// instead of growing this process's memory, as a server blocked in a
// net.Conn's Write stops reading. The pause acts within one receive: the
// handler is given no more of the received bytes than its answers may take
// before the mark (judged by how much it answered lately), the rest is
// kept and handed to it first when the connection drains. It is
// independent of PauseRead.
//
// Without the option, reading pauses the same way only where a backlog
// builds up: while the connection is unwritable and either its loop's
// connections queue more than their budget for sending in all
// (loop.WithBufferBudget, 1 MiB by default; past it every connection's
// high-water mark shrinks to its share), or the connection itself
// queues more than 2 MiB (or half its outbound limit, if less). Pipelined
// transfers to peers that read then never pause, while a peer that never
// reads holds at most 2 MiB and what one answer adds, and many such peers
// at most the high-water mark and one answer each once their loop is past
// its budget.
//
// WithPauseReadWhenUnwritable(false) never pauses: use it only for a
// handler that watches writability itself (OnWritabilityChanged,
// PauseRead). A connection that must read its peer to let it drain (both
// sides writing more than the socket buffers hold before reading) would
// otherwise stall for good. A NetConn does not pause: its Write blocks
// instead.
func WithPauseReadWhenUnwritable(on bool) Option {
	return func(c *config) {
		c.pauseUnwritable = pauseNever
		if on {
			c.pauseUnwritable = pauseAlways
		}
	}
}

// pauseMode is how writability pauses reading (WithPauseReadWhenUnwritable).
type pauseMode uint8

const (
	pauseWhenBacklogged pauseMode = iota // the default: unwritable, with a backlog (Conn.backlogged)
	pauseAlways                          // unwritable
	pauseNever
)

// WithOutboundLimit bounds the bytes a connection queues for sending
// (default DefaultOutboundLimit, 16 MiB; 0 means the default; negative
// values are rejected): a declared limit, like WithInboundLimit. Write
// never blocks; a Write (or Writev) made while more than n bytes are
// already queued fails with an error wrapping ErrOutboundLimit and queues
// nothing; a LimitHandler hears it in OnLimit, and the connection closes
// with a reset (OnClose reports that error). Reading pauses long before
// (WithPauseReadWhenUnwritable), so only a handler that writes without
// looking at Writable, or goroutines writing faster than the peer reads
// (WriteWait waits for room instead), come near it. A NetConn is not
// limited: its Write blocks while the connection is unwritable.
func WithOutboundLimit(n int) Option { return func(c *config) { c.outboundLimit = n } }

// WithInboundLimit bounds the received bytes a connection holds that its
// reader has not taken yet, so a peer can never make memory grow without
// bound. 0 means each kind's default:
//
//   - A callback connection (Listen, Dial): the bytes a ReadHandler has
//     seen and left unconsumed. A connection past n stops reading, a
//     LimitHandler hears it (OnLimit, where it may write an answer), and
//     it closes with an error wrapping ErrInboundLimit (a frame longer than
//     the protocol allows, or a handler that never consumes). Default
//     DefaultInboundLimit (1 MiB): a protocol whose frames are longer
//     raises it. Bytes kept while reading is paused are not counted here:
//     a paused connection stops receiving within a receive, and its loop's
//     budget (loop.WithBufferBudget) counts them.
//   - A NetConn (ListenNet, DialNet): the bytes no Read has taken. At n
//     the connection stops receiving, so the peer stalls in its own socket,
//     until Read brings the buffer down to n/2. Default DefaultNetInbound
//     (64 KiB); a bound above 1 GiB counts as 1 GiB. The connection under
//     it keeps max(n, 4 MiB) as its own limit, for the bytes already on
//     their way when receiving pauses.
//   - A NetPacketConn (ListenPacketNet, DialPacketNet): the memory the
//     queued datagrams take, each charged its buffer (2 KiB at least) and
//     128 bytes of bookkeeping, so that empty datagrams count too; a
//     datagram that finds the queue full is dropped and counted (Dropped).
//     Default DefaultNetPacketInbound (1 MiB: 481 datagrams of up to 2 KiB).
func WithInboundLimit(n int) Option { return func(c *config) { c.inboundLimit = n } }

// WithDatagramQueue bounds how many datagrams a PacketConn queues before
// the kernel has taken them (default DefaultDatagramQueue; 0 means the
// default): a write past it fails with ErrQueueFull instead of queuing; a
// NetPacketConn's waits for room, as package net's waits for the socket's
// send buffer.
func WithDatagramQueue(n int) Option { return func(c *config) { c.datagramQueue = n } }

// WithUDPSegment turns on UDP generic segmentation offload (UDP_SEGMENT)
// for a UDP PacketConn: a write of more than n bytes goes out as
// consecutive datagrams of n bytes each (the last may be shorter), cut by
// the kernel from one SENDMSG (up to 64 of them and 65,507 bytes; more
// fails with EMSGSIZE). 0 (the default) is off. See docs/udp.md.
func WithUDPSegment(n int) Option { return func(c *config) { c.udpSegment = n } }

// maxUDPPayload is the longest UDP datagram over IPv4.
const maxUDPPayload = 65507

// newConfig applies opts over the defaults and validates the result.
func newConfig(opts []Option) (*config, error) {
	c := defaultConfig()
	c.flow = new(flowShared)
	for _, o := range opts {
		if o == nil {
			return nil, invalidOption("nil Option")
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *config) validate() error {
	d := defaultConfig()
	switch {
	case c.backlog < 0 || c.backlog > math.MaxInt32:
		return invalidOption("backlog %d (expected 0..%d; the kernel caps it at net.core.somaxconn)", c.backlog, math.MaxInt32)
	case c.keepAlive.idle > MaxKeepAlive || c.keepAlive.interval > MaxKeepAlive:
		return invalidOption("keepalive idle %v, interval %v (expected at most %v, the kernel's limit)", c.keepAlive.idle, c.keepAlive.interval, MaxKeepAlive)
	case c.keepAlive.count > maxKeepAliveCount:
		return invalidOption("keepalive count %d (expected at most %d, the kernel's limit)", c.keepAlive.count, maxKeepAliveCount)
	case c.readBuf < 0 || c.readBuf > maxBufferOption:
		return invalidOption("read buffer %d (expected 0..%d)", c.readBuf, maxBufferOption)
	case c.writeBuf < 0 || c.writeBuf > maxBufferOption:
		return invalidOption("write buffer %d (expected 0..%d)", c.writeBuf, maxBufferOption)
	case c.readTimeout < 0:
		return invalidOption("read timeout %v (expected >= 0)", c.readTimeout)
	case c.idleTimeout < 0:
		return invalidOption("idle timeout %v (expected >= 0)", c.idleTimeout)
	case c.outboundLimit < 0:
		return invalidOption("outbound limit %d (expected >= 0; 0 means the default)", c.outboundLimit)
	case c.inboundLimit < 0:
		return invalidOption("inbound limit %d (expected >= 0)", c.inboundLimit)
	case c.connectTimeout < 0:
		return invalidOption("connect timeout %v (expected >= 0)", c.connectTimeout)
	case c.linger < 0:
		return invalidOption("linger %v (expected >= 0)", c.linger)
	case c.udpSegment < 0 || c.udpSegment > maxUDPPayload:
		return invalidOption("UDP segment %d (expected 0..%d; 0 turns it off)", c.udpSegment, maxUDPPayload)
	case c.datagramQueue < 0 || c.datagramQueue > 1<<24:
		return invalidOption("datagram queue %d (expected 0..%d; 0 means the default)", c.datagramQueue, 1<<24)
	}
	if c.backlog == 0 {
		c.backlog = d.backlog
	}
	c.netInbound = c.inboundLimit
	switch {
	case c.netConn:
		// Under a NetConn the limit holds only the bytes already on their
		// way when the NetConn pauses at its own bound.
		c.inboundLimit = max(c.inboundLimit, netInflightLimit)
	case c.inboundLimit == 0:
		c.inboundLimit = DefaultInboundLimit
	}
	if c.datagramQueue == 0 {
		c.datagramQueue = d.datagramQueue
	}
	if c.outboundLimit == 0 {
		c.outboundLimit = d.outboundLimit
	}
	if c.netConn {
		// A NetConn's Write blocks while the connection is unwritable,
		// which bounds its queue; its reader and writer are apart, so
		// reading must not wait for the writer.
		c.outboundLimit, c.pauseUnwritable = math.MaxInt, pauseNever
	}
	if c.lowWater == 0 && c.highWater == 0 {
		c.lowWater, c.highWater = d.lowWater, d.highWater
	}
	if c.lowWater < 0 || c.highWater <= 0 || c.lowWater > c.highWater {
		return invalidOption("water marks low %d, high %d (expected 0 <= low <= high, high > 0)", c.lowWater, c.highWater)
	}
	return nil
}

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}
