package main

import (
	"net"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/bench/internal/serve"
	"github.com/ringloop/ringloop/internal/sock"
)

// mmsgBatch is how many datagrams one recvmmsg(2) takes at most.
const mmsgBatch = 32

// serveMmsg is the UDP workload's floor: no runtime, no event loop, one
// thread blocked in recvmmsg(2) (MSG_WAITFORONE: it waits for the first
// datagram and takes what else is queued), then one sendmmsg(2) sending
// the batch back to its sources. It is the fewest system calls and the
// least user-space work per datagram a UDP echo can do, so what it costs
// is mostly the kernel's own per-datagram path.
func serveMmsg(f *serve.Flags) {
	sa := mustUDPAddr(f.Addr)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		serve.Fatal("socket", err)
	}
	var a4 unix.SockaddrInet4
	copy(a4.Addr[:], sa.IP.To4())
	a4.Port = sa.Port
	if err := unix.Bind(fd, &a4); err != nil {
		serve.Fatal("bind", err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	bound, err := unix.Getsockname(fd)
	if err != nil {
		serve.Fatal("getsockname", err)
	}
	go mmsgEcho(fd)
	stopProfile := f.StartProfile()
	serve.Ready(net.JoinHostPort(sa.IP.String(), strconv.Itoa(bound.(*unix.SockaddrInet4).Port)))
	serve.Wait(f.MaxRuntime)
	stopProfile()
	unix.Shutdown(fd, unix.SHUT_RDWR)
}

func mmsgEcho(fd int) {
	runtime.LockOSThread()
	const size = 65536
	bufs := make([]byte, mmsgBatch*size)
	names := make([]unix.RawSockaddrInet6, mmsgBatch)
	iovs := make([]unix.Iovec, mmsgBatch)
	msgs := make([]sock.Mmsghdr, mmsgBatch)
	for i := range msgs {
		iovs[i].Base = &bufs[i*size]
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.Iovlen = 1
		msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&names[i]))
	}
	for {
		for i := range msgs {
			iovs[i].Len = size
			msgs[i].Hdr.Namelen = uint32(unsafe.Sizeof(names[i]))
		}
		n, err := sock.Recvmmsg(fd, msgs, unix.MSG_WAITFORONE)
		if err != nil {
			if err == unix.EAGAIN {
				continue
			}
			return
		}
		if n == 0 {
			return // shut down
		}
		for i := 0; i < n; i++ {
			iovs[i].Len = uint64(msgs[i].Len)
		}
		for sent := 0; sent < n; {
			k, err := sock.Sendmmsg(fd, msgs[sent:n], 0)
			if err != nil || k <= 0 {
				break
			}
			sent += k
		}
	}
}
