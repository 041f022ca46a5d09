package sock_test

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/sock"
)

func TestRawAddrPort(t *testing.T) {
	var b [unix.SizeofSockaddrAny]byte
	for _, tc := range []struct {
		ap     string
		family int
		n      int
		back   string
	}{
		{"127.0.0.1:53", unix.AF_INET, unix.SizeofSockaddrInet4, "127.0.0.1:53"},
		{"[::ffff:10.1.2.3]:9", unix.AF_INET, unix.SizeofSockaddrInet4, "10.1.2.3:9"},
		{"10.1.2.3:9", unix.AF_INET6, unix.SizeofSockaddrInet6, "[::ffff:10.1.2.3]:9"},
		{"[2001:db8::1]:65535", unix.AF_INET6, unix.SizeofSockaddrInet6, "[2001:db8::1]:65535"},
		{"[fe80::1%7]:1", unix.AF_INET6, unix.SizeofSockaddrInet6, "[fe80::1%7]:1"},
	} {
		n, err := sock.PutAddrPort(b[:], netip.MustParseAddrPort(tc.ap), tc.family)
		if err != nil || n != tc.n {
			t.Fatalf("PutAddrPort(%s, %d) = %d, %v; want %d", tc.ap, tc.family, n, err, tc.n)
		}
		back, ok := sock.ParseAddrPort(b[:n])
		if !ok || back.String() != tc.back {
			t.Fatalf("ParseAddrPort(PutAddrPort(%s)) = %v, %v; want %s", tc.ap, back, ok, tc.back)
		}
	}
	if _, err := sock.PutAddrPort(b[:], netip.MustParseAddrPort("[2001:db8::1]:1"), unix.AF_INET); err == nil {
		t.Fatal("an IPv6 address was written for an IPv4 socket")
	}
	if _, err := sock.PutAddrPort(b[:], netip.AddrPort{}, unix.AF_INET6); err == nil {
		t.Fatal("an invalid address was written")
	}
	if _, ok := sock.ParseAddrPort(b[:1]); ok {
		t.Fatal("ParseAddrPort read a 1-byte address")
	}

	// sun_path's 108 bytes may all be name: a path without its NUL, or
	// an abstract name of 107 bytes after the leading NUL.
	long := "/" + strings.Repeat("p", 107)
	for _, name := range []string{"/tmp/x.sock", "@abstract", long, "@" + long[1:]} {
		n, err := sock.PutUnixName(b[:], name)
		if err != nil {
			t.Fatal(err)
		}
		got, abstract, ok := sock.UnixName(b[:n])
		want := name
		if abstract {
			want = name[1:]
		}
		if !ok || string(got) != want || abstract != (name[0] == '@') {
			t.Fatalf("UnixName(PutUnixName(%q)) = %q, %v, %v", name, got, abstract, ok)
		}
	}
	if _, err := sock.PutUnixName(b[:], long+"x"); err == nil {
		t.Fatal("a 109-byte Unix socket name was written")
	}
	if got, _, ok := sock.UnixName(b[:2]); !ok || len(got) != 0 {
		t.Fatalf("unnamed: %q, %v", got, ok)
	}
}
