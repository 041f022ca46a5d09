package loop_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// dgramModes are the ways a loop receives datagrams: a multishot RECVMSG
// from the buffer ring (uring), a poll and then recvmmsg(2) batches
// (epoll).
var dgramModes = []struct {
	name string
	be   loop.Backend
	opts []loop.Option
}{
	{"uring", loop.BackendUring, nil},
	{"epoll", loop.BackendEpoll, nil},
}

func forEachDgramMode(t *testing.T, f func(t *testing.T, b loop.Backend, opts []loop.Option)) {
	for _, m := range dgramModes {
		t.Run(m.name, func(t *testing.T) {
			if m.be == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			f(t, m.be, m.opts)
		})
	}
}

// udpSocket opens a non-blocking UDP socket bound to 127.0.0.1:0.
func udpSocket(t *testing.T) (int, netip.AddrPort) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	ap, _ := sock.SockaddrToAddrPort(sa)
	return fd, ap
}

// TestDatagramEcho: a loop echoes datagrams with RecvmsgProvided and
// SendTo, replying to each source: empty, small, whole at MaxDatagram,
// and truncated (reported with MSG_TRUNC and the whole length).
func TestDatagramEcho(t *testing.T) {
	forEachDgramMode(t, func(t *testing.T, b loop.Backend, opts []loop.Option) {
		g := newGroup(t, b, append([]loop.Option{loop.WithLoops(1), loop.WithDatagramBuffers(16, 2048)}, opts...)...)
		l := g.Loop(0)
		srv, srvAddr := udpSocket(t)
		defer unix.Close(srv)
		maxDgram := l.IO().MaxDatagram()
		if maxDgram != 2048-128 {
			t.Fatalf("MaxDatagram = %d, want %d", maxDgram, 2048-128)
		}
		client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()

		var mu sync.Mutex
		var truncs []string
		var rearms int
		var arm func()
		arm = func() {
			_, err := l.IO().RecvmsgProvided(srv, 0, completerFunc(func(c *loop.Completion) {
				if c.Res == -int32(unix.ECANCELED) {
					return // the group shuts down
				}
				if c.Res < 0 {
					t.Errorf("receive: %v", unix.Errno(-c.Res))
					return
				}
				if c.MsgFlags&unix.MSG_TRUNC != 0 {
					mu.Lock()
					truncs = append(truncs, fmt.Sprintf("%d/%d", c.Res, len(c.Data)))
					mu.Unlock()
				}
				from, ok := sock.ParseAddrPort(c.Name)
				if !ok || from != client.LocalAddr().(*net.UDPAddr).AddrPort() {
					t.Errorf("source %v (%v, % x), want %v; res %d flags %#x msgflags %#x data %d", from, ok, c.Name, client.LocalAddr(), c.Res, c.Flags, c.MsgFlags, len(c.Data))
				}
				reply := append([]byte(nil), c.Data...)
				if _, err := l.IO().SendTo(srv, reply, c.Name, 0, completerFunc(func(s *loop.Completion) {
					if s.Res != int32(len(reply)) {
						t.Errorf("SendTo: %d, want %d", s.Res, len(reply))
					}
				})); err != nil {
					t.Errorf("SendTo: %v", err)
				}
				if !c.More() {
					mu.Lock()
					rearms++
					mu.Unlock()
					arm()
				}
			}))
			if err != nil {
				t.Errorf("RecvmsgProvided: %v", err)
			}
		}
		runOn(t, l, arm)

		sizes := []int{0, 1, 100, maxDgram, maxDgram + 1, 9000}
		for round := range 20 {
			for i, n := range sizes {
				msg := bytes.Repeat([]byte{byte(round*len(sizes) + i)}, n)
				if _, err := client.WriteToUDPAddrPort(msg, srvAddr); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 16384)
				client.SetReadDeadline(time.Now().Add(5 * time.Second))
				got, _, err := client.ReadFromUDPAddrPort(buf)
				if err != nil {
					t.Fatalf("round %d, %d B: %v", round, n, err)
				}
				want := msg[:min(n, maxDgram)]
				if !bytes.Equal(buf[:got], want) {
					t.Fatalf("round %d: echo of %d B is %d B, want %d", round, n, got, len(want))
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(truncs) != 40 || truncs[0] != fmt.Sprintf("%d/%d", maxDgram+1, maxDgram) || truncs[1] != fmt.Sprintf("9000/%d", maxDgram) {
			t.Fatalf("truncated datagrams reported: %d %v; want 40 as whole length/bytes kept", len(truncs), truncs[:min(len(truncs), 4)])
		}
		t.Logf("%d re-arms", rearms)
	})
}

// TestDatagramConnRefused: on a connected UDP socket whose peer has no
// socket, the ICMP port unreachable ends the receive with -ECONNREFUSED
// (re-armed, it serves again), and a later send may fail with it too;
// neither closes anything.
func TestDatagramConnRefused(t *testing.T) {
	forEachDgramMode(t, func(t *testing.T, b loop.Backend, opts []loop.Option) {
		g := newGroup(t, b, append([]loop.Option{loop.WithLoops(1)}, opts...)...)
		l := g.Loop(0)
		fd, _ := udpSocket(t)
		defer unix.Close(fd)
		gone, goneAddr := udpSocket(t)
		unix.Close(gone)
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(goneAddr.Port()), Addr: goneAddr.Addr().As4()}); err != nil {
			t.Fatal(err)
		}
		refused := make(chan int32, 16)
		runOn(t, l, func() {
			if _, err := l.IO().RecvmsgProvided(fd, 0, completerFunc(func(c *loop.Completion) {
				if !c.More() {
					refused <- c.Res
				}
			})); err != nil {
				t.Error(err)
			}
			if _, err := l.IO().SendTo(fd, []byte("anyone?"), nil, 0, completerFunc(func(c *loop.Completion) {
				if c.Res != 7 {
					t.Errorf("first send: %d", c.Res)
				}
			})); err != nil {
				t.Error(err)
			}
		})
		select {
		case res := <-refused:
			if res != -int32(unix.ECONNREFUSED) {
				t.Fatalf("receive ended with %d, want -ECONNREFUSED", res)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no ECONNREFUSED within 5s")
		}
	})
}

func TestSendToBadAddress(t *testing.T) {
	g := newGroup(t, loop.BackendEpoll, loop.WithLoops(1))
	l := g.Loop(0)
	runOn(t, l, func() {
		if _, err := l.IO().SendTo(0, nil, make([]byte, 200), 0, completerFunc(func(*loop.Completion) {})); err == nil {
			t.Error("SendTo accepted a 200-byte address")
		}
	})
	g2 := newGroup(t, loop.BackendEpoll, loop.WithLoops(1), loop.WithDatagramBuffers(16, 128))
	runOn(t, g2.Loop(0), func() {
		if n := g2.Loop(0).IO().MaxDatagram(); n != 0 {
			t.Errorf("MaxDatagram with 128-byte buffers = %d", n)
		}
		if _, err := g2.Loop(0).IO().RecvmsgProvided(0, 0, completerFunc(func(*loop.Completion) {})); err == nil {
			t.Error("RecvmsgProvided accepted buffers that hold no datagram")
		}
	})
}

// TestDatagramControl: RecvmsgProvidedControl delivers each datagram's
// control messages (here its IP_TOS, asked for with IP_RECVTOS) in
// Control, with the payload whole up to MaxDatagram less the room, and
// SendToControl sends control messages (an IP_TOS) with a datagram.
func TestDatagramControl(t *testing.T) {
	forEachDgramMode(t, func(t *testing.T, b loop.Backend, opts []loop.Option) {
		g := newGroup(t, b, append([]loop.Option{loop.WithLoops(1), loop.WithDatagramBuffers(16, 2048)}, opts...)...)
		l := g.Loop(0)
		srv, srvAddr := udpSocket(t)
		defer unix.Close(srv)
		if err := unix.SetsockoptInt(srv, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			t.Fatal(err)
		}
		const room, tos = 60, 0x2e<<2 | 1 // rounded up to 64; DSCP EF, ECT(1)
		maxDgram := l.IO().MaxDatagram() - loop.ControlRoom(room)
		if loop.ControlRoom(room) != 64 {
			t.Fatalf("ControlRoom(%d) = %d, want 64", room, loop.ControlRoom(room))
		}
		client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		rc, _ := client.SyscallConn()
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		})

		type got struct {
			n, kept int
			flags   uint32
			tos     int
		}
		results := make(chan got, 16)
		var arm func()
		arm = func() {
			_, err := l.IO().RecvmsgProvidedControl(srv, 0, room, completerFunc(func(c *loop.Completion) {
				if c.Res < 0 {
					if c.Res != -int32(unix.ECANCELED) {
						t.Errorf("receive: %v", unix.Errno(-c.Res))
					}
					return
				}
				r := got{n: int(c.Res), kept: len(c.Data), flags: c.MsgFlags, tos: -1}
				if msgs, err := unix.ParseSocketControlMessage(c.Control); err == nil {
					for _, m := range msgs {
						if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) == 1 {
							r.tos = int(m.Data[0])
						}
					}
				}
				results <- r
				// Reply with the traffic class as a control message.
				ctl := make([]byte, unix.CmsgSpace(1))
				putCmsg(ctl, unix.IPPROTO_IP, unix.IP_TOS, []byte{tos})
				reply := []byte("reply")
				if _, err := l.IO().SendToControl(srv, reply, c.Name, ctl, 0, completerFunc(func(s *loop.Completion) {
					if s.Res != int32(len(reply)) {
						t.Errorf("SendToControl: %d, want %d", s.Res, len(reply))
					}
				})); err != nil {
					t.Errorf("SendToControl: %v", err)
				}
				if !c.More() {
					arm()
				}
			}))
			if err != nil {
				t.Errorf("RecvmsgProvidedControl: %v", err)
			}
		}
		runOn(t, l, arm)

		buf, oob := make([]byte, 64), make([]byte, 64)
		for _, n := range []int{0, 10, maxDgram, maxDgram + 1} {
			if _, err := client.WriteToUDPAddrPort(make([]byte, n), srvAddr); err != nil {
				t.Fatal(err)
			}
			var r got
			select {
			case r = <-results:
			case <-time.After(5 * time.Second):
				t.Fatalf("%d B: nothing received", n)
			}
			trunc := n > maxDgram
			if r.n != n || r.kept != min(n, maxDgram) || (r.flags&unix.MSG_TRUNC != 0) != trunc || r.tos != tos {
				t.Fatalf("%d B: Res %d, %d B kept, flags %#x, TOS %#x; want TOS %#x, truncated %v", n, r.n, r.kept, r.flags, r.tos, tos, trunc)
			}
			client.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, oobn, _, _, err := client.ReadMsgUDP(buf, oob)
			if err != nil || string(buf[:k]) != "reply" {
				t.Fatalf("reply: %q, %v", buf[:k], err)
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil || len(msgs) != 1 || len(msgs[0].Data) != 1 || msgs[0].Data[0] != tos {
				t.Fatalf("the reply's control messages: %v, %v", msgs, err)
			}
		}

		// A room that leaves no payload is refused.
		runOn(t, l, func() {
			if _, err := l.IO().RecvmsgProvidedControl(srv, 0, 2048-128, completerFunc(func(*loop.Completion) {})); err == nil {
				t.Error("a room as large as the buffers was accepted")
			}
		})
	})
}

// putCmsg writes one control message at the start of b (unix.CmsgSpace
// of data bytes).
func putCmsg(b []byte, level, typ int, data []byte) {
	n := uint64(unix.CmsgLen(len(data)))
	if unix.SizeofCmsghdr == 16 {
		binary.NativeEndian.PutUint64(b, n)
		b = b[8:]
	} else {
		binary.NativeEndian.PutUint32(b, uint32(n))
		b = b[4:]
	}
	binary.NativeEndian.PutUint32(b, uint32(level))
	binary.NativeEndian.PutUint32(b[4:], uint32(typ))
	copy(b[8:], data)
}
