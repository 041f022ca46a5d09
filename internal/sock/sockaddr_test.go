//go:build linux

package sock_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/sock"
)

// saString spells out a socket address's public fields, for comparisons.
func saString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return fmt.Sprintf("inet4 %v port %d", a.Addr, a.Port)
	case *unix.SockaddrInet6:
		return fmt.Sprintf("inet6 %v port %d zone %d", a.Addr, a.Port, a.ZoneId)
	case *unix.SockaddrUnix:
		return fmt.Sprintf("unix %q", a.Name)
	}
	return fmt.Sprintf("%T %v", sa, sa)
}

// TestSockaddrRoundTrip: every supported family, including the edge
// lengths of Unix names, decodes to what was encoded, with the length the
// kernel expects.
func TestSockaddrRoundTrip(t *testing.T) {
	long := strings.Repeat("p", 107)
	for _, c := range []struct {
		sa unix.Sockaddr
		n  uint32
	}{
		{&unix.SockaddrInet4{Port: 0xabcd, Addr: [4]byte{10, 1, 2, 3}}, unix.SizeofSockaddrInet4},
		{&unix.SockaddrInet4{Port: 0, Addr: [4]byte{127, 0, 0, 1}}, unix.SizeofSockaddrInet4},
		{&unix.SockaddrInet4{Port: 65535}, unix.SizeofSockaddrInet4},
		{&unix.SockaddrInet6{Port: 443, ZoneId: 7, Addr: [16]byte{0: 0xfe, 1: 0x80, 15: 9}}, unix.SizeofSockaddrInet6},
		{&unix.SockaddrInet6{Port: 1, ZoneId: 0xfffffffe, Addr: [16]byte{15: 1}}, unix.SizeofSockaddrInet6},
		{&unix.SockaddrUnix{Name: "/tmp/x.sock"}, 2 + 11 + 1},
		{&unix.SockaddrUnix{Name: long}, 2 + 107 + 1},
		{&unix.SockaddrUnix{Name: "@hidden"}, 2 + 7},
		{&unix.SockaddrUnix{Name: "@" + long}, 2 + 108},
		{&unix.SockaddrUnix{Name: ""}, 2},
	} {
		var raw unix.RawSockaddrAny
		raw.Pad[len(raw.Pad)-1] = 1 // must be cleared
		n, err := sock.PutSockaddr(&raw, c.sa)
		if err != nil || n != c.n {
			t.Errorf("PutSockaddr(%s) = %d, %v; want %d", saString(c.sa), n, err, c.n)
			continue
		}
		if raw.Pad[len(raw.Pad)-1] != 0 {
			t.Errorf("PutSockaddr(%s) left old bytes in raw", saString(c.sa))
		}
		got, err := sock.ParseSockaddr(&raw, n)
		if err != nil || saString(got) != saString(c.sa) {
			t.Errorf("ParseSockaddr(PutSockaddr(%s)) = %v, %v", saString(c.sa), saString(got), err)
		}
	}
	// A Unix name given with a leading NUL is abstract too, spelled "@".
	var raw unix.RawSockaddrAny
	n, err := sock.PutSockaddr(&raw, &unix.SockaddrUnix{Name: "\x00nul"})
	got, err2 := sock.ParseSockaddr(&raw, n)
	if err != nil || err2 != nil || n != 2+4 || saString(got) != `unix "@nul"` {
		t.Errorf("leading NUL: %d %v %v %v", n, saString(got), err, err2)
	}
}

func TestSockaddrErrors(t *testing.T) {
	var raw unix.RawSockaddrAny
	for _, c := range []struct {
		sa   unix.Sockaddr
		want error
	}{
		{&unix.SockaddrInet4{Port: 70000}, unix.EINVAL},
		{&unix.SockaddrInet4{Port: -1}, unix.EINVAL},
		{&unix.SockaddrInet6{Port: 65536}, unix.EINVAL},
		{&unix.SockaddrUnix{Name: strings.Repeat("p", 108)}, unix.EINVAL},
		{&unix.SockaddrUnix{Name: "@" + strings.Repeat("p", 108)}, unix.EINVAL},
		{&unix.SockaddrNetlink{Family: unix.AF_NETLINK}, unix.EAFNOSUPPORT},
		{nil, unix.EINVAL},
	} {
		n, err := sock.PutSockaddr(&raw, c.sa)
		if !errors.Is(err, c.want) || n != 0 || !strings.HasPrefix(err.Error(), "ring: ") {
			t.Errorf("PutSockaddr(%s) = %d, %v; want %v", saString(c.sa), n, err, c.want)
		}
	}
	raw = unix.RawSockaddrAny{}
	raw.Addr.Family = unix.AF_INET
	for _, c := range []struct {
		family uint16
		n      uint32
		want   error
	}{
		{unix.AF_INET, 1, unix.EINVAL},
		{unix.AF_INET, 8, unix.EINVAL},
		{unix.AF_INET6, unix.SizeofSockaddrInet6 - 1, unix.EINVAL},
		{unix.AF_INET, unix.SizeofSockaddrAny + 1, unix.EINVAL},
		{unix.AF_APPLETALK, 16, unix.EAFNOSUPPORT},
	} {
		raw.Addr.Family = c.family
		if sa, err := sock.ParseSockaddr(&raw, c.n); !errors.Is(err, c.want) || sa != nil {
			t.Errorf("ParseSockaddr(family %d, %d bytes) = %v, %v; want %v", c.family, c.n, sa, err, c.want)
		}
	}
}

// TestSockaddrKernel checks both directions against the kernel on real
// sockets of every family: a connect(2) to an address encoded by
// PutSockaddr reaches the listener, and the peer address accept(2) wrote
// decodes to what getsockname(2) and getpeername(2) report.
func TestSockaddrKernel(t *testing.T) {
	dir := t.TempDir()
	abstract := fmt.Sprintf("@ringloop-sockaddr-%d", os.Getpid())
	for _, c := range []struct {
		name         string
		family       int
		listen, bind unix.Sockaddr // bind: the client's own address, if any
	}{
		{"inet4", unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}, nil},
		{"inet6", unix.AF_INET6, &unix.SockaddrInet6{Addr: [16]byte{15: 1}}, nil},
		{"unix-path", unix.AF_UNIX, &unix.SockaddrUnix{Name: filepath.Join(dir, "l")}, &unix.SockaddrUnix{Name: filepath.Join(dir, "c")}},
		{"unix-abstract", unix.AF_UNIX, &unix.SockaddrUnix{Name: abstract + "-l"}, &unix.SockaddrUnix{Name: abstract + "-c"}},
		{"unix-unnamed-peer", unix.AF_UNIX, &unix.SockaddrUnix{Name: abstract + "-u"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			lfd := sockaddrSocket(t, c.family)
			if err := unix.Bind(lfd, c.listen); err != nil {
				if c.family == unix.AF_INET6 {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			if err := unix.Listen(lfd, 4); err != nil {
				t.Fatal(err)
			}
			lsa, err := unix.Getsockname(lfd)
			if err != nil {
				t.Fatal(err)
			}
			cfd := sockaddrSocket(t, c.family)
			if c.bind != nil {
				if err := unix.Bind(cfd, c.bind); err != nil {
					t.Fatal(err)
				}
			}

			var target, peer unix.RawSockaddrAny
			tn, err := sock.PutSockaddr(&target, lsa)
			if err != nil {
				t.Fatal(err)
			}
			if err := rawConnect(cfd, &target, tn); err != nil {
				t.Fatalf("connect to %s: %v", saString(lsa), err)
			}
			peerLen := uint32(unix.SizeofSockaddrAny)
			afd, err := rawAccept(lfd, &peer, &peerLen)
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			defer unix.Close(afd)

			csa, err := unix.Getsockname(cfd)
			if err != nil {
				t.Fatal(err)
			}
			apeer, err := unix.Getpeername(afd)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := sock.ParseSockaddr(&peer, peerLen)
			if err != nil {
				t.Fatalf("ParseSockaddr(accepted peer, %d bytes): %v", peerLen, err)
			}
			want := saString(csa)
			if c.family == unix.AF_UNIX && peerLen == 2 {
				// Unnamed: x/sys/unix ignores the length and spells it
				// "@", the name of an abstract socket; the length says
				// there is no name at all.
				if want != `unix "@"` {
					t.Fatalf("unnamed client: getsockname %s", want)
				}
				want = `unix ""`
			}
			if saString(dec) != want || saString(apeer) != saString(csa) {
				t.Fatalf("accepted peer decodes to %s; getsockname(client) %s, getpeername(accepted) %s",
					saString(dec), saString(csa), saString(apeer))
			}
			if cpeer, err := unix.Getpeername(cfd); err != nil || saString(cpeer) != saString(lsa) {
				t.Fatalf("client's peer %s, %v; listener %s", saString(cpeer), err, saString(lsa))
			}
			// The kernel's length is the one PutSockaddr gives.
			var again unix.RawSockaddrAny
			if n, err := sock.PutSockaddr(&again, dec); err != nil || n != peerLen || again != peer {
				t.Fatalf("re-encoded peer: %d bytes (kernel %d), %v, same bytes %v", n, peerLen, err, again == peer)
			}
		})
	}
}

// rawConnect is connect(2) on an address in the kernel's layout.
func rawConnect(fd int, sa *unix.RawSockaddrAny, n uint32) error {
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(sa)), uintptr(n))
	if e != 0 {
		return e
	}
	return nil
}

// rawAccept is accept4(2), the peer's address written into sa and its
// length into n.
func rawAccept(fd int, sa *unix.RawSockaddrAny, n *uint32) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(n)), unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func sockaddrSocket(t *testing.T, family int) int {
	t.Helper()
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if family == unix.AF_INET6 {
			t.Skipf("no IPv6: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestSockaddrAddrPort(t *testing.T) {
	for _, c := range []struct {
		sa unix.Sockaddr
		ap string
	}{
		{&unix.SockaddrInet4{Port: 8080, Addr: [4]byte{192, 0, 2, 1}}, "192.0.2.1:8080"},
		{&unix.SockaddrInet6{Port: 443, Addr: [16]byte{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8, 15: 1}}, "[2001:db8::1]:443"},
		{&unix.SockaddrInet6{Port: 9, ZoneId: 3, Addr: [16]byte{0: 0xfe, 1: 0x80, 15: 1}}, "[fe80::1%3]:9"},
		{&unix.SockaddrInet6{Port: 1, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}, "[::ffff:127.0.0.1]:1"},
	} {
		ap, ok := sock.SockaddrToAddrPort(c.sa)
		if !ok || ap.String() != c.ap {
			t.Errorf("SockaddrToAddrPort(%s) = %v, %v; want %s", saString(c.sa), ap, ok, c.ap)
		}
		back, err := sock.AddrPortToSockaddr(netip.MustParseAddrPort(c.ap))
		if err != nil || saString(back) != saString(c.sa) {
			t.Errorf("AddrPortToSockaddr(%s) = %s, %v", c.ap, saString(back), err)
		}
	}
	if _, ok := sock.SockaddrToAddrPort(&unix.SockaddrUnix{Name: "/x"}); ok {
		t.Error("a Unix address converted to an AddrPort")
	}
	if _, err := sock.AddrPortToSockaddr(netip.AddrPort{}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("zero AddrPort: %v", err)
	}
	if _, err := sock.AddrPortToSockaddr(netip.MustParseAddrPort("[fe80::1%no-such-if0]:1")); !errors.Is(err, unix.EINVAL) {
		t.Errorf("unknown zone: %v", err)
	}
	if sa, err := sock.AddrPortToSockaddr(netip.MustParseAddrPort("[fe80::1%lo]:1")); err != nil || sa.(*unix.SockaddrInet6).ZoneId == 0 {
		t.Errorf("zone lo: %v, %v", sa, err)
	}
}

// PeerAddrPort and LocalAddrPort read what unix.Getpeername and
// unix.Getsockname read, for IPv4 and IPv6, without allocating, and report
// ok false for a Unix socket.
func TestAddrPort(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		ln, err := net.Listen(network, map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network])
		if err != nil {
			t.Skipf("%s: %v", network, err)
		}
		c, err := net.Dial(network, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		sc.Control(func(fd uintptr) {
			peer, _, ok, err := sock.PeerAddrPort(int(fd))
			if err != nil || !ok || peer.String() != c.RemoteAddr().String() {
				t.Errorf("%s PeerAddrPort = %v %v %v, want %v", network, peer, ok, err, c.RemoteAddr())
			}
			local, _, ok, err := sock.LocalAddrPort(int(fd))
			if err != nil || !ok || local.String() != c.LocalAddr().String() {
				t.Errorf("%s LocalAddrPort = %v %v %v, want %v", network, local, ok, err, c.LocalAddr())
			}
			if n := testing.AllocsPerRun(10, func() { sock.PeerAddrPort(int(fd)) }); n != 0 {
				t.Errorf("PeerAddrPort allocates %.0f times", n)
			}
		})
		c.Close()
		ln.Close()
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, _, ok, err := sock.PeerAddrPort(fds[0]); ok || err != nil {
		t.Fatalf("PeerAddrPort of a Unix socket: ok %v err %v", ok, err)
	}
	if _, _, _, err := sock.PeerAddrPort(-1); err == nil {
		t.Fatal("sock.PeerAddrPort(-1) succeeded")
	}
}
