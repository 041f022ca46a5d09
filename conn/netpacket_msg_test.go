package conn_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// msgConn is what net.UDPConn and NetPacketConn share for control
// messages: the suite below runs against both, so package net keeps it
// honest.
type msgConn interface {
	net.PacketConn
	SyscallConn() (syscall.RawConn, error)
	ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error)
	WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error)
}

// quicFastPath is what a QUIC stack (quic-go) looks for on a
// net.PacketConn before it sends with GSO and ECN and reads in batches.
type quicFastPath interface {
	msgConn
	SetReadBuffer(int) error
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
}

var (
	_ quicFastPath = (*conn.NetPacketConn)(nil)
	_ msgConn      = (*net.UDPConn)(nil)
)

// listenMsg opens a socket on network and address.
type listenMsg func(t *testing.T, network, address string) msgConn

// msgImpls runs f against package net's UDP sockets and against
// NetPacketConn on each backend (checking for leaks).
func msgImpls(t *testing.T, f func(t *testing.T, listen listenMsg)) {
	t.Run("impl=net", func(t *testing.T) {
		f(t, func(t *testing.T, network, address string) msgConn {
			c, err := net.ListenPacket(network, address)
			if err != nil {
				t.Skipf("ListenPacket(%s, %s): %v", network, address, err)
			}
			t.Cleanup(func() { c.Close() })
			return c.(*net.UDPConn)
		})
	})
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		f(t, func(t *testing.T, network, address string) msgConn {
			return ctListenNet(t, g, network, address)
		})
	})
}

// ctListenNet opens a NetPacketConn, closed when the test ends.
func ctListenNet(t *testing.T, g *loop.Group, network, address string) *conn.NetPacketConn {
	t.Helper()
	c, err := conn.ListenPacketNet(context.Background(), g, network, address)
	if err != nil {
		t.Skipf("ListenPacketNet(%s, %s): %v", network, address, err)
	}
	t.Cleanup(func() { c.Close(); <-c.PacketConn().Done() })
	return c
}

// ipFamilies are the loopback setups the tests run on, with the options
// that ask for a datagram's traffic class and destination, and the
// control message each arrives in.
var ipFamilies = []struct {
	name, network, loopback, any string
	level, recvTOS, tosType      int
	recvPktinfo, pktinfoType     int
	setTOS                       int
}{
	{"v4", "udp4", "127.0.0.1", "0.0.0.0", unix.IPPROTO_IP, unix.IP_RECVTOS, unix.IP_TOS, unix.IP_PKTINFO, unix.IP_PKTINFO, unix.IP_TOS},
	{"v6", "udp6", "::1", "::", unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, unix.IPV6_TCLASS, unix.IPV6_RECVPKTINFO, unix.IPV6_PKTINFO, unix.IPV6_TCLASS},
}

// setInt sets an int socket option through c's RawConn.
func setInt(t *testing.T, c interface {
	SyscallConn() (syscall.RawConn, error)
}, level, opt, v int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("setsockopt(%d, %d, %d): %v", level, opt, v, serr)
	}
}

// udpAddr is c's local address on loopback (the socket may be bound to
// the unspecified address).
func udpAddr(c net.PacketConn, loopback string) *net.UDPAddr {
	return &net.UDPAddr{IP: net.ParseIP(loopback), Port: c.LocalAddr().(*net.UDPAddr).Port}
}

// cmsg builds one control message.
func cmsg(level, typ int, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := b[:unix.SizeofCmsghdr]
	if unix.SizeofCmsghdr == 16 {
		binary.NativeEndian.PutUint64(h, uint64(unix.CmsgLen(len(data))))
		h = h[8:]
	} else {
		binary.NativeEndian.PutUint32(h, uint32(unix.CmsgLen(len(data))))
		h = h[4:]
	}
	binary.NativeEndian.PutUint32(h, uint32(level))
	binary.NativeEndian.PutUint32(h[4:], uint32(typ))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

func int32Bytes(v int) []byte { return binary.NativeEndian.AppendUint32(nil, uint32(v)) }

// findCmsg returns the data of oob's message of level and typ.
func findCmsg(t *testing.T, oob []byte, level, typ int) []byte {
	t.Helper()
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		t.Fatalf("control messages %x: %v", oob, err)
	}
	for _, m := range msgs {
		if int(m.Header.Level) == level && int(m.Header.Type) == typ {
			return m.Data
		}
	}
	t.Fatalf("no control message %d/%d in %x", level, typ, oob)
	return nil
}

// tosOf reads a traffic class message's value (IP_TOS: a byte;
// IPV6_TCLASS: an int).
func tosOf(data []byte) int {
	if len(data) == 1 {
		return int(data[0])
	}
	return int(binary.NativeEndian.Uint32(data))
}

const testTOS = 0xb8 | 2 // DSCP EF, ECT(0)

// TestNetPacketConnReadMsgTOS: with IP_RECVTOS (IPV6_RECVTCLASS) set
// through Control, ReadMsgUDP returns each datagram's traffic class; an
// oob too short for it is cut and reported with MSG_CTRUNC, a b too short
// for the payload with MSG_TRUNC, as package net's does.
func TestNetPacketConnReadMsgTOS(t *testing.T) {
	msgImpls(t, func(t *testing.T, listen listenMsg) {
		for _, fam := range ipFamilies {
			t.Run(fam.name, func(t *testing.T) {
				rx := listen(t, fam.network, net.JoinHostPort(fam.loopback, "0"))
				setInt(t, rx, fam.level, fam.recvTOS, 1)
				tx, err := net.ListenUDP(fam.network, &net.UDPAddr{IP: net.ParseIP(fam.loopback)})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Close()
				setInt(t, tx, fam.level, fam.setTOS, testTOS)
				to := rx.LocalAddr()
				rx.SetReadDeadline(time.Now().Add(5 * time.Second))

				tx.WriteTo([]byte("hello"), to)
				b, oob := make([]byte, 64), make([]byte, 128)
				n, oobn, flags, from, err := rx.ReadMsgUDP(b, oob)
				if err != nil || string(b[:n]) != "hello" || flags != 0 {
					t.Fatalf("ReadMsgUDP: %q, flags %#x, %v", b[:n], flags, err)
				}
				if from.String() != tx.LocalAddr().String() {
					t.Fatalf("source %v, want %v", from, tx.LocalAddr())
				}
				if got := tosOf(findCmsg(t, oob[:oobn], fam.level, fam.tosType)); got != testTOS {
					t.Fatalf("traffic class %#x, want %#x", got, testTOS)
				}

				// No room for the message: cut, MSG_CTRUNC.
				tx.WriteTo([]byte("no oob"), to)
				n, oobn, flags, _, err = rx.ReadMsgUDP(b, nil)
				if err != nil || string(b[:n]) != "no oob" || oobn != 0 || flags != unix.MSG_CTRUNC {
					t.Fatalf("without oob: %q, oobn %d, flags %#x, %v", b[:n], oobn, flags, err)
				}
				// Room for a header only: the header, its length cut.
				tx.WriteTo([]byte("short oob"), to)
				short := make([]byte, unix.SizeofCmsghdr)
				n, oobn, flags, _, err = rx.ReadMsgUDP(b, short)
				if err != nil || n != 9 || oobn != len(short) || flags != unix.MSG_CTRUNC {
					t.Fatalf("short oob: %d B, oobn %d, flags %#x, %v", n, oobn, flags, err)
				}
				// A payload longer than b: cut, MSG_TRUNC.
				tx.WriteTo([]byte("0123456789"), to)
				n, oobn, flags, _, err = rx.ReadMsgUDP(b[:4], oob)
				if err != nil || string(b[:n]) != "0123" || flags != unix.MSG_TRUNC || oobn == 0 {
					t.Fatalf("short b: %q, oobn %d, flags %#x, %v", b[:n], oobn, flags, err)
				}
			})
		}
	})
}

// TestNetPacketConnReadMsgPktinfo: on a socket bound to the unspecified
// address with IP_PKTINFO (IPV6_RECVPKTINFO) set, each datagram names the
// address it was sent to, as QUIC stacks ask for to reply from it.
func TestNetPacketConnReadMsgPktinfo(t *testing.T) {
	msgImpls(t, func(t *testing.T, listen listenMsg) {
		for _, fam := range ipFamilies {
			t.Run(fam.name, func(t *testing.T) {
				rx := listen(t, fam.network, net.JoinHostPort(fam.any, "0"))
				setInt(t, rx, fam.level, fam.recvPktinfo, 1)
				tx, err := net.ListenUDP(fam.network, &net.UDPAddr{IP: net.ParseIP(fam.loopback)})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Close()
				tx.WriteTo([]byte("where"), udpAddr(rx, fam.loopback))
				rx.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, oob := make([]byte, 64), make([]byte, 128)
				_, oobn, flags, _, err := rx.ReadMsgUDP(b, oob)
				if err != nil || flags != 0 {
					t.Fatalf("ReadMsgUDP: flags %#x, %v", flags, err)
				}
				info := findCmsg(t, oob[:oobn], fam.level, fam.pktinfoType)
				var dst netip.Addr
				if fam.name == "v4" && len(info) == 12 { // in_pktinfo: ifindex, spec_dst, addr
					dst = netip.AddrFrom4([4]byte(info[8:12]))
				} else if len(info) == 20 { // in6_pktinfo: addr, ifindex
					dst = netip.AddrFrom16([16]byte(info[:16]))
				}
				if dst.String() != fam.loopback {
					t.Fatalf("destination %v (%x), want %s", dst, info, fam.loopback)
				}
			})
		}
	})
}

// TestNetPacketConnWriteMsgTOS: an IP_TOS (IPV6_TCLASS) control message
// on WriteMsgUDP sets the datagram's traffic class, as ECN wants.
func TestNetPacketConnWriteMsgTOS(t *testing.T) {
	msgImpls(t, func(t *testing.T, listen listenMsg) {
		for _, fam := range ipFamilies {
			t.Run(fam.name, func(t *testing.T) {
				tx := listen(t, fam.network, net.JoinHostPort(fam.loopback, "0"))
				rx, err := net.ListenUDP(fam.network, &net.UDPAddr{IP: net.ParseIP(fam.loopback)})
				if err != nil {
					t.Fatal(err)
				}
				defer rx.Close()
				setInt(t, rx, fam.level, fam.recvTOS, 1)
				var oob []byte
				if fam.name == "v4" {
					oob = cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{testTOS}) // one byte, as QUIC stacks send it
				} else {
					oob = cmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int32Bytes(testTOS))
				}
				n, oobn, err := tx.WriteMsgUDP([]byte("ecn"), oob, rx.LocalAddr().(*net.UDPAddr))
				if err != nil || n != 3 || oobn != len(oob) {
					t.Fatalf("WriteMsgUDP: %d, %d, %v", n, oobn, err)
				}
				rx.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, roob := make([]byte, 64), make([]byte, 128)
				n, roobn, _, _, err := rx.ReadMsgUDP(b, roob)
				if err != nil || string(b[:n]) != "ecn" {
					t.Fatalf("ReadMsgUDP: %q, %v", b[:n], err)
				}
				if got := tosOf(findCmsg(t, roob[:roobn], fam.level, fam.tosType)); got != testTOS {
					t.Fatalf("traffic class %#x, want %#x", got, testTOS)
				}
			})
		}
	})
}

// TestNetPacketConnWriteMsgPktinfo: an IP_PKTINFO control message on
// WriteMsgUDP picks the source address of a socket bound to the
// unspecified address.
func TestNetPacketConnWriteMsgPktinfo(t *testing.T) {
	msgImpls(t, func(t *testing.T, listen listenMsg) {
		tx := listen(t, "udp4", "0.0.0.0:0")
		rx := ctUDP4(t)
		oob := (&ipv4.ControlMessage{Src: net.IPv4(127, 0, 0, 2)}).Marshal()
		if _, _, err := tx.WriteMsgUDP([]byte("from .2"), oob, rx.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatalf("WriteMsgUDP: %v", err)
		}
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, from, err := rx.ReadFromUDPAddrPort(b)
		if err != nil || string(b[:n]) != "from .2" || from.Addr().String() != "127.0.0.2" {
			t.Fatalf("ReadFrom: %q from %v, %v", b[:n], from, err)
		}
	})
}

// TestNetPacketConnWriteMsgGSO: one WriteMsgUDP with a UDP_SEGMENT
// control message sends its bytes as datagrams of that size, the last
// one shorter.
func TestNetPacketConnWriteMsgGSO(t *testing.T) {
	msgImpls(t, func(t *testing.T, listen listenMsg) {
		for _, fam := range ipFamilies {
			t.Run(fam.name, func(t *testing.T) {
				tx := listen(t, fam.network, net.JoinHostPort(fam.loopback, "0"))
				var gsoErr error
				rc, _ := tx.SyscallConn()
				rc.Control(func(fd uintptr) { _, gsoErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT) })
				if gsoErr != nil {
					t.Skipf("no UDP_SEGMENT: %v", gsoErr)
				}
				rx, err := net.ListenUDP(fam.network, &net.UDPAddr{IP: net.ParseIP(fam.loopback)})
				if err != nil {
					t.Fatal(err)
				}
				defer rx.Close()
				const seg, total = 1200, 10*1200 + 345
				batch := make([]byte, total)
				for i := range batch {
					batch[i] = byte(i/seg + i)
				}
				oob := cmsg(unix.IPPROTO_UDP, unix.UDP_SEGMENT, binary.NativeEndian.AppendUint16(nil, seg))
				n, oobn, err := tx.WriteMsgUDP(batch, oob, rx.LocalAddr().(*net.UDPAddr))
				if err != nil || n != total || oobn != len(oob) {
					t.Fatalf("WriteMsgUDP: %d, %d, %v", n, oobn, err)
				}
				rx.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 2048)
				for i := 0; i*seg < total; i++ {
					n, err := rx.Read(buf)
					want := batch[i*seg : min(total, (i+1)*seg)]
					if err != nil || !bytes.Equal(buf[:n], want) {
						t.Fatalf("segment %d: %d B, %v; want %d B", i, n, err, len(want))
					}
				}
			})
		}
	})
}

// TestNetPacketConnWriteMsgErrors: WriteMsgUDP fails as package net's
// does: without a destination on an unconnected socket, with one on a
// connected socket, with malformed control messages, after Close.
func TestNetPacketConnWriteMsgErrors(t *testing.T) {
	msgImpls(t, func(t *testing.T, listen listenMsg) {
		c := listen(t, "udp4", "127.0.0.1:0")
		peer := c.LocalAddr().(*net.UDPAddr)
		var oe *net.OpError
		if _, _, err := c.WriteMsgUDP([]byte("x"), nil, nil); !errors.As(err, &oe) || oe.Op != "write" || oe.Addr != nil || err.Error() != oe.Error() || oe.Err.Error() != "missing address" {
			t.Fatalf("without an address: %#v", err)
		}
		bad := cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{1})
		binary.NativeEndian.PutUint32(bad, 200) // longer than the buffer
		if _, _, err := c.WriteMsgUDP([]byte("x"), bad, peer); !errors.Is(err, syscall.EINVAL) || !errors.As(err, &oe) {
			t.Fatalf("malformed oob: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(-time.Second))
		if _, _, _, _, err := c.ReadMsgUDP(make([]byte, 8), nil); !isTimeout(err) {
			t.Fatalf("ReadMsgUDP after the deadline: %v", err)
		}
		c.Close()
		if _, _, err := c.WriteMsgUDP([]byte("x"), nil, peer); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteMsgUDP after Close: %v", err)
		}
		if _, _, _, _, err := c.ReadMsgUDP(make([]byte, 8), nil); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadMsgUDP after Close: %v", err)
		}
	})
}

// TestNetPacketConnWriteMsgConnected: on a dialed socket WriteMsgUDP sends
// to the peer without an address and refuses one, as package net's does.
func TestNetPacketConnWriteMsgConnected(t *testing.T) {
	rx := ctUDP4(t)
	check := func(t *testing.T, c msgConn) {
		if _, _, err := c.WriteMsgUDP([]byte("x"), nil, rx.LocalAddr().(*net.UDPAddr)); !errors.Is(err, net.ErrWriteToConnected) {
			t.Fatalf("with an address: %v", err)
		}
		if n, _, err := c.WriteMsgUDP([]byte("to peer"), nil, nil); err != nil || n != 7 {
			t.Fatalf("to the peer: %d, %v", n, err)
		}
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		if n, err := rx.Read(b); err != nil || string(b[:n]) != "to peer" {
			t.Fatalf("Read: %q, %v", b[:n], err)
		}
	}
	t.Run("impl=net", func(t *testing.T) {
		c, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		check(t, c)
	})
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		c, err := conn.DialPacketNet(context.Background(), g, "udp4", rx.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { c.Close(); <-c.PacketConn().Done() }()
		check(t, c)
	})
}

// TestNetPacketConnReceiveControlRoom: the receive reserves room for
// control messages only while a receive option asks for them: a datagram
// sent after Control turned one on carries its message, MaxDatagram
// shrinks by the room, and turned off again it is back.
func TestNetPacketConnReceiveControlRoom(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		rx := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		tx := ctUDP4(t)
		setInt(t, tx, unix.IPPROTO_IP, unix.IP_TOS, testTOS)
		full := rx.PacketConn().MaxDatagram()
		b, oob := make([]byte, 64), make([]byte, 128)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		read := func(want string) (int, int) {
			t.Helper()
			tx.WriteTo([]byte(want), rx.LocalAddr())
			n, oobn, flags, _, err := rx.ReadMsgUDP(b, oob)
			if err != nil || string(b[:n]) != want {
				t.Fatalf("ReadMsgUDP: %q, %v", b[:n], err)
			}
			return oobn, flags
		}
		if oobn, flags := read("plain"); oobn != 0 || flags != 0 {
			t.Fatalf("without receive options: oobn %d, flags %#x", oobn, flags)
		}
		setInt(t, rx, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		oobn, flags := read("tos")
		if flags != 0 || tosOf(findCmsg(t, oob[:oobn], unix.IPPROTO_IP, unix.IP_TOS)) != testTOS {
			t.Fatalf("with IP_RECVTOS: %x, flags %#x", oob[:oobn], flags)
		}
		if m := rx.PacketConn().MaxDatagram(); m >= full || m < full-64 {
			t.Fatalf("MaxDatagram %d with IP_RECVTOS, %d without", m, full)
		}
		setInt(t, rx, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		oobn, flags = read("tos+pktinfo")
		findCmsg(t, oob[:oobn], unix.IPPROTO_IP, unix.IP_TOS)
		findCmsg(t, oob[:oobn], unix.IPPROTO_IP, unix.IP_PKTINFO)
		if flags != 0 {
			t.Fatalf("flags %#x with room for both", flags)
		}
		setInt(t, rx, unix.IPPROTO_IP, unix.IP_RECVTOS, 0)
		setInt(t, rx, unix.IPPROTO_IP, unix.IP_PKTINFO, 0)
		if oobn, flags := read("plain again"); oobn != 0 || flags != 0 {
			t.Fatalf("options off: oobn %d, flags %#x", oobn, flags)
		}
		if m := rx.PacketConn().MaxDatagram(); m != full {
			t.Fatalf("MaxDatagram %d with the options off, want %d", m, full)
		}
	})
}

// TestNetPacketConnReadBatch: ReadBatch fills several messages from the
// datagrams queued, each with its payload scattered over Buffers, its
// source, control messages and flags; it waits for one when none is
// queued, and ends at the read deadline and at Close.
func TestNetPacketConnReadBatch(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		rx := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		setInt(t, rx, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		tx := ctUDP4(t)
		setInt(t, tx, unix.IPPROTO_IP, unix.IP_TOS, testTOS)
		sent := []string{"a", "bb", "ccccc", "ddddddd", "0123456789abcdef"}
		for _, s := range sent {
			tx.WriteTo([]byte(s), rx.LocalAddr())
		}
		testutil.WaitFor(t, 5*time.Second, "5 datagrams received", func() bool { return rx.PacketConn().Stats().Received >= 5 })
		ms := make([]ipv4.Message, 8)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 3), make([]byte, 6)}
			ms[i].OOB = make([]byte, 64)
		}
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := rx.ReadBatch(ms, 0)
		if err != nil || n != len(sent) {
			t.Fatalf("ReadBatch: %d, %v; want %d", n, err, len(sent))
		}
		for i, s := range sent {
			m := ms[i]
			got := append(append([]byte(nil), m.Buffers[0]...), m.Buffers[1]...)[:m.N]
			wantFlags := 0
			if len(s) > 9 {
				s, wantFlags = s[:9], unix.MSG_TRUNC
			}
			if string(got) != s || m.Flags != wantFlags {
				t.Fatalf("message %d: %q, flags %#x; want %q, %#x", i, got, m.Flags, s, wantFlags)
			}
			if ua, ok := m.Addr.(*net.UDPAddr); !ok || ua.String() != tx.LocalAddr().String() {
				t.Fatalf("message %d from %#v, want %v", i, m.Addr, tx.LocalAddr())
			}
			if tos := tosOf(findCmsg(t, m.OOB[:m.NN], unix.IPPROTO_IP, unix.IP_TOS)); tos != testTOS {
				t.Fatalf("message %d: traffic class %#x", i, tos)
			}
		}

		// Nothing queued: MSG_DONTWAIT fails at once, a plain call waits.
		if n, err := rx.ReadBatch(ms, unix.MSG_DONTWAIT); n != 0 || !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("ReadBatch(MSG_DONTWAIT) on an empty queue: %d, %v", n, err)
		}
		done := make(chan error, 1)
		go func() {
			n, err := rx.ReadBatch(ms, 0)
			if err == nil && (n != 1 || string(ms[0].Buffers[0][:ms[0].N]) != "z") {
				err = errors.New("not the datagram sent")
			}
			done <- err
		}()
		testutil.WaitFor(t, 5*time.Second, "ReadBatch blocked", func() bool { return conn.NetPacketWaiters(rx) > 0 })
		tx.WriteTo([]byte("z"), rx.LocalAddr())
		if err := <-done; err != nil {
			t.Fatalf("a waiting ReadBatch: %v", err)
		}

		rx.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		if _, err := rx.ReadBatch(ms, 0); !isTimeout(err) {
			t.Fatalf("ReadBatch at the deadline: %v", err)
		}
		rx.SetReadDeadline(time.Time{})
		go func() { _, err := rx.ReadBatch(ms, 0); done <- err }()
		testutil.WaitFor(t, 5*time.Second, "ReadBatch blocked", func() bool { return conn.NetPacketWaiters(rx) > 0 })
		rx.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch at Close: %v", err)
		}
	})
}

// TestNetPacketConnGSORefused: when the kernel refuses a segmented send
// with EIO (a route that cannot take UDP_SEGMENT; loopback always takes
// it, so the refusal is handed to OnPacketError here as the loop would),
// the next WriteMsgUDP with UDP_SEGMENT to that destination fails with
// it, as package net's write would have, so that a QUIC stack stops
// segmenting for that peer; writes without it, and later segmented ones,
// go through.
func TestNetPacketConnGSORefused(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		tx := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		rx := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		rx.WriteTo([]byte("hi"), tx.LocalAddr())
		tx.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, peer, err := tx.ReadFromAddr(make([]byte, 8))
		if err != nil {
			t.Fatal(err)
		}
		seg := cmsg(unix.IPPROTO_UDP, unix.UDP_SEGMENT, binary.NativeEndian.AppendUint16(nil, 100))
		to := rx.LocalAddr().(*net.UDPAddr)
		tx.OnPacketError(tx.PacketConn(), &conn.DatagramError{Op: "write", Addr: peer, Len: 300, Err: os.NewSyscallError("sendmsg", syscall.EIO)})

		if _, _, err := tx.WriteMsgUDP([]byte("plain"), nil, to); err != nil {
			t.Fatalf("a write without UDP_SEGMENT: %v", err)
		}
		_, _, err = tx.WriteMsgUDP(make([]byte, 300), seg, to)
		var se *os.SyscallError
		var oe *net.OpError
		if !errors.As(err, &oe) || !errors.As(err, &se) || se.Syscall != "sendmsg" || se.Err != syscall.EIO {
			t.Fatalf("the segmented write after a refusal: %v", err)
		}
		if n, _, err := tx.WriteMsgUDP(make([]byte, 300), seg, to); err != nil || n != 300 {
			t.Fatalf("the next segmented write: %d, %v", n, err)
		}
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		for i, want := range []int{5, 100, 100, 100} {
			if n, err := rx.Read(buf); err != nil || n != want {
				t.Fatalf("datagram %d: %d B, %v; want %d", i, n, err, want)
			}
		}
	})
}

// TestNetPacketConnWriteMsgUnixRights: on a unixgram socket WriteMsgUDP
// refuses to pass file descriptors, which the loop would send after the
// caller may have closed them.
func TestNetPacketConnWriteMsgUnixRights(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		name := "@ringloop-rights-" + t.Name()
		srv, err := conn.ListenPacketNet(context.Background(), g, "unixgram", name)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { srv.Close(); <-srv.PacketConn().Done() }()
		c, err := conn.DialPacketNet(context.Background(), g, "unixgram", name)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { c.Close(); <-c.PacketConn().Done() }()
		if _, _, err := c.WriteMsgUDP([]byte("x"), unix.UnixRights(0), nil); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("SCM_RIGHTS: %v", err)
		}
		if n, _, err := c.WriteMsgUDP([]byte("plain"), nil, nil); err != nil || n != 5 {
			t.Fatalf("without control messages: %d, %v", n, err)
		}
		srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 16)
		if n, _, flags, addr, err := srv.ReadMsgUDP(b, nil); err != nil || string(b[:n]) != "plain" || flags != 0 || addr != nil {
			t.Fatalf("ReadMsgUDP on unixgram: %q, %#x, %v, %v", b[:n], flags, addr, err)
		}
	})
}

// TestNetPacketConnRawReadRefused: x/net's ipv4.PacketConn reads through
// SyscallConn's RawConn.Read, which the loop refuses: its ReadBatch fails
// at once with an error that says so, instead of blocking, while the
// NetPacketConn's own ReadBatch reads.
func TestNetPacketConnRawReadRefused(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		c := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		c.WriteTo([]byte("self"), c.LocalAddr())
		ms := []ipv4.Message{{Buffers: [][]byte{make([]byte, 16)}}}
		_, err := ipv4.NewPacketConn(c).ReadBatch(ms, 0)
		var oe *net.OpError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), "RawConn.Read and Write are not supported") {
			t.Fatalf("x/net's ReadBatch: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.ReadBatch(ms, 0); err != nil || n != 1 || string(ms[0].Buffers[0][:ms[0].N]) != "self" {
			t.Fatalf("the NetPacketConn's ReadBatch: %d, %v", n, err)
		}
	})
}

// TestNetPacketConnControlRoomUnderTraffic: receive options turned on and
// off while datagrams arrive re-arm the receive each time; no datagram is
// lost, repeated or reordered, and none has a flag but MSG_CTRUNC (one
// that arrived while the room and the option disagreed).
func TestNetPacketConnControlRoomUnderTraffic(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		rx := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		tx := ctUDP4(t)
		setInt(t, tx, unix.IPPROTO_IP, unix.IP_TOS, testTOS)
		const total = 2000
		stop := make(chan struct{})
		toggled := make(chan int)
		go func() {
			n := 0
			defer func() { toggled <- n }()
			for on := 1; ; on ^= 1 {
				select {
				case <-stop:
					return
				default:
				}
				rc, _ := rx.SyscallConn()
				if err := rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, on) }); err != nil {
					t.Errorf("Control: %v", err)
					return
				}
				n++
			}
		}()
		b, oob := make([]byte, 16), make([]byte, 64)
		rx.SetReadDeadline(time.Now().Add(20 * time.Second))
		withTOS := 0
		for i := range total {
			want := binary.BigEndian.AppendUint32(nil, uint32(i))
			if _, err := tx.WriteTo(want, rx.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			n, oobn, flags, _, err := rx.ReadMsgUDP(b, oob)
			if err != nil || !bytes.Equal(b[:n], want) || flags&^unix.MSG_CTRUNC != 0 {
				close(stop)
				<-toggled
				t.Fatalf("datagram %d: % x, flags %#x, %v", i, b[:n], flags, err)
			}
			if oobn > 0 && tosOf(findCmsg(t, oob[:oobn], unix.IPPROTO_IP, unix.IP_TOS)) == testTOS {
				withTOS++
			}
		}
		close(stop)
		n := <-toggled
		t.Logf("%d toggles; %d of %d datagrams with their traffic class", n, withTOS, total)
	})
}

// TestNetPacketConnMsgAllocs: in a steady exchange, WriteMsgUDPAddrPort
// with control messages and ReadMsgUDPAddrPort with a datagram's control
// messages allocate nothing: the queues reuse their buffers.
func TestNetPacketConnMsgAllocs(t *testing.T) {
	if accRace {
		t.Skip("the race detector allocates")
	}
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		tx := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		rx := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		setInt(t, rx, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
		msg, buf, oob := make([]byte, 1200), make([]byte, 1500), make([]byte, 128)
		tos := cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{testTOS})
		rx.SetReadDeadline(time.Now().Add(30 * time.Second))
		exchange := func() {
			if _, _, err := tx.WriteMsgUDPAddrPort(msg, tos, to); err != nil {
				t.Fatal(err)
			}
			if n, oobn, _, _, err := rx.ReadMsgUDPAddrPort(buf, oob); err != nil || n != len(msg) || oobn == 0 {
				t.Fatalf("ReadMsgUDPAddrPort: %d, %d, %v", n, oobn, err)
			}
		}
		for range 100 {
			exchange()
		}
		if a := testing.AllocsPerRun(1000, exchange); a > 0 {
			t.Fatalf("%.2f allocations per datagram, want 0", a)
		}
	})
}

// TestPacketLargeWriteAllocs: queued writes of large datagrams (up to
// 64 KiB, as a segmented write is) take buffers their predecessors gave
// back instead of allocating them, also in bursts of many: a bulk sender's
// queue makes no garbage.
func TestPacketLargeWriteAllocs(t *testing.T) {
	if accRace {
		t.Skip("the race detector allocates")
	}
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		tx := ctListenNet(t, g, "udp4", "127.0.0.1:0").PacketConn()
		rx := ctUDP4(t)
		if err := rx.SetReadBuffer(4 << 20); err != nil {
			t.Fatal(err)
		}
		to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
		const burst = 32
		msg, buf := make([]byte, 32<<10), make([]byte, 64<<10)
		rx.SetReadDeadline(time.Now().Add(30 * time.Second))
		exchange := func() {
			for range burst {
				if _, err := tx.WriteToAddrPort(msg, to); err != nil {
					t.Fatal(err)
				}
			}
			for range burst {
				if n, _, err := rx.ReadFromUDPAddrPort(buf); err != nil || n != len(msg) {
					t.Fatalf("ReadFromUDPAddrPort: %d, %v", n, err)
				}
			}
		}
		for range 10 {
			exchange()
		}
		// A collection empties the shared pool now and then (a burst's
		// 32 buffers allocated again): a few in a burst on average. A
		// socket keeping 16 spare buffers of its own allocated 16.
		if a := testing.AllocsPerRun(100, exchange); a >= 4 {
			t.Fatalf("%.2f allocations per burst of %d queued 32 KiB datagrams, want none", a, burst)
		}
	})
}
