//go:build linux

package sock

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket addresses in the kernel's layout (include/uapi/linux/in.h, in6.h,
// un.h), for the SQEs and system calls that take a struct sockaddr:
// connect, accept, sendmsg's msg_name. x/sys/unix keeps its own conversion
// private, so callers outside this package (which may not import unsafe)
// encode and decode through PutSockaddr and ParseSockaddr.

// sockaddrError is the error of a sockaddr that cannot be encoded or
// decoded. errors.Is(err, Errno) holds (EINVAL for a malformed address,
// EAFNOSUPPORT for an unsupported family), the errno connect(2) itself
// would give.
func sockaddrError(errno unix.Errno, format string, args ...any) error {
	return fmt.Errorf("ring: sockaddr: "+format+": %w", append(args, errno)...)
}

// PutSockaddr encodes sa into raw as the kernel's struct sockaddr and
// returns its length, the addrlen to pass with it. raw is cleared first.
//
//   - *unix.SockaddrInet4: port 0..65535.
//   - *unix.SockaddrInet6: port 0..65535; ZoneId is the scope id.
//   - *unix.SockaddrUnix: a path of at most 107 bytes (it is stored with its
//     terminating NUL, counted in the length), or an abstract name written
//     "@name" (or with a leading NUL) of at most 108 bytes including the
//     '@', stored with a leading NUL and no terminator. An empty name gives
//     the bare family (length 2): bind(2) then autobinds.
//
// Other types, and values out of range, return an error matching
// unix.EAFNOSUPPORT or unix.EINVAL. It does not allocate on success.
func PutSockaddr(raw *unix.RawSockaddrAny, sa unix.Sockaddr) (uint32, error) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		if a.Port < 0 || a.Port > 0xffff {
			return 0, sockaddrError(unix.EINVAL, "port %d out of range", a.Port)
		}
		*raw = unix.RawSockaddrAny{}
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		p.Family = unix.AF_INET
		putPort(&p.Port, a.Port)
		p.Addr = a.Addr
		return unix.SizeofSockaddrInet4, nil
	case *unix.SockaddrInet6:
		if a.Port < 0 || a.Port > 0xffff {
			return 0, sockaddrError(unix.EINVAL, "port %d out of range", a.Port)
		}
		*raw = unix.RawSockaddrAny{}
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(raw))
		p.Family = unix.AF_INET6
		putPort(&p.Port, a.Port)
		p.Scope_id = a.ZoneId
		p.Addr = a.Addr
		return unix.SizeofSockaddrInet6, nil
	case *unix.SockaddrUnix:
		name := a.Name
		p := (*unix.RawSockaddrUnix)(unsafe.Pointer(raw))
		abstract := len(name) > 0 && (name[0] == '@' || name[0] == 0)
		if len(name) > len(p.Path) || len(name) == len(p.Path) && !abstract {
			return 0, sockaddrError(unix.EINVAL, "unix socket name of %d bytes (at most %d, %d for an abstract name)",
				len(name), len(p.Path)-1, len(p.Path))
		}
		*raw = unix.RawSockaddrAny{}
		p.Family = unix.AF_UNIX
		for i := 0; i < len(name); i++ {
			p.Path[i] = int8(name[i])
		}
		switch {
		case len(name) == 0:
			return 2, nil // unnamed: autobind
		case abstract:
			p.Path[0] = 0
			return uint32(2 + len(name)), nil
		default:
			return uint32(2 + len(name) + 1), nil // with the NUL
		}
	case nil:
		return 0, sockaddrError(unix.EINVAL, "nil address")
	default:
		return 0, sockaddrError(unix.EAFNOSUPPORT, "unsupported address type %T", sa)
	}
}

// ParseSockaddr decodes the first n bytes of raw (as filled by accept(2),
// getsockname(2), recvmsg(2) or an ACCEPT completion, n being the length the
// kernel wrote) into a new unix.Sockaddr: *unix.SockaddrInet4,
// *unix.SockaddrInet6 (scope id in ZoneId) or *unix.SockaddrUnix (an
// abstract name as "@name", an unnamed socket as ""). A length too short for
// the family, or longer than raw, returns an error matching unix.EINVAL;
// other families one matching unix.EAFNOSUPPORT. raw is not modified.
func ParseSockaddr(raw *unix.RawSockaddrAny, n uint32) (unix.Sockaddr, error) {
	if n < 2 || n > unix.SizeofSockaddrAny {
		return nil, sockaddrError(unix.EINVAL, "length %d", n)
	}
	switch raw.Addr.Family {
	case unix.AF_INET:
		if n < unix.SizeofSockaddrInet4 {
			return nil, sockaddrError(unix.EINVAL, "AF_INET address of %d bytes", n)
		}
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		return &unix.SockaddrInet4{Port: getPort(&p.Port), Addr: p.Addr}, nil
	case unix.AF_INET6:
		if n < unix.SizeofSockaddrInet6 {
			return nil, sockaddrError(unix.EINVAL, "AF_INET6 address of %d bytes", n)
		}
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(raw))
		return &unix.SockaddrInet6{Port: getPort(&p.Port), ZoneId: p.Scope_id, Addr: p.Addr}, nil
	case unix.AF_UNIX:
		p := (*unix.RawSockaddrUnix)(unsafe.Pointer(raw))
		path := unsafe.Slice((*byte)(unsafe.Pointer(&p.Path[0])), min(int(n)-2, len(p.Path)))
		if len(path) > 0 && path[0] == 0 {
			// Abstract: the length, not a NUL, ends the name.
			return &unix.SockaddrUnix{Name: "@" + string(path[1:])}, nil
		}
		for i, b := range path {
			if b == 0 {
				path = path[:i]
				break
			}
		}
		return &unix.SockaddrUnix{Name: string(path)}, nil
	}
	return nil, sockaddrError(unix.EAFNOSUPPORT, "address family %d", raw.Addr.Family)
}

// putPort stores port in network byte order in the kernel's sin_port.
func putPort(dst *uint16, port int) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}

// getPort reads a sin_port (network byte order).
func getPort(src *uint16) int {
	b := (*[2]byte)(unsafe.Pointer(src))
	return int(b[0])<<8 | int(b[1])
}

// Getpeername returns fd's peer address, as unix.Getpeername does, but with
// the kernel's buffer on the caller's stack: unix.Getpeername allocates a
// struct sockaddr of 112 bytes per call, garbage at once for a server
// that asks once per accepted connection.
func Getpeername(fd int) (unix.Sockaddr, error) {
	return sockname(unix.SYS_GETPEERNAME, fd)
}

// Getsockname returns fd's local address as Getpeername does.
func Getsockname(fd int) (unix.Sockaddr, error) {
	return sockname(unix.SYS_GETSOCKNAME, fd)
}

// PeerAddrPort returns fd's peer address when it is an IPv4 or IPv6 one
// (ok false for any other family, such as a Unix socket's), with the IPv6
// scope id, without allocating: no unix.Sockaddr is made.
func PeerAddrPort(fd int) (ap netip.AddrPort, zone uint32, ok bool, err error) {
	return inetName(unix.SYS_GETPEERNAME, fd)
}

// LocalAddrPort returns fd's local address as PeerAddrPort does.
func LocalAddrPort(fd int) (ap netip.AddrPort, zone uint32, ok bool, err error) {
	return inetName(unix.SYS_GETSOCKNAME, fd)
}

func inetName(trap uintptr, fd int) (netip.AddrPort, uint32, bool, error) {
	var raw unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	_, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&raw)), uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return netip.AddrPort{}, 0, false, e
	}
	switch {
	case raw.Addr.Family == unix.AF_INET && n >= unix.SizeofSockaddrInet4:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(&raw))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), uint16(getPort(&p.Port))), 0, true, nil
	case raw.Addr.Family == unix.AF_INET6 && n >= unix.SizeofSockaddrInet6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(&raw))
		return netip.AddrPortFrom(netip.AddrFrom16(p.Addr), uint16(getPort(&p.Port))), p.Scope_id, true, nil
	}
	return netip.AddrPort{}, 0, false, nil
}

func sockname(trap uintptr, fd int) (unix.Sockaddr, error) {
	var raw unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	_, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&raw)), uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return nil, e
	}
	return ParseSockaddr(&raw, n)
}
