package conn

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// dialState is what Dial waits on: the CONNECT's outcome.
type dialState struct {
	done     chan error // buffered; receives the outcome once
	canceled error      // ctx.Err() once the context ended first
}

// Dial connects to address on one loop of g (g.Next()) and returns once the
// connection is open and h.OnOpen ran. network is "tcp", "tcp4", "tcp6" or
// "unix"; a host name is resolved with ctx. The CONNECT is an op of the
// chosen loop: when ctx is canceled or its deadline passes first, the op is
// canceled and Dial returns a *net.OpError wrapping ctx.Err() (so
// errors.Is(err, context.DeadlineExceeded) or context.Canceled holds). A
// refused connection gives errors.Is(err, syscall.ECONNREFUSED). A failed
// Dial calls no Handler method. Called on a loop goroutine (of any group),
// where waiting would stall that loop and every connection on it, Dial
// returns an error wrapping loop.ErrInLoop at once. Safe for concurrent use.
func Dial(ctx context.Context, g *loop.Group, network, address string, h Handler, opts ...Option) (*Conn, error) {
	if g == nil || h == nil {
		return nil, fmt.Errorf("conn: Dial: nil group or handler")
	}
	if cur := loop.Current(); cur != nil {
		return nil, opError("dial", network, "", nil, nil,
			fmt.Errorf("conn: Dial would block loop %s: %w", cur, loop.ErrInLoop))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	fail := func(err error) error { return opError("dial", network, "", nil, nil, err) }
	if err := ctx.Err(); err != nil {
		return nil, fail(err)
	}
	sa, family, err := resolveDial(ctx, network, address)
	if err != nil {
		return nil, fail(err)
	}
	addr := sockaddrToAddr(sa)
	fd, err := newSocket(family)
	if err != nil {
		return nil, opError("dial", network, "socket", nil, addr, err)
	}
	l := g.Next()
	c := newConn(l, fd, netOf(network), h, cfg, nil)
	c.raddr = addr
	c.state = stateConnecting
	ds := &dialState{done: make(chan error, 1)}
	c.dial = ds
	start := func() {
		m := &c.misc
		id, err := l.Connect(fd, sa, m)
		if err != nil {
			unix.Close(fd)
			c.state = stateClosed
			ds.done <- opError("dial", network, "", nil, addr, err)
			return
		}
		m.id, m.kind, m.active = id, miscConnect, true
		c.ops++
	}
	if err := l.Execute(start); err != nil {
		unix.Close(fd)
		return nil, opError("dial", network, "", nil, addr, err)
	}
	select {
	case err := <-ds.done:
		if err != nil {
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
	}
	cerr := ctx.Err()
	abort := func() {
		if c.state == stateConnecting && c.misc.active {
			ds.canceled = cerr
			_ = l.Cancel(c.misc.id)
		}
	}
	if err := l.Execute(abort); err != nil {
		// The loop is terminating: its drain cancels the connect.
	}
	// The connect's final completion always follows (a real result if it
	// won the race, which then stands).
	if err := <-ds.done; err != nil {
		return nil, err
	}
	return c, nil
}

// connected handles the CONNECT's completion. Must be called on c's loop.
func (c *Conn) connected(res int32) {
	c.connectedAs(res, false)
}

// connectedAs is connected with the connect's Completion.Quarantined: a
// connect given up at a ring rebuild reports loop.ErrGivenUp.
func (c *Conn) connectedAs(res int32, givenUp bool) {
	ds := c.dial
	c.dial = nil
	if res < 0 || ds.canceled != nil {
		var err error
		switch {
		case ds.canceled != nil:
			err = opError("dial", c.network, "", nil, c.raddr, ds.canceled)
		case givenUp:
			err = opError("dial", c.network, "", nil, c.raddr, loop.ErrGivenUp)
		case errnoOf(res) == unix.ECANCELED:
			err = opError("dial", c.network, "", nil, c.raddr, net.ErrClosed)
		default:
			err = opError("dial", c.network, "connect", nil, c.raddr, errnoOf(res))
		}
		// Close through the loop (the backend may track the fd), then
		// report.
		c.state = stateClosed
		c.dialErr = err
		m := &c.misc
		id, cerr := c.l.Close(c.fd, m)
		if cerr != nil {
			_ = unix.Close(c.fd)
			ds.done <- err
			return
		}
		m.id, m.kind, m.active = id, miscDialClose, true
		c.dial = ds
		return
	}
	if err := c.open(); err != nil {
		// OnOpen panicked: the connection closes (OnClose reports it)
		// and Dial fails with the panic.
		ds.done <- opError("dial", c.network, "", nil, c.raddr, err)
		return
	}
	ds.done <- nil
}

// netOf maps a Listen/Dial network to the one connections report.
func netOf(network string) string {
	if network == "unix" {
		return "unix"
	}
	return "tcp"
}

// resolveDial turns network and address into a socket address and family.
func resolveDial(ctx context.Context, network, address string) (unix.Sockaddr, int, error) {
	switch network {
	case "unix":
		if address == "" {
			return nil, 0, fmt.Errorf("conn: empty unix socket path")
		}
		return &unix.SockaddrUnix{Name: address}, unix.AF_UNIX, nil
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, 0, fmt.Errorf("%w: %q", ErrUnknownNetwork, network)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, 0, err
	}
	port, err := parsePort(ctx, network, portStr)
	if err != nil {
		return nil, 0, err
	}
	var ip netip.Addr
	if host == "" {
		// As package net: an empty host dials the local system.
		if network == "tcp6" {
			ip = netip.IPv6Loopback()
		} else {
			ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	} else if ip, err = netip.ParseAddr(host); err != nil {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, 0, err
		}
		ip, err = pickAddr(network, ips, host)
		if err != nil {
			return nil, 0, err
		}
	}
	return tcpSockaddr(network, netip.AddrPortFrom(ip, uint16(port)))
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
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
	case *unix.SockaddrInet6:
		addr := &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
		if a.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				addr.Zone = ifi.Name
			} else {
				addr.Zone = strconv.Itoa(int(a.ZoneId))
			}
		}
		return addr
	case *unix.SockaddrUnix:
		return &net.UnixAddr{Name: a.Name, Net: "unix"}
	}
	return nil
}

// localAddr and remoteAddr ask the kernel for a connection's addresses.
func localAddr(fd int, network string) net.Addr {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return emptyAddr(network)
	}
	if a := sockaddrToAddr(sa); a != nil {
		return a
	}
	return emptyAddr(network)
}

func remoteAddr(fd int, network string) net.Addr {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return emptyAddr(network)
	}
	if a := sockaddrToAddr(sa); a != nil {
		return a
	}
	return emptyAddr(network)
}

func emptyAddr(network string) net.Addr {
	if network == "unix" {
		return &net.UnixAddr{Net: "unix"}
	}
	return &net.TCPAddr{}
}
