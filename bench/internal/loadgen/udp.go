//go:build linux

package loadgen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// UDP mode: each connection is a connected UDP socket, a peer of the
// server, and each message one datagram of Size bytes: an 8-byte sequence
// number, then the peer's stream pattern from that sequence's offset. At
// most Depth datagrams are outstanding per peer. An echo must come back
// whole and in order (loopback neither reorders nor, with the buffers
// below, drops); one that does not come back within udpLost counts as an
// error, is given up, and the peer goes on, so a run never stalls.

const (
	udpHeader  = 8
	udpLost    = time.Second
	udpSockBuf = 4 << 20
)

func dialUDP(sa *unix.SockaddrInet4, _ time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, udpSockBuf)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, udpSockBuf)
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect: %w", err)
	}
	return fd, nil
}

// udpPayload is the pattern part of datagram seq of c.
func (w *worker) udpPayload(c *conn, seq uint64) []byte {
	n := uint64(w.cfg.Size - udpHeader)
	off := (uint64(c.base) + seq*n) % period
	return pattern[off : off+n]
}

// sendUDP sends datagrams until Depth are outstanding (c.tx sent, c.rx
// echoed or given up).
func (w *worker) sendUDP(c *conn, now int64) {
	for c.tx < c.rx+uint64(w.cfg.Depth) && !w.run.stopping.Load() {
		binary.LittleEndian.PutUint64(w.wbuf[:udpHeader], c.tx)
		copy(w.wbuf[udpHeader:], w.udpPayload(c, c.tx))
		if _, err := unix.Write(c.fd, w.wbuf); err != nil {
			if err == unix.EAGAIN || err == unix.EINTR || err == unix.ENOBUFS {
				return
			}
			w.fail(c, fmt.Errorf("write: %w", err))
			return
		}
		c.sent[c.tx%uint64(w.cfg.Depth)] = now
		c.tx++
	}
}

// recvUDP reads echoes until the socket is drained, checking each.
func (w *worker) recvUDP(c *conn, measuring bool) {
	rs := w.run
	for {
		n, ok := w.readFd(c)
		if !ok {
			return
		}
		if n < udpHeader {
			w.fail(c, fmt.Errorf("a %d-byte echo", n))
			return
		}
		seq := binary.LittleEndian.Uint64(w.rbuf[:udpHeader])
		switch {
		case seq < c.rx || seq >= c.tx:
			w.note(c, fmt.Errorf("echo of datagram %d, expecting %d (sent %d): late or never sent", seq, c.rx, c.tx))
			continue
		case seq > c.rx:
			w.note(c, fmt.Errorf("datagrams %d to %d never came back", c.rx, seq-1))
			c.rx = seq
		}
		if n != w.cfg.Size || !bytes.Equal(w.rbuf[udpHeader:n], w.udpPayload(c, seq)) {
			w.fail(c, fmt.Errorf("echo of datagram %d: %d bytes, corrupt or cut", seq, n))
			return
		}
		now := w.now()
		c.rx = seq + 1
		if measuring && now < rs.endNs {
			lat := now - c.sent[seq%uint64(w.cfg.Depth)]
			w.h.Record(uint64(max(lat, 0)))
			w.reqs++
			c.reqs++
			if rs.measured.Add(1) >= w.cfg.Requests {
				rs.stopping.Store(true)
				return
			}
		}
	}
}

// expireUDP gives up datagrams outstanding for longer than udpLost, so a
// lost one costs an error, not the peer.
func (w *worker) expireUDP(now int64) {
	if now-w.expiredAt < int64(50*time.Millisecond) {
		return // a sweep at most every 50 ms keeps the client cheap
	}
	w.expiredAt = now
	for _, c := range w.conns {
		if c.dead || c.rx == c.tx {
			continue
		}
		if now-c.sent[c.rx%uint64(w.cfg.Depth)] > int64(udpLost) {
			w.note(c, fmt.Errorf("datagram %d not echoed within %v", c.rx, udpLost))
			c.rx++
			w.sendUDP(c, now)
		}
	}
}

// note counts an error without closing the peer.
func (w *worker) note(c *conn, err error) {
	w.errs++
	if w.first == "" {
		w.first = fmt.Sprintf("peer %d: %v", c.index, err)
	}
}
