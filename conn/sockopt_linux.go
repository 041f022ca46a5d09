//go:build linux

package conn

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// newSocket returns a non-blocking, close-on-exec stream socket of family.
func newSocket(family int) (int, error) {
	return socketOf(family, unix.SOCK_STREAM)
}

func socketOf(family, typ int) (int, error) {
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	return fd, nil
}

// A sockopt is an integer socket option, set when on.
type sockopt struct {
	level, opt, val int
	on              bool
}

// setup sets opts on fd, then binds it to sa, then runs last (listen or
// connect) unless it is nil. On failure it closes fd.
func setup(fd int, opts []sockopt, sa unix.Sockaddr, last func() (string, error)) (int, error) {
	fail := func(call string, err error) (int, error) {
		unix.Close(fd)
		return -1, os.NewSyscallError(call, err)
	}
	if err := setSockopts(fd, opts); err != nil {
		return fail("setsockopt", err)
	}
	if sa != nil {
		if err := unix.Bind(fd, sa); err != nil {
			return fail("bind", err)
		}
	}
	if last != nil {
		if call, err := last(); err != nil {
			return fail(call, err)
		}
	}
	return fd, nil
}

// setSockopts sets those of opts that are on, in order, and stops at the
// first error.
func setSockopts(fd int, opts []sockopt) error {
	for _, o := range opts {
		if o.on {
			if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
				return err
			}
		}
	}
	return nil
}

// listenSocket creates, binds and listens a socket for sa. v6only applies
// to AF_INET6 (false: dual stack). reusePort sets SO_REUSEPORT. A TCP
// listener gets the keepalive keepAlive asks for (WithKeepAlive), which
// Linux copies to every socket it accepts (TestKeepAliveDefaults reads it
// back), so the accept path sets none; a listener that refuses it fails
// Listen, rather than serve connections that outlive their peers.
func listenSocket(family int, sa unix.Sockaddr, v6only, reusePort bool, backlog int, keepAlive keepAlive) (int, error) {
	fd, err := newSocket(family)
	if err != nil {
		return -1, err
	}
	inet := family != unix.AF_UNIX
	ka := keepAliveOpts(keepAlive, inet)
	return setup(fd, []sockopt{
		{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1, inet},
		{unix.SOL_SOCKET, unix.SO_REUSEPORT, 1, inet && reusePort},
		{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, boolInt(v6only), family == unix.AF_INET6},
		ka[0], ka[1], ka[2], ka[3],
	}, sa, func() (string, error) { return "listen", unix.Listen(fd, backlog) })
}

// applySockopts sets the options cfg asks for on a new connection;
// accepted tells one accepted by a listener, which inherited the
// listener's keepalive. Errors are ignored, as package net ignores them
// for its defaults: an option the socket refuses must not fail the
// connection.
func applySockopts(fd int, network string, cfg *config, accepted bool) {
	if network == "tcp" {
		_ = setNoDelay(fd, network, !cfg.nagle)
		if !accepted {
			ka := keepAliveOpts(cfg.keepAlive, true)
			_ = setSockopts(fd, ka[:])
		}
	}
	if cfg.readBuf > 0 {
		_ = setBuffer(fd, false, cfg.readBuf)
	}
	if cfg.writeBuf > 0 {
		_ = setBuffer(fd, true, cfg.writeBuf)
	}
}

func setNoDelay(fd int, network string, on bool) error {
	if network != "tcp" {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, boolInt(on))
}

// keepAliveOpts are the socket options that turn keepalive on as k asks,
// as package net sets them: idle time and interval in whole seconds,
// rounded up, and the probe count, each left to the kernel when negative.
// When k is off, or tcp is false, none is on: a new socket has keepalive
// off.
func keepAliveOpts(k keepAlive, tcp bool) [4]sockopt {
	on := tcp && !k.off
	secs := func(d time.Duration) int {
		if d == 0 {
			d = DefaultKeepAlive
		}
		return int((d + time.Second - 1) / time.Second)
	}
	count := k.count
	if count == 0 {
		count = DefaultKeepAliveCount
	}
	return [4]sockopt{
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs(k.idle), on && k.idle >= 0},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs(k.interval), on && k.interval >= 0},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, count, on && count > 0},
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, on},
	}
}

// setKeepAlive turns keepalive on with d as idle time and interval (whole
// seconds, rounded up) and DefaultKeepAliveCount probes, or off for
// d <= 0.
func setKeepAlive(fd int, network string, d time.Duration) error {
	if network != "tcp" {
		return nil
	}
	if d <= 0 {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0)
	}
	ka := keepAliveOpts(keepAlive{idle: d, interval: d}, true)
	return setSockopts(fd, ka[:])
}

func setBuffer(fd int, write bool, n int) error {
	opt := unix.SO_RCVBUF
	if write {
		opt = unix.SO_SNDBUF
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, n)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// packetSocket creates a non-blocking datagram socket of family for sa:
// bound to it, or (connect) connected to it. A unixgram socket that
// connects is bound first to an abstract name the kernel picks, so that
// its peer can reply. Buffer sizes, SO_REUSEPORT
// and UDP_SEGMENT come from cfg.
func packetSocket(family int, sa unix.Sockaddr, v6only, connect bool, cfg *config) (int, error) {
	if cfg.udpSegment > 0 && family == unix.AF_UNIX {
		return -1, invalidOption("UDP segmentation on a unixgram socket")
	}
	fd, err := socketOf(family, unix.SOCK_DGRAM)
	if err != nil {
		return -1, err
	}
	opts := []sockopt{
		{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, boolInt(v6only), family == unix.AF_INET6 && !connect},
		{unix.SOL_SOCKET, unix.SO_REUSEPORT, 1, cfg.reusePort && family != unix.AF_UNIX && !connect},
		{unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.readBuf, cfg.readBuf > 0},
		{unix.SOL_SOCKET, unix.SO_SNDBUF, cfg.writeBuf, cfg.writeBuf > 0},
		{unix.IPPROTO_UDP, unix.UDP_SEGMENT, cfg.udpSegment, cfg.udpSegment > 0},
	}
	if !connect {
		return setup(fd, opts, sa, nil)
	}
	var self unix.Sockaddr
	if family == unix.AF_UNIX {
		self = &unix.SockaddrUnix{} // autobind
	}
	return setup(fd, opts, self, func() (string, error) { return "connect", unix.Connect(fd, sa) })
}

// receiveOptions are the socket options that make recvmsg(2) return a
// control message with each datagram, with the room (unix.CmsgSpace of
// its data) each message takes; ipv6 marks the IPv6 ones, which an IPv4
// socket does not have.
var receiveOptions = [...]struct {
	level, opt, room int
	ipv6             bool
}{
	{unix.IPPROTO_IP, unix.IP_RECVTOS, unix.CmsgSpace(1), false},
	{unix.IPPROTO_IP, unix.IP_PKTINFO, unix.CmsgSpace(unix.SizeofInet4Pktinfo), false},
	{unix.IPPROTO_IP, unix.IP_RECVTTL, unix.CmsgSpace(4), false},
	{unix.IPPROTO_IP, unix.IP_RECVORIGDSTADDR, unix.CmsgSpace(unix.SizeofSockaddrInet4), false},
	{unix.IPPROTO_IP, unix.IP_RECVOPTS, unix.CmsgSpace(40), false},
	{unix.IPPROTO_IP, unix.IP_RETOPTS, unix.CmsgSpace(40), false},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, unix.CmsgSpace(4), true},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, unix.CmsgSpace(unix.SizeofInet6Pktinfo), true},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, unix.CmsgSpace(4), true},
	{unix.IPPROTO_IPV6, unix.IPV6_RECVORIGDSTADDR, unix.CmsgSpace(unix.SizeofSockaddrInet6), true},
	{unix.IPPROTO_UDP, unix.UDP_GRO, unix.CmsgSpace(4), false},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMP, unix.CmsgSpace(16), false},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, unix.CmsgSpace(16), false},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMP_NEW, unix.CmsgSpace(16), false},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS_NEW, unix.CmsgSpace(16), false},
	{unix.SOL_SOCKET, unix.SO_TIMESTAMPING, unix.CmsgSpace(48), false},
	{unix.SOL_SOCKET, unix.SO_RXQ_OVFL, unix.CmsgSpace(4), false},
}

// recvControlRoom reads the receive options set on fd, a socket of
// family, and returns the room their control messages take together (0:
// none is set).
func recvControlRoom(fd, family int) int {
	room := 0
	for _, o := range receiveOptions {
		if o.ipv6 && family != unix.AF_INET6 {
			continue
		}
		if v, err := unix.GetsockoptInt(fd, o.level, o.opt); err == nil && v != 0 {
			room += o.room
		}
	}
	return room
}

// isUDPSegment reports whether a control message is UDP_SEGMENT.
func isUDPSegment(level, typ int32) bool {
	return level == unix.IPPROTO_UDP && typ == unix.UDP_SEGMENT
}

// backlog reads the kernel's accept queue of a TCP listening socket: the
// connections waiting in it and its size (TCP_INFO reports them for a
// listening socket in tcpi_unacked and tcpi_sacked). ok is false once the
// socket is closed; a read that raced the close is discarded, since the
// fd's number may have been reused meanwhile. Safe for concurrent use.
func (ln *listener) backlog() (queued, size int, ok bool) {
	if ln.fdClosed.Load() {
		return 0, 0, false
	}
	info, err := unix.GetsockoptTCPInfo(ln.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil || ln.fdClosed.Load() || info.State != tcpListen {
		return 0, 0, false
	}
	return int(info.Unacked), int(info.Sacked), true
}

// tcpListen is TCP_LISTEN, the state TCP_INFO reports for a listening
// socket.
const tcpListen = 10
