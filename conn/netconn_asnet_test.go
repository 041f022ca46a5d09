package conn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// asNetImpl is one implementation of the stream contract below: package
// net itself (the reference) or the adapters on one backend.
type asNetImpl struct {
	name    string
	adapter bool
	b       loop.Backend
}

// asNetImpls returns package net and the adapters on each backend.
func asNetImpls() []asNetImpl {
	return []asNetImpl{{name: "net"}, {name: "uring", adapter: true, b: loop.BackendUring}, {name: "epoll", adapter: true, b: loop.BackendEpoll}}
}

// listeners returns a function making TCP listeners of impl on 127.0.0.1
// (the adapters' all on one group of two loops, which the test shuts down
// at its end).
func (impl asNetImpl) listeners(t *testing.T) func() net.Listener {
	if !impl.adapter {
		return func() net.Listener {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return ln
		}
	}
	if impl.b == loop.BackendUring {
		testutil.SkipIfNoUring(t)
	}
	g := ctGroup(t, impl.b, 2)
	return func() net.Listener {
		ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
}

// pipe returns the server side (from impl's listener) and a package-net
// client connected to it; all close when the test ends.
func (impl asNetImpl) pipe(t *testing.T) (srv, cli net.Conn) {
	t.Helper()
	ln := impl.listeners(t)()
	t.Cleanup(func() { ln.Close() })
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	srv, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, cli
}

// TestStreamAsNet: what package net does with a TCP connection and
// listener, the adapters do. Every case runs on package net first, as the
// reference, then on the adapters of each backend.
func TestStreamAsNet(t *testing.T) {
	for _, impl := range asNetImpls() {
		t.Run(impl.name, func(t *testing.T) {
			testutil.Watchdog(t, 60*time.Second)
			t.Run("ConcurrentWritesStayWhole", func(t *testing.T) { testConcurrentWritesStayWhole(t, impl) })
			t.Run("ReadAfterPassedDeadline", func(t *testing.T) { testReadAfterPassedDeadline(t, impl) })
			t.Run("ZeroReadAfterEOF", func(t *testing.T) { testZeroReadAfterEOF(t, impl) })
			t.Run("AcceptWorkerPool", func(t *testing.T) { testAcceptWorkerPool(t, impl) })
			t.Run("WriteBesideIdleReadFrom", func(t *testing.T) { testWriteBesideIdleReadFrom(t, impl) })
			t.Run("WriteAfterCloseWrite", func(t *testing.T) { testWriteAfterCloseWrite(t, impl) })
		})
	}
}

// testConcurrentWritesStayWhole: two goroutines write 4 MiB each in one
// Write call on the same connection; the peer receives each call's bytes
// in one piece (package net holds the fd's write lock for a whole Write;
// the adapter sends a long Write in pieces, waiting for room between them).
func testConcurrentWritesStayWhole(t *testing.T, impl asNetImpl) {
	srv, cli := impl.pipe(t)
	const size = 4 << 20
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, fill := range []byte{'A', 'B'} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{fill}, size)
			<-start
			if n, err := srv.Write(p); err != nil || n != size {
				t.Errorf("Write = %d, %v", n, err)
			}
		}()
	}
	close(start)
	cli.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, 2*size)
	if _, err := io.ReadFull(cli, got); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got[0] == got[size] || !bytes.Equal(got[:size], bytes.Repeat(got[:1], size)) || !bytes.Equal(got[size:], bytes.Repeat(got[size:size+1], size)) {
		runs := 1
		for i := 1; i < len(got); i++ {
			if got[i] != got[i-1] {
				runs++
			}
		}
		t.Errorf("the two Writes arrived in %d runs of bytes, want 2", runs)
	}
}

// testReadAfterPassedDeadline: once the read deadline has passed, Read
// fails with a timeout even with bytes waiting; a later deadline lets them
// be read.
func testReadAfterPassedDeadline(t *testing.T, impl asNetImpl) {
	srv, cli := impl.pipe(t)
	if _, err := cli.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(srv, buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the rest has arrived
	srv.SetReadDeadline(time.Now().Add(-time.Second))
	n, err := srv.Read(buf)
	var ne net.Error
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read after a passed deadline = %d, %v; want 0 and a timeout", n, err)
	}
	srv.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest := make([]byte, 4)
	if _, err := io.ReadFull(srv, rest); err != nil || string(rest) != "ello" {
		t.Fatalf("after the deadline moved: %q, %v", rest, err)
	}
}

// testZeroReadAfterEOF: a zero-length Read returns 0, nil on an open
// connection, after the peer's FIN too.
func testZeroReadAfterEOF(t *testing.T, impl asNetImpl) {
	srv, cli := impl.pipe(t)
	if n, err := srv.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
	cli.(*net.TCPConn).CloseWrite()
	srv.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := srv.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read after FIN = %v, want io.EOF", err)
	}
	if n, err := srv.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) after FIN = %d, %v; want 0, nil", n, err)
	}
	srv.Close()
	if _, err := srv.Read(nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read(nil) after Close = %v, want net.ErrClosed", err)
	}
}

// testWriteAfterCloseWrite: after CloseWrite, Writes (empty ones too) fail
// with a write *net.OpError wrapping EPIPE and a second CloseWrite
// succeeds; so it stays once the peer has closed too, when CloseWrite
// fails with ENOTCONN; after Close, both fail with net.ErrClosed.
func testWriteAfterCloseWrite(t *testing.T, impl asNetImpl) {
	srv, cli := impl.pipe(t)
	cw := srv.(interface{ CloseWrite() error })
	wantEPIPE := func(when string) {
		t.Helper()
		for _, p := range [][]byte{[]byte("x"), nil} {
			n, err := srv.Write(p)
			var oe *net.OpError
			if n != 0 || !errors.Is(err, syscall.EPIPE) || !errors.As(err, &oe) || oe.Op != "write" {
				t.Fatalf("Write(%q) %s = %d, %v; want 0 and a write error wrapping EPIPE", p, when, n, err)
			}
		}
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	wantEPIPE("after CloseWrite")
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("second CloseWrite: %v", err)
	}
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := cli.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("peer's Read = %d, %v; want io.EOF", n, err)
	}
	cli.Close()
	srv.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := srv.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read after the peer's Close = %v, want io.EOF", err)
	}
	wantEPIPE("after the peer's Close")
	if err := cw.CloseWrite(); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("CloseWrite after the peer's Close = %v, want ENOTCONN", err)
	}
	srv.Close()
	if _, err := srv.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
	if err := cw.CloseWrite(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("CloseWrite after Close = %v, want net.ErrClosed", err)
	}
}

// testWriteBesideIdleReadFrom: a ReadFrom whose source has nothing to give
// (io.Copy from a pipe nobody writes yet) does not hold up a Write on the
// same connection; what the source gives later follows it.
func testWriteBesideIdleReadFrom(t *testing.T, impl asNetImpl) {
	srv, cli := impl.pipe(t)
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		_, err := srv.(io.ReaderFrom).ReadFrom(pr)
		copied <- err
	}()
	time.Sleep(20 * time.Millisecond) // ReadFrom waits on the pipe
	wrote := make(chan error, 1)
	go func() {
		_, err := srv.Write([]byte("ping"))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Write waited for a ReadFrom whose source is idle")
	}
	pw.Write([]byte("pong"))
	pw.Close()
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 8)
	if _, err := io.ReadFull(cli, got); err != nil || string(got) != "pingpong" {
		t.Fatalf("peer read %q, %v", got, err)
	}
}

// testAcceptWorkerPool: 16 goroutines each call Accept once while 16
// clients connect at once: every connection is accepted, however many
// arrive while no Accept waits.
func testAcceptWorkerPool(t *testing.T, impl asNetImpl) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const n = 16
	listen := impl.listeners(t)
	for round := 0; round < 200; round++ {
		ln := listen()
		got := make(chan net.Conn, n)
		for range n {
			go func() {
				if c, err := ln.Accept(); err == nil {
					got <- c
				}
			}()
		}
		var wg sync.WaitGroup
		clients := make(chan net.Conn, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Error(err)
					return
				}
				clients <- c
			}()
		}
		wg.Wait()
		close(clients)
		timeout := time.After(10 * time.Second)
		for i := 0; i < n; i++ {
			select {
			case c := <-got:
				c.Close()
			case <-timeout:
				t.Fatalf("round %d: %d of %d connections accepted after 10 s", round, i, n)
			}
		}
		for c := range clients {
			c.Close()
		}
		ln.Close()
	}
}

// TestNetConnShutdownEndsBlockedCalls: when the server under a NetConn
// shuts down, or its group does, while the connection lingers to send
// bytes a peer does not read, a Read and a Write blocked on it return at
// once (not when the linger ends) with a *net.OpError of their own
// operation wrapping net.ErrClosed.
func TestNetConnShutdownEndsBlockedCalls(t *testing.T) {
	for _, how := range []string{"server", "group"} {
		t.Run(how, func(t *testing.T) {
			ctBackends(t, func(t *testing.T, b loop.Backend) {
				g := ctGroup(t, b, 2)
				ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0", conn.WithLinger(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				peer, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer peer.Close()
				nc, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				// Fill the way to the peer, which never reads: bytes stay
				// queued, so the close lingers.
				nc.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
				for {
					if _, err := nc.Write(make([]byte, 64<<10)); err != nil {
						break
					}
				}
				nc.SetWriteDeadline(time.Time{})
				errs := make(chan error, 2)
				go func() { _, err := nc.Read(make([]byte, 8)); errs <- err }()
				go func() { _, err := nc.Write(make([]byte, 1<<20)); errs <- err }()
				time.Sleep(50 * time.Millisecond) // both blocked
				begun := time.Now()
				if how == "server" {
					go ln.Server().Shutdown(context.Background())
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					go g.Shutdown(ctx)
				}
				for range 2 {
					select {
					case err := <-errs:
						var oe *net.OpError
						if !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) || (oe.Op != "read" && oe.Op != "write") {
							t.Errorf("blocked call returned %v (%T), want a read or write *net.OpError wrapping net.ErrClosed", err, err)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("a blocked call still waits %v after the shutdown began (linger 1 min)", time.Since(begun).Round(time.Millisecond))
					}
				}
				if err := nc.(*conn.NetConn).CloseWrite(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("CloseWrite after the shutdown closed the connection: %v, want net.ErrClosed", err)
				}
			})
		})
	}
}
