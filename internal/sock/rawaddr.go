package sock

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// Raw socket addresses: the bytes recvmsg(2) writes as a datagram's source
// and sendmsg(2) reads as its destination (struct sockaddr_in, sockaddr_in6
// or sockaddr_un, in the machine's byte order but for the port, which is in
// network order). These helpers convert them without allocating, so that a
// datagram server can read a source and reply to it per packet for free.

// PutAddrPort writes ap into b as the raw address a socket of family
// (unix.AF_INET or unix.AF_INET6) takes, and returns its length: a
// sockaddr_in for AF_INET (ap must be IPv4, or IPv4-mapped IPv6), a
// sockaddr_in6 for AF_INET6 (an IPv4 address is written IPv4-mapped). An
// IPv6 zone becomes the scope id. b must hold unix.SizeofSockaddrInet6
// bytes. An address the family cannot carry returns an error matching
// unix.EAFNOSUPPORT; an invalid one, unix.EINVAL.
func PutAddrPort(b []byte, ap netip.AddrPort, family int) (int, error) {
	ip := ap.Addr()
	if !ip.IsValid() {
		return 0, fmt.Errorf("ring: sockaddr: invalid address %v: %w", ap, unix.EINVAL)
	}
	switch family {
	case unix.AF_INET:
		if ip.Is4In6() {
			ip = ip.Unmap()
		}
		if !ip.Is4() {
			return 0, fmt.Errorf("ring: sockaddr: %v on an IPv4 socket: %w", ap, unix.EAFNOSUPPORT)
		}
		_ = b[unix.SizeofSockaddrInet4-1]
		binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:4], ap.Port())
		a := ip.As4()
		copy(b[4:8], a[:])
		clear(b[8:16])
		return unix.SizeofSockaddrInet4, nil
	case unix.AF_INET6:
		_ = b[unix.SizeofSockaddrInet6-1]
		var scope uint32
		if z := ip.Zone(); z != "" {
			id, err := zoneID(z)
			if err != nil {
				return 0, err
			}
			scope = id
		}
		binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET6)
		binary.BigEndian.PutUint16(b[2:4], ap.Port())
		clear(b[4:8]) // flow info
		a := ip.As16()
		copy(b[8:24], a[:])
		binary.NativeEndian.PutUint32(b[24:28], scope)
		return unix.SizeofSockaddrInet6, nil
	}
	return 0, fmt.Errorf("ring: sockaddr: family %d: %w", family, unix.EAFNOSUPPORT)
}

// ParseAddrPort reads a raw IPv4 or IPv6 address (as recvmsg(2) writes a
// datagram's source). It reports false for another family or a short b. A
// non-zero IPv6 scope id becomes the zone, in decimal (the only case that
// allocates).
func ParseAddrPort(b []byte) (netip.AddrPort, bool) {
	if len(b) < 2 {
		return netip.AddrPort{}, false
	}
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case unix.AF_INET:
		if len(b) < 8 {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), true
	case unix.AF_INET6:
		if len(b) < 24 {
			return netip.AddrPort{}, false
		}
		ip := netip.AddrFrom16([16]byte(b[8:24]))
		if len(b) >= 28 {
			if scope := binary.NativeEndian.Uint32(b[24:28]); scope != 0 {
				ip = ip.WithZone(strconv.FormatUint(uint64(scope), 10))
			}
		}
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[2:4])), true
	}
	return netip.AddrPort{}, false
}

// PutUnixName writes a raw Unix socket address naming path (a leading '@'
// names an abstract socket, as in package net) into b and returns its
// length. b must hold unix.SizeofSockaddrUnix bytes; a name too long for
// sun_path returns an error matching unix.EINVAL.
func PutUnixName(b []byte, path string) (int, error) {
	const room = len(unix.RawSockaddrUnix{}.Path)
	if len(path) == 0 || len(path) > room {
		return 0, fmt.Errorf("ring: sockaddr: unix socket name %q: %w", path, unix.EINVAL)
	}
	_ = b[unix.SizeofSockaddrUnix-1]
	binary.NativeEndian.PutUint16(b[0:2], unix.AF_UNIX)
	n := copy(b[2:2+room], path)
	if path[0] == '@' {
		b[2] = 0
		return 2 + n, nil // abstract: the length bounds the name
	}
	if n == room {
		return 2 + n, nil // a path filling sun_path has no NUL, as Linux allows
	}
	b[2+n] = 0
	return 2 + n + 1, nil
}

// UnixName returns the name in a raw Unix socket address, without the
// leading NUL of an abstract one (abstract reports it; package net shows
// it as '@'): empty for an unnamed socket. ok is false for another family.
// name aliases b.
func UnixName(b []byte) (name []byte, abstract, ok bool) {
	if len(b) < 2 || binary.NativeEndian.Uint16(b[0:2]) != unix.AF_UNIX {
		return nil, false, false
	}
	p := b[2:]
	if len(p) == 0 {
		return nil, false, true
	}
	if p[0] == 0 {
		return p[1:], true, true // abstract: the length bounds the name
	}
	for i, c := range p {
		if c == 0 {
			return p[:i], false, true
		}
	}
	return p, false, true
}
