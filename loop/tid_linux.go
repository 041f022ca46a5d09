//go:build linux

package loop

import "golang.org/x/sys/unix"

// gettid returns the calling thread's id.
func gettid() int32 { return int32(unix.Gettid()) }
