package testutil

import "golang.org/x/sys/unix"

// epoll_wait has its own number here (other architectures only have
// epoll_pwait).
func init() { waitSyscalls[unix.SYS_EPOLL_WAIT] = true }
