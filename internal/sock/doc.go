// Package sock holds the socket helpers of ringloop that have nothing to do
// with io_uring, for packages loop and conn, which do not import unsafe:
//
//   - the kernel's struct sockaddr, encoded and decoded without allocating:
//     PutSockaddr and ParseSockaddr for a unix.RawSockaddrAny, PutAddrPort,
//     ParseAddrPort, PutUnixName and UnixName for raw bytes (a datagram's
//     source or destination);
//   - conversions between unix.Sockaddr and netip.AddrPort
//     (SockaddrToAddrPort, AddrPortToSockaddr);
//   - getpeername(2) and getsockname(2) on a buffer of the caller's stack
//     (Getpeername, Getsockname, PeerAddrPort, LocalAddrPort);
//   - system calls x/sys/unix lacks or makes allocate: Sendmsg on a msghdr
//     the caller keeps, Recvmmsg and Sendmmsg (Mmsghdr), Recv, and
//     SocketDrops (SO_MEMINFO).
//
// It imports nothing from the module; with package ring it is one of the
// two packages of the module that import unsafe. Every function is safe
// for concurrent use.
//
// System calls return the bare unix.Errno (EINTR is retried). Address
// errors match unix.EINVAL or unix.EAFNOSUPPORT, the errno connect(2)
// would give, and their text starts with "ring: sockaddr: ".
//
// On systems other than Linux the package compiles: SockaddrToAddrPort,
// AddrPortToSockaddr, PutAddrPort, ParseAddrPort, PutUnixName and UnixName
// work on bytes in Linux's layout, and every other function returns an
// error matching errors.ErrUnsupported.
package sock
