//go:build linux

package sock

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// skMeminfoDrops is SK_MEMINFO_DROPS, the index of the drop count in the
// array SO_MEMINFO returns.
const skMeminfoDrops = 8

// SocketDrops returns how many packets the kernel dropped on their way
// into socket fd (SO_MEMINFO's SK_MEMINFO_DROPS: for UDP, datagrams that
// found the receive buffer full, among others). It counts since the
// socket was made and wraps at 2^32.
func SocketDrops(fd int) (uint32, error) {
	var info [unix.SK_MEMINFO_VARS]uint32
	n := uint32(unsafe.Sizeof(info))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return 0, errnoErr(e)
	}
	if n < (skMeminfoDrops+1)*4 {
		return 0, unix.EINVAL
	}
	return info[skMeminfoDrops], nil
}
