//go:build linux

package loop

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// Helpers the driver tests share: sockets, byte streams and addresses.

// logWriter sends a driver's log lines to the test log.
type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// streamPairs are the two stream transports every data op is checked on.
var streamPairs = []struct {
	name string
	pair func(testing.TB) (int, int)
}{
	{"tcp", testutil.TCPPair},
	{"unix", testutil.SocketPair},
}

// writeN writes all of p to the blocking fd; safe off the test goroutine.
func writeN(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func writeAll(tb testing.TB, fd int, p []byte) {
	tb.Helper()
	if err := writeN(fd, p); err != nil {
		tb.Fatalf("write: %v", err)
	}
}

// readN reads exactly n bytes from the blocking fd; safe off the test
// goroutine. slow pauses now and then, so that the sender's socket fills.
func readN(fd int, n int, slow bool) ([]byte, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, 64<<10)
	for i := 0; len(out) < n; i++ {
		k, err := unix.Read(fd, buf[:min(len(buf), n-len(out))])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if k == 0 {
			return out, io.ErrUnexpectedEOF
		}
		out = append(out, buf[:k]...)
		if slow && i%8 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return out, nil
}

func readFull(tb testing.TB, fd int, n int) []byte {
	tb.Helper()
	out, err := readN(fd, n, false)
	if err != nil {
		tb.Fatalf("read after %d of %d bytes: %v", len(out), n, err)
	}
	return out
}

// pattern returns n pseudo-random bytes: a lost, duplicated or reordered
// chunk of it cannot go unnoticed.
func pattern(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// commonPrefix returns how many leading bytes a and b share.
func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// fillSocket writes into fd (made non-blocking for the purpose) until its
// send buffer is full, and returns the bytes written.
func fillSocket(tb testing.TB, fd int) []byte {
	tb.Helper()
	if err := unix.SetNonblock(fd, true); err != nil {
		tb.Fatal(err)
	}
	defer unix.SetNonblock(fd, false)
	var sent []byte
	chunk := pattern(4096, 99)
	for {
		n, err := unix.Write(fd, chunk)
		if err == unix.EAGAIN {
			return sent
		}
		if err != nil {
			tb.Fatalf("fill: %v", err)
		}
		sent = append(sent, chunk[:n]...)
	}
}

// newSocket returns a new blocking stream socket closed by tb.Cleanup.
func newSocket(tb testing.TB, family int) int {
	tb.Helper()
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socket: %v", err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	return fd
}

// rawListener returns a blocking TCP listener on 127.0.0.1:0 with backlog.
func rawListener(tb testing.TB, backlog int) int {
	tb.Helper()
	fd := newSocket(tb, unix.AF_INET)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		tb.Fatal(err)
	}
	return fd
}

// dupFd returns a dup of fd that the test hands to a close op.
func dupFd(tb testing.TB, fd int) int {
	tb.Helper()
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("dup: %v", err)
	}
	return n
}

// putSockaddr encodes sa into raw and returns its length
// (ring.PutSockaddr, which cannot fail on the addresses these tests use).
func putSockaddr(raw *unix.RawSockaddrAny, sa unix.Sockaddr) uint32 {
	n, err := ring.PutSockaddr(raw, sa)
	if err != nil {
		panic(err)
	}
	return n
}
