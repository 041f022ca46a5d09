package conn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// NetConn is a syscall.Conn, as package net's connections are.
var _ syscall.Conn = (*conn.NetConn)(nil)

// scUserTimeout reads TCP_USER_TIMEOUT through rc.
func scUserTimeout(t *testing.T, rc syscall.RawConn) int {
	t.Helper()
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }); err != nil {
		t.Fatalf("Control: %v", err)
	}
	if gerr != nil {
		t.Fatalf("getsockopt TCP_USER_TIMEOUT: %v", gerr)
	}
	return v
}

// TestNetConnSyscallConn: the RawConn's Control runs its function with the
// connection's own socket (an option set through it reads back with
// getsockopt, and getsockname names the connection's local address): at
// once on the connection's loop, as a task waited for elsewhere, refused
// with loop.ErrInLoop on another loop and with net.ErrClosed after Close.
// A panic in the function comes back on the caller. Read and Write fail
// without calling their function.
func TestNetConnSyscallConn(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		d, a := ncPair(t, g)
		for i, nc := range []*conn.NetConn{d, a} {
			rc, err := nc.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			ms := 10000 + 1000*i // a value of its own for each end
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms) }); err != nil || serr != nil {
				t.Fatalf("set TCP_USER_TIMEOUT: %v, %v", err, serr)
			}
			if v := scUserTimeout(t, rc); v != ms {
				t.Errorf("TCP_USER_TIMEOUT reads %d, want %d", v, ms)
			}
			var sa unix.Sockaddr
			rc.Control(func(fd uintptr) { sa, serr = unix.Getsockname(int(fd)) })
			if in4, ok := sa.(*unix.SockaddrInet4); serr != nil || !ok || in4.Port != nc.LocalAddr().(*net.TCPAddr).Port {
				t.Errorf("getsockname through Control: %v, %v; the connection's local address is %v", sa, serr, nc.LocalAddr())
			}

			called := false
			for op, f := range map[string]func(func(uintptr) bool) error{"raw-read": rc.Read, "raw-write": rc.Write} {
				err := f(func(uintptr) bool { called = true; return true })
				var oe *net.OpError
				if err == nil || !errors.As(err, &oe) || oe.Op != op {
					t.Errorf("RawConn %s: %v, want a *net.OpError of %q", op, err, op)
				}
			}
			if called {
				t.Error("RawConn.Read or Write ran its function: the loop owns the socket's I/O")
			}
		}

		// On the connection's loop, Control runs its function at once;
		// on the other loop it refuses.
		own := d.Conn().Loop()
		other := g.Loop(0)
		if other == own {
			other = g.Loop(1)
		}
		rc, _ := d.SyscallConn()
		type result struct {
			ran bool
			err error
		}
		for _, l := range []*loop.Loop{own, other} {
			res := make(chan result, 1)
			if err := l.Execute(func() {
				ran := false
				err := rc.Control(func(uintptr) { ran = true })
				res <- result{ran, err}
			}); err != nil {
				t.Fatal(err)
			}
			r := <-res
			switch {
			case l == own && (!r.ran || r.err != nil):
				t.Errorf("Control on the connection's loop: ran %v, %v; want it run at once", r.ran, r.err)
			case l == other && (r.ran || !errors.Is(r.err, loop.ErrInLoop)):
				t.Errorf("Control on another loop: ran %v, %v; want loop.ErrInLoop without running", r.ran, r.err)
			}
		}

		// A panic in the function comes back on the caller.
		func() {
			defer func() {
				if r := recover(); r != "boom in Control" {
					t.Errorf("recovered %v, want the function's panic", r)
				}
			}()
			rc.Control(func(uintptr) { panic("boom in Control") })
		}()
		if v := scUserTimeout(t, rc); v != 10000 { // the loop went on
			t.Errorf("TCP_USER_TIMEOUT after the panic: %d", v)
		}

		d.Close()
		ran := false
		if err := rc.Control(func(uintptr) { ran = true }); ran || !errors.Is(err, net.ErrClosed) {
			t.Errorf("Control after Close: ran %v, %v; want net.ErrClosed without running", ran, err)
		}
	})
}

// TestNetConnSyscallConnUsers: the code of the standard library that looks
// for syscall.Conn to use sendfile or splice (os.File's WriteTo and
// ReadFrom, net.TCPConn's ReadFrom) gets a RawConn it cannot use and
// copies as for any net.Conn, every byte intact; net/http serves a file
// through it.
func TestNetConnSyscallConnUsers(t *testing.T) {
	const size = 1 << 20
	data := make([]byte, size)
	ctPattern(data, 4242)
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(t *testing.T) *os.File {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)

		t.Run("File.WriteTo", func(t *testing.T) {
			d, a := ncPair(t, g)
			f := open(t)
			go func() {
				io.Copy(d, f) // os.File.WriteTo(d): tries sendfile to a syscall.Conn
				d.CloseWrite()
			}()
			got, err := io.ReadAll(a)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("received %d bytes (intact: %v), %v", len(got), bytes.Equal(got, data), err)
			}
		})

		t.Run("File.ReadFrom", func(t *testing.T) {
			d, a := ncPair(t, g)
			go func() {
				d.Write(data)
				d.CloseWrite()
			}()
			f, err := os.Create(filepath.Join(t.TempDir(), "copy"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if n, err := f.ReadFrom(a); n != size || err != nil { // tries splice from a syscall.Conn
				t.Fatalf("File.ReadFrom: %d, %v", n, err)
			}
			if got, _ := os.ReadFile(f.Name()); !bytes.Equal(got, data) {
				t.Fatal("the file's copy differs")
			}
		})

		t.Run("TCPConn.ReadFrom", func(t *testing.T) {
			d, a := ncPair(t, g)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			out, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			in, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			go func() {
				d.Write(data)
				d.CloseWrite()
			}()
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(in)
				got <- b
			}()
			// sendfile asks the syscall.Conn's RawConn to Read, which fails.
			if n, err := out.(*net.TCPConn).ReadFrom(a); n != size || err != nil {
				t.Fatalf("TCPConn.ReadFrom: %d, %v", n, err)
			}
			out.(*net.TCPConn).CloseWrite()
			select {
			case b := <-got:
				if !bytes.Equal(b, data) {
					t.Fatalf("received %d bytes, not intact", len(b))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the copy did not arrive within 10s")
			}
		})

		t.Run("http.ServeFile", func(t *testing.T) {
			ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.ServeFile(w, r, path)
			})}
			served := make(chan struct{})
			go func() { srv.Serve(ln); close(served) }()
			defer func() { srv.Close(); <-served }()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String() + "/data")
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("served %d bytes (intact: %v), %v", len(got), bytes.Equal(got, data), err)
			}
		})
	})
}
