//go:build linux

package loop

import "golang.org/x/sys/unix"

// buildMsg fills o's iovecs and message header from its buffers, skipping
// empty ones, and its destination and control messages, if any. The
// iovecs keep their capacity across uses of the slot (op.reset), so a
// steady state does not allocate. They point into the buffers, which o
// keeps alive.
func buildMsg(o *op) {
	x := o.extras()
	x.iov = x.iov[:0]
	for _, b := range x.bufs {
		if len(b) == 0 {
			continue
		}
		x.iov = append(x.iov, unix.Iovec{Base: &b[0]})
		x.iov[len(x.iov)-1].SetLen(len(b))
	}
	x.msg = unix.Msghdr{}
	if len(x.iov) > 0 {
		x.msg.Iov = &x.iov[0]
		x.msg.SetIovlen(len(x.iov))
	}
	if x.nameLen > 0 {
		x.msg.Name, x.msg.Namelen = &x.name[0], x.nameLen
	}
	if len(x.control) > 0 {
		x.msg.Control = &x.control[0]
		x.msg.SetControllen(len(x.control))
	}
}
