package loop_test

import (
	"bytes"
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
		g := newGroup(t, b, append([]loop.Option{loop.WithLoops(1), loop.WithBufferRing(16, 2048)}, opts...)...)
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
	g2 := newGroup(t, loop.BackendEpoll, loop.WithLoops(1), loop.WithBufferRing(16, 128))
	runOn(t, g2.Loop(0), func() {
		if n := g2.Loop(0).IO().MaxDatagram(); n != 0 {
			t.Errorf("MaxDatagram with 128-byte buffers = %d", n)
		}
		if _, err := g2.Loop(0).IO().RecvmsgProvided(0, 0, completerFunc(func(*loop.Completion) {})); err == nil {
			t.Error("RecvmsgProvided accepted buffers that hold no datagram")
		}
	})
}
