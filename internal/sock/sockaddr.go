package sock

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// SockaddrToAddrPort converts an IPv4 or IPv6 socket address to a
// netip.AddrPort. A non-zero IPv6 scope id becomes the zone, as a decimal
// number (netip keeps zones as strings; resolve it with net.InterfaceByIndex
// for a name). It reports false for other address types and nil. It does not
// allocate except for a zone.
func SockaddrToAddrPort(sa unix.Sockaddr) (netip.AddrPort, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		ip := netip.AddrFrom16(a.Addr)
		if a.ZoneId != 0 {
			ip = ip.WithZone(strconv.FormatUint(uint64(a.ZoneId), 10))
		}
		return netip.AddrPortFrom(ip, uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}

// AddrPortToSockaddr converts ap to a new *unix.SockaddrInet4 (an IPv4
// address) or *unix.SockaddrInet6 (an IPv6 address, IPv4-mapped ones
// included). The zone of an IPv6 address is a scope id written in decimal or
// an interface name. An invalid ap, or a zone naming no interface, returns an
// error matching unix.EINVAL.
func AddrPortToSockaddr(ap netip.AddrPort) (unix.Sockaddr, error) {
	ip := ap.Addr()
	switch {
	case ip.Is4():
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}, nil
	case ip.Is6():
		sa := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
		if z := ip.Zone(); z != "" {
			id, err := zoneID(z)
			if err != nil {
				return nil, err
			}
			sa.ZoneId = id
		}
		return sa, nil
	}
	return nil, fmt.Errorf("ring: sockaddr: invalid address %v: %w", ap, unix.EINVAL)
}

// zoneID resolves an IPv6 zone: a decimal scope id or an interface name.
func zoneID(zone string) (uint32, error) {
	if id, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(id), nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, fmt.Errorf("ring: sockaddr: zone %q: %v: %w", zone, err, unix.EINVAL)
	}
	return uint32(ifi.Index), nil
}
