package conn_test

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// BenchmarkLineFraming sends one 4 MiB line in 64-byte writes and waits for
// its answer, to a ReadHandler that scans each byte once (lineKeeper) and,
// as the baseline, to a bufio.Scanner on a net.Conn. One op is one line;
// the two should cost about the same, since neither rescans what it kept.
//
//	go test ./conn/ -run '^$' -bench BenchmarkLineFraming
func BenchmarkLineFraming(b *testing.B) {
	const lineLen, piece = 4 << 20, 64
	run := func(b *testing.B, addr string) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		nc.(*net.TCPConn).SetNoDelay(true)
		p := bytes.Repeat([]byte("l"), piece)
		buf := make([]byte, 8)
		b.SetBytes(lineLen)
		b.ResetTimer()
		for range b.N {
			for sent := 0; sent < lineLen-1; sent += piece {
				if _, err := nc.Write(p[:min(piece, lineLen-1-sent)]); err != nil {
					b.Fatal(err)
				}
			}
			nc.Write([]byte("\n"))
			nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := nc.Read(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("server=ringloop", func(b *testing.B) {
		g := ctGroup(b, loop.BackendAuto, 1)
		srv, err := conn.ListenFunc(b.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
			return &lineKeeper{closed: make(chan error, 1)}
		}, conn.WithInboundLimit(8<<20))
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		run(b, srv.Addr().String())
	})
	b.Run("server=bufio.Scanner", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			sc := bufio.NewScanner(c)
			sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
			for sc.Scan() {
				c.Write([]byte("ok\n"))
			}
		}()
		run(b, ln.Addr().String())
	})
}
