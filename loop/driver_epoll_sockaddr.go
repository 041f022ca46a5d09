//go:build linux

package loop

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// The connect op carries its target as the kernel's struct sockaddr
// (op.sa, op.saLen), ready for io_uring. epoll has to go through
// connect(2), which x/sys/unix only offers on a unix.Sockaddr, so the raw
// form is decoded here, field by field, without unsafe.
//
// The byte layout is the kernel's (include/uapi/linux/in.h, in6.h, un.h):
// RawSockaddrAny is a 2-byte family, then Addr.Data (14 bytes), then Pad.
//
//	AF_INET   port (big endian) @0, address @2..6
//	AF_INET6  port (big endian) @0, flowinfo @2..6, address @6..22,
//	          scope id (host order) @22..26
//	AF_UNIX   path @0..108; a leading NUL marks an abstract name

// rawSockaddrByte returns byte i of the address after the family field.
func rawSockaddrByte(raw *unix.RawSockaddrAny, i int) byte {
	if i < len(raw.Addr.Data) {
		return byte(raw.Addr.Data[i])
	}
	return byte(raw.Pad[i-len(raw.Addr.Data)])
}

// epollSockaddrs holds reusable targets for the decoder, so a TCP connect
// does not allocate. Owned by the loop goroutine; connect(2) is done with a
// value before it is decoded into again.
type epollSockaddrs struct {
	in4 unix.SockaddrInet4
	in6 unix.SockaddrInet6
}

// decodeSockaddr turns the first n bytes of raw into a unix.Sockaddr. It
// returns EAFNOSUPPORT for families other than AF_INET, AF_INET6 and
// AF_UNIX, and EINVAL for a length too short for the family (the errors
// connect(2) itself would give).
func (s *epollSockaddrs) decodeSockaddr(raw *unix.RawSockaddrAny, n uint32) (unix.Sockaddr, error) {
	if n < 2 {
		return nil, unix.EINVAL
	}
	switch raw.Addr.Family {
	case unix.AF_INET:
		if n < unix.SizeofSockaddrInet4 {
			return nil, unix.EINVAL
		}
		sa := &s.in4
		sa.Port = int(rawSockaddrByte(raw, 0))<<8 | int(rawSockaddrByte(raw, 1))
		for i := range sa.Addr {
			sa.Addr[i] = rawSockaddrByte(raw, 2+i)
		}
		return sa, nil
	case unix.AF_INET6:
		if n < unix.SizeofSockaddrInet6 {
			return nil, unix.EINVAL
		}
		sa := &s.in6
		sa.Port = int(rawSockaddrByte(raw, 0))<<8 | int(rawSockaddrByte(raw, 1))
		for i := range sa.Addr {
			sa.Addr[i] = rawSockaddrByte(raw, 6+i)
		}
		var scope [4]byte
		for i := range scope {
			scope[i] = rawSockaddrByte(raw, 22+i)
		}
		sa.ZoneId = binary.NativeEndian.Uint32(scope[:])
		return sa, nil
	case unix.AF_UNIX:
		// A fresh value each time: SockaddrUnix keeps its raw path between
		// calls and would send a stale byte after a shorter name.
		plen := int(n) - 2
		if plen > len(unix.RawSockaddrUnix{}.Path) {
			plen = len(unix.RawSockaddrUnix{}.Path)
		}
		path := make([]byte, plen)
		for i := range path {
			path[i] = rawSockaddrByte(raw, i)
		}
		if len(path) > 0 && path[0] == 0 {
			// Abstract name: x/sys spells it with a leading '@'.
			path[0] = '@'
			return &unix.SockaddrUnix{Name: string(path)}, nil
		}
		for i, b := range path {
			if b == 0 {
				path = path[:i]
				break
			}
		}
		return &unix.SockaddrUnix{Name: string(path)}, nil
	}
	return nil, unix.EAFNOSUPPORT
}
