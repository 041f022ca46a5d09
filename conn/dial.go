package conn

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/sched"
	"golang.org/x/sys/unix"
)

// dialState follows a dial from its start to its outcome: the future the
// caller holds and why the connect was cut short, if it was. Loop goroutine
// only, except f.
type dialState struct {
	f        *sched.Future[*Conn]
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
// The future completes on the connection's loop: with the connection once
// h.OnOpen ran, or with a *net.OpError once the dial failed and its socket
// is closed (no Handler method runs then). When ctx ends or the connect
// timeout (WithConnectTimeout) passes first, the error wraps ctx.Err() or
// os.ErrDeadlineExceeded; a refused connection gives errors.Is(err,
// syscall.ECONNREFUSED); a loop that refuses the task gives
// loop.ErrRejected. If OnOpen panics, the connection closes (OnClose
// reports the *PanicError) and the future fails with it. Safe for
// concurrent use.
func DialAsync(ctx context.Context, g *loop.Group, network, address string, h Handler, opts ...Option) *sched.Future[*Conn] {
	f := sched.NewFuture[*Conn]()
	fail := func(err error) *sched.Future[*Conn] {
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
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	ds := &dialState{f: f, network: network}
	if !needsLookup(network, address) {
		sa, family, _, err := resolve(ctx, network, address, false)
		if err != nil {
			return fail(err)
		}
		startDial(ctx, l, ds, sa, family, h, cfg)
		return f
	}
	// A name to look up: not on the caller's goroutine, which may be a
	// loop.
	go func() {
		sa, family, _, err := resolve(ctx, network, address, false)
		if err != nil {
			fail(err)
			return
		}
		startDial(ctx, l, ds, sa, family, h, cfg)
	}()
	return f
}

// startDial opens the socket and hands the connect to l.
func startDial(ctx context.Context, l *loop.Loop, ds *dialState, sa unix.Sockaddr, family int, h Handler, cfg *config) {
	addr := sockaddrToAddr(sa)
	fd, err := newSocket(family)
	if err != nil {
		ds.f.Complete(nil, opError("dial", ds.network, "socket", nil, addr, err))
		return
	}
	c := newConn(l, fd, netOf(ds.network), h, cfg, nil)
	c.raddr = addr
	c.state = stateConnecting
	c.rareX().dial = ds
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
			c.finishDial(opError("dial", ds.network, "", nil, addr, ds.canceled))
			return
		}
		m := &c.rare.misc // the dial state made it
		id, err := l.Connect(fd, sa, (*miscDone)(c))
		if err != nil {
			unix.Close(fd)
			c.finishDial(opError("dial", ds.network, "", nil, addr, err))
			return
		}
		m.id, m.kind, m.active = id, miscConnect, true
		c.ops++
		if d := cfg.connTimeout; d > 0 {
			ds.timer, _ = l.Schedule(d, func() {
				ds.timer = nil
				c.abortDial(errDeadline)
			})
		}
	}
	if ctx.Done() != nil {
		ds.stopCtx = context.AfterFunc(ctx, func() {
			cerr := ctx.Err()
			_ = executeRetrying(l, func() { c.abortDial(cerr) })
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
		c.rare.dial = nil
		if ds.stopCtx != nil {
			ds.stopCtx()
		}
		ds.f.Complete(nil, opError("dial", ds.network, "", nil, addr, err))
	}
}

// abortDial cuts a dial short with cause (ctx.Err() or the connect
// timeout): the connect is canceled, or never started. Must be called on
// c's loop.
func (c *Conn) abortDial(cause error) {
	ds := c.rare.dial
	if ds == nil || c.state != stateConnecting || ds.canceled != nil {
		return
	}
	ds.canceled = cause
	if m := c.miscOp(); m != nil && m.kind == miscConnect {
		cancelOp(c.l, m.id)
	}
}

// finishDial ends a failed dial whose socket is closed: the future fails
// with err. Must be called on c's loop.
func (c *Conn) finishDial(err error) {
	ds := c.rare.dial
	c.rare.dial = nil
	c.state = stateClosed
	ds.stop()
	ds.f.Complete(nil, err)
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
func (c *Conn) connectedAs(res int32, givenUp bool) {
	ds := c.rare.dial
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
		m := &c.rareX().misc
		id, cerr := c.l.Close(int(c.fd), (*miscDone)(c))
		if cerr != nil {
			_ = unix.Close(int(c.fd))
			c.finishDial(err)
			return
		}
		m.id, m.kind, m.active = id, miscDialClose, true
		return
	}
	c.rare.dial = nil
	ds.stop()
	if err := c.open(); err != nil {
		// OnOpen panicked: the connection closes (OnClose reports it)
		// and the dial fails with the panic.
		ds.f.Complete(nil, opError("dial", ds.network, "", nil, c.raddr, err))
		return
	}
	ds.f.Complete(c, nil)
}

// netOf maps a Listen/Dial network to the one connections report.
func netOf(network string) string {
	if network == "unix" {
		return "unix"
	}
	return "tcp"
}

// resolve turns network and address into a socket address and family. An
// empty host is the local system for a dial, as package net dials it, and
// every address for a listener ("tcp": dual stack, so v6only is false).
// v6only tells a listener whether an IPv6 socket takes IPv6 only.
func resolve(ctx context.Context, network, address string, listen bool) (sa unix.Sockaddr, family int, v6only bool, err error) {
	switch network {
	case "unix":
		if address == "" {
			return nil, 0, false, fmt.Errorf("conn: empty unix socket path")
		}
		return &unix.SockaddrUnix{Name: address}, unix.AF_UNIX, false, nil
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, 0, false, fmt.Errorf("%w: %q", ErrUnknownNetwork, network)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, 0, false, err
	}
	port, err := parsePort(ctx, network, portStr)
	if err != nil {
		return nil, 0, false, err
	}
	var ip netip.Addr
	switch {
	case host == "" && listen && network == "tcp4":
		ip = netip.IPv4Unspecified()
	case host == "" && listen:
		ip = netip.IPv6Unspecified()
	case host == "" && network == "tcp6":
		ip = netip.IPv6Loopback()
	case host == "":
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	default:
		if ip, err = netip.ParseAddr(host); err != nil {
			ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			if err != nil {
				return nil, 0, false, err
			}
			if ip, err = pickAddr(network, ips, host); err != nil {
				return nil, 0, false, err
			}
		}
	}
	if listen && ip.IsUnspecified() && ip.Is6() && network == "tcp" {
		return &unix.SockaddrInet6{Port: port}, unix.AF_INET6, false, nil
	}
	sa, family, err = tcpSockaddr(network, netip.AddrPortFrom(ip, uint16(port)))
	return sa, family, network == "tcp6", err
}

// needsLookup reports whether resolving address would ask a resolver (a
// host name, or a service name for the port): what DialAsync must not do
// on the caller's goroutine.
func needsLookup(network, address string) bool {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return false
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return false // resolve reports it
	}
	if _, err := strconv.Atoi(port); err != nil {
		return true
	}
	if host == "" {
		return false
	}
	_, err = netip.ParseAddr(host)
	return err != nil
}

// parsePort parses a numeric port or looks a service name up.
func parsePort(ctx context.Context, network, s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 || n > 65535 {
			return 0, fmt.Errorf("conn: invalid port %q", s)
		}
		return n, nil
	}
	return net.DefaultResolver.LookupPort(ctx, network, s)
}

// pickAddr chooses the first address of the network's family (IPv4 first
// for "tcp").
func pickAddr(network string, ips []netip.Addr, host string) (netip.Addr, error) {
	for _, want4 := range []bool{true, false} {
		for _, ip := range ips {
			ip = ip.Unmap()
			if ip.Is4() != want4 {
				continue
			}
			if (network == "tcp4" && !ip.Is4()) || (network == "tcp6" && ip.Is4()) {
				continue
			}
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("conn: no %s address for %q", network, host)
}

// tcpSockaddr builds the sockaddr for ap, checking it suits network.
func tcpSockaddr(network string, ap netip.AddrPort) (unix.Sockaddr, int, error) {
	ip := ap.Addr()
	if ip.Is4In6() && network != "tcp6" {
		ip = ip.Unmap()
	}
	switch {
	case ip.Is4() && network != "tcp6":
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}, unix.AF_INET, nil
	case ip.Is6() && network != "tcp4":
		sa := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
		if z := ip.Zone(); z != "" {
			if ifi, err := net.InterfaceByName(z); err == nil {
				sa.ZoneId = uint32(ifi.Index)
			} else if n, err := strconv.Atoi(z); err == nil {
				sa.ZoneId = uint32(n)
			}
		}
		return sa, unix.AF_INET6, nil
	}
	return nil, 0, fmt.Errorf("conn: address %v does not suit network %q", ip, network)
}

// sockaddrToAddr converts a socket address to the net.Addr package net
// would report.
func sockaddrToAddr(sa unix.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return tcpAddr(netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), 0)
	case *unix.SockaddrInet6:
		return tcpAddr(netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), a.ZoneId)
	case *unix.SockaddrUnix:
		return &net.UnixAddr{Name: a.Name, Net: "unix"}
	}
	return nil
}

// tcpAddr makes a TCP address: one allocation for the address and a 4- or
// 16-byte one for its IP.
func tcpAddr(ap netip.AddrPort, zone uint32) *net.TCPAddr {
	a := &net.TCPAddr{IP: ap.Addr().AsSlice(), Port: int(ap.Port())}
	if zone != 0 {
		if ifi, err := net.InterfaceByIndex(int(zone)); err == nil {
			a.Zone = ifi.Name
		} else {
			a.Zone = strconv.Itoa(int(zone))
		}
	}
	return a
}

// connAddr asks the kernel for a connection's local or (peer) remote
// address. An IP one is read without the intermediate unix.Sockaddr.
func connAddr(fd int, network string, peer bool) net.Addr {
	inet, name := sock.LocalAddrPort, sock.Getsockname
	if peer {
		inet, name = sock.PeerAddrPort, sock.Getpeername
	}
	if network != "unix" {
		if ap, zone, ok, err := inet(fd); err == nil && ok {
			return tcpAddr(ap, zone)
		}
	}
	if sa, err := name(fd); err == nil {
		if a := sockaddrToAddr(sa); a != nil {
			return a
		}
	}
	if network == "unix" {
		return &net.UnixAddr{Net: "unix"}
	}
	return &net.TCPAddr{}
}
