//go:build linux

package loop

import (
	"errors"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// dgramReader reads datagrams with recvmmsg(2) into receive-pool buffers
// (recvpool.go), each laid out as a multishot RECVMSG lays one out
// (dgram.go). The epoll backend reads datagram receives with it.
type dgramReader struct {
	msgs [dgramBatch]sock.Mmsghdr
	iovs [dgramBatch]unix.Iovec
	bufs [dgramBatch]int32
	used [dgramBatch]int // bytes of each buffer used: header, source, control room, payload
}

// read receives up to max (≤ dgramBatch) datagrams from fd with recv
// flags into free buffers of p, with one recvmmsg(2), reserving control
// bytes in each for control messages after the source address. It
// returns how many arrived (their buffers in r.bufs, lengths in r.used),
// or none and the error: unix.EAGAIN when nothing was waiting, errNoBufs
// when no buffer was free, or the socket's (ECONNREFUSED, …). Fewer than
// asked for may mean the socket is drained, or that an error waits for
// the next call. Buffers not filled go back to p.
func (r *dgramReader) read(fd int, p *recvPool, flags uint32, max int, control int) (int, error) {
	payload := dgramHead + control // RecvmsgProvidedControl keeps it inside the buffers
	k := 0
	for k < max {
		bi, b := p.get()
		if bi < 0 {
			break
		}
		r.bufs[k] = bi
		r.iovs[k] = unix.Iovec{Base: &b[payload]}
		r.iovs[k].SetLen(len(b) - payload)
		r.msgs[k] = sock.Mmsghdr{Hdr: unix.Msghdr{Name: &b[ring.SizeofRecvmsgOut], Namelen: dgramNameLen, Iov: &r.iovs[k], Iovlen: 1}}
		if control > 0 {
			r.msgs[k].Hdr.Control = &b[dgramHead]
			r.msgs[k].Hdr.SetControllen(control)
		}
		k++
	}
	if k == 0 {
		return 0, errNoBufs
	}
	n, err := sock.Recvmmsg(fd, r.msgs[:k], int(flags)|unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	for i := n; i < k; i++ {
		p.put(r.bufs[i])
	}
	for i := range n {
		m := &r.msgs[i]
		b := p.bytes(r.bufs[i], p.size)
		ring.PutRecvmsgOut(b, ring.RecvmsgOut{NameLen: m.Hdr.Namelen, ControlLen: uint32(m.Hdr.Controllen), PayloadLen: m.Len, Flags: uint32(m.Hdr.Flags)})
		r.used[i] = payload + min(int(m.Len), len(b)-payload)
	}
	return n, err
}

// errNoBufs reports that no pool buffer was free for a datagram.
var errNoBufs = errors.New("loop: no free provided buffer")
