package conn

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/ringloop/ringloop/internal/sock"
	"golang.org/x/sys/unix"
)

// Addresses, for Listen, Dial, ListenPacket and DialPacket alike: a
// network and address resolved into a socket address (resolve,
// resolvePacket), and the socket addresses the kernel reports turned into
// the net.Addr values package net would return.

// streamNetwork maps a Listen or Dial network to the one its connections
// report: "tcp" or "unix".
func streamNetwork(network string) string {
	if network == "unix" {
		return "unix"
	}
	return "tcp"
}

// A sockTarget is a resolved address: the socket address, its family and,
// for a listening IPv6 socket, whether it takes IPv6 only (false: dual
// stack).
type sockTarget struct {
	sa     unix.Sockaddr
	family int
	v6only bool
}

// resolve turns a stream network ("tcp", "tcp4", "tcp6" or "unix") and
// address into a sockTarget. An empty host is the local system for a dial,
// as package net dials it, and every address for a listener ("tcp": dual
// stack). A host name or a service name is looked up with ctx.
func resolve(ctx context.Context, network, address string, listen bool) (sockTarget, error) {
	switch network {
	case "unix":
		if address == "" {
			return sockTarget{}, fmt.Errorf("conn: empty unix socket path")
		}
		return sockTarget{sa: &unix.SockaddrUnix{Name: address}, family: unix.AF_UNIX}, nil
	case "tcp", "tcp4", "tcp6":
	default:
		return sockTarget{}, fmt.Errorf("%w: %q", ErrUnknownNetwork, network)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return sockTarget{}, err
	}
	port, err := parsePort(ctx, network, portStr)
	if err != nil {
		return sockTarget{}, err
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
				return sockTarget{}, err
			}
			if ip, err = pickAddr(network, ips, host); err != nil {
				return sockTarget{}, err
			}
		}
	}
	if listen && ip.IsUnspecified() && ip.Is6() && network == "tcp" {
		return sockTarget{sa: &unix.SockaddrInet6{Port: port}, family: unix.AF_INET6}, nil
	}
	sa, family, err := ipSockaddr(network, netip.AddrPortFrom(ip, uint16(port)))
	return sockTarget{sa: sa, family: family, v6only: network == "tcp6"}, err
}

// datagramStreamNetworks maps each datagram network to the stream network
// whose addresses it takes.
var datagramStreamNetworks = map[string]string{"udp": "tcp", "udp4": "tcp4", "udp6": "tcp6", "unixgram": "unix"}

// datagramNetworkError returns, for a datagram network given to a stream
// function, an error wrapping ErrUnknownNetwork that names alt, the
// function that takes it (package net's Listen and Dial report an unknown
// network too); nil for any other network.
func datagramNetworkError(network, alt string) error {
	if _, ok := datagramStreamNetworks[network]; ok {
		return fmt.Errorf("%w: %q is a datagram network: use %s", ErrUnknownNetwork, network, alt)
	}
	return nil
}

// resolvePacket is resolve for a datagram network: "udp", "udp4", "udp6"
// or "unixgram".
func resolvePacket(ctx context.Context, network, address string, listen bool) (sockTarget, error) {
	streamNet, ok := datagramStreamNetworks[network]
	if !ok {
		return sockTarget{}, fmt.Errorf("%w: %q (datagram networks: udp, udp4, udp6, unixgram)", ErrUnknownNetwork, network)
	}
	return resolve(ctx, streamNet, address, listen)
}

// ipv4Fallback returns the IPv4 address a "tcp" listener on every address
// falls back to when the host has no IPv6, and whether t is such a
// listener's address.
func ipv4Fallback(network string, t sockTarget) (sockTarget, bool) {
	if t.family != unix.AF_INET6 || network != "tcp" || !isUnspecified(t.sa) {
		return t, false
	}
	return sockTarget{sa: &unix.SockaddrInet4{Port: sockPort(t.sa)}, family: unix.AF_INET}, true
}

// boundListener returns what a listener bound to t reports once the kernel
// bound it to bound: its address (with the port the kernel picked for port
// 0), the path of its Unix socket to remove on close (none for an abstract
// one), and t with that port, for the other reuse-port listeners.
func boundListener(t sockTarget, bound unix.Sockaddr) (addr net.Addr, path string, same sockTarget) {
	if u, ok := t.sa.(*unix.SockaddrUnix); ok {
		return &net.UnixAddr{Name: u.Name, Net: "unix"}, unixPath(u), t
	}
	t.sa = withPort(t.sa, sockPort(bound))
	return sockaddrToAddr(bound), "", t
}

// unixPath returns the file a named Unix socket is bound to, or "" for an
// abstract one ('@' first), which has none.
func unixPath(u *unix.SockaddrUnix) string {
	if len(u.Name) > 0 && u.Name[0] != '@' {
		return u.Name
	}
	return ""
}

func isUnspecified(sa unix.Sockaddr) bool {
	switch a := sa.(type) {
	case *unix.SockaddrInet6:
		return a.Addr == [16]byte{}
	case *unix.SockaddrInet4:
		return a.Addr == [4]byte{}
	}
	return false
}

func sockPort(sa unix.Sockaddr) int {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Port
	case *unix.SockaddrInet6:
		return a.Port
	}
	return 0
}

func withPort(sa unix.Sockaddr, port int) unix.Sockaddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		b := *a
		b.Port = port
		return &b
	case *unix.SockaddrInet6:
		b := *a
		b.Port = port
		return &b
	}
	return sa
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

// ipSockaddr builds the sockaddr for ap, checking it suits network (a
// stream network: "tcp", "tcp4" or "tcp6").
func ipSockaddr(network string, ap netip.AddrPort) (unix.Sockaddr, int, error) {
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

// connAddrs returns an open connection's local and remote addresses. An
// accepted connection shares its server's address as its local one when
// that says it without a system call (serverLocalAddr); otherwise the
// kernel is asked.
func connAddrs(fd int, network string, srv *Server) (local, remote net.Addr) {
	if srv != nil {
		local = serverLocalAddr(srv.addr)
	}
	remote = connAddr(fd, network, true)
	if local == nil {
		local = connAddr(fd, network, false)
	}
	return local, remote
}

// serverLocalAddr returns a server's address when it is also the local
// address of every connection it accepts: a server bound to one IP
// address, or a Unix socket path. Otherwise it returns nil.
func serverLocalAddr(addr net.Addr) net.Addr {
	switch a := addr.(type) {
	case *net.TCPAddr:
		if a.IP != nil && !a.IP.IsUnspecified() {
			return a
		}
	case *net.UnixAddr:
		if a.Name != "" && a.Name[0] != '@' {
			return a
		}
	}
	return nil
}

// packetAddr converts a bound or peer sockaddr to the net.Addr package net
// reports for a datagram socket.
func packetAddr(sa unix.Sockaddr) net.Addr {
	if u, ok := sa.(*unix.SockaddrUnix); ok {
		return &net.UnixAddr{Name: u.Name, Net: "unixgram"}
	}
	if ap, ok := sock.SockaddrToAddrPort(sa); ok {
		return net.UDPAddrFromAddrPort(ap)
	}
	return nil
}
