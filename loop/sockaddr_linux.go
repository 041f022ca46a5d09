//go:build linux

package loop

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// putSockaddr encodes sa as the kernel's struct sockaddr in raw and returns
// its length, without unsafe: the bytes are laid out by hand (family in host
// order, port in network order) and copied into the RawSockaddrAny fields.
func putSockaddr(raw *unix.RawSockaddrAny, sa unix.Sockaddr) (uint32, error) {
	var b [unix.SizeofSockaddrAny]byte
	var n int
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		if a.Port < 0 || a.Port > 0xffff {
			return 0, invalidArgument("connect: port %d", a.Port)
		}
		binary.NativeEndian.PutUint16(b[0:], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], uint16(a.Port))
		copy(b[4:8], a.Addr[:])
		n = unix.SizeofSockaddrInet4
	case *unix.SockaddrInet6:
		if a.Port < 0 || a.Port > 0xffff {
			return 0, invalidArgument("connect: port %d", a.Port)
		}
		binary.NativeEndian.PutUint16(b[0:], unix.AF_INET6)
		binary.BigEndian.PutUint16(b[2:], uint16(a.Port))
		copy(b[8:24], a.Addr[:])
		binary.NativeEndian.PutUint32(b[24:], a.ZoneId)
		n = unix.SizeofSockaddrInet6
	case *unix.SockaddrUnix:
		name := a.Name
		if len(name) == 0 || len(name) > len(unix.RawSockaddrUnix{}.Path)-1 {
			return 0, invalidArgument("connect: unix socket path of %d bytes", len(name))
		}
		binary.NativeEndian.PutUint16(b[0:], unix.AF_UNIX)
		copy(b[2:], name)
		n = 2 + len(name) + 1 // with the terminating NUL
		if name[0] == '@' {
			b[2] = 0 // abstract socket: no NUL terminator counted
			n--
		}
	default:
		return 0, invalidArgument("connect: unsupported address type %T", sa)
	}
	*raw = unix.RawSockaddrAny{}
	raw.Addr.Family = binary.NativeEndian.Uint16(b[0:])
	for i := range raw.Addr.Data {
		raw.Addr.Data[i] = int8(b[2+i])
	}
	for i := range raw.Pad {
		raw.Pad[i] = int8(b[2+len(raw.Addr.Data)+i])
	}
	return uint32(n), nil
}
