package conn_test

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// benchNetPair returns a connected pair of net.Conns: package net's, or
// the adapters on a group of the backend.
func benchNetPair(b *testing.B, backend string) (c1, c2 net.Conn) {
	var ln net.Listener
	var dial func() (net.Conn, error)
	if backend == "net" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ln = l
		dial = func() (net.Conn, error) { return net.Dial("tcp", l.Addr().String()) }
	} else {
		be := loop.BackendUring
		if backend == "epoll" {
			be = loop.BackendEpoll
		}
		g := ctGroup(b, be, 0)
		l, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ln = l
		dial = func() (net.Conn, error) { return conn.DialNet(context.Background(), g, "tcp", l.Addr().String()) }
	}
	b.Cleanup(func() { ln.Close() })
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c1, err := dial()
	if err != nil {
		b.Fatal(err)
	}
	c2 = <-acc
	b.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

// BenchmarkNetConn: the adapters against package net, in one process.
// pingpong is a 64 B request and answer (ns per round trip); stream sends
// 64 KiB writes one way (throughput).
func BenchmarkNetConn(b *testing.B) {
	for _, backend := range []string{"uring", "epoll", "net"} {
		b.Run("backend="+backend+"/op=pingpong", func(b *testing.B) {
			c1, c2 := benchNetPair(b, backend)
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := io.ReadFull(c2, buf); err != nil {
						return
					}
					if _, err := c2.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, 64)
			b.ResetTimer()
			for range b.N {
				if _, err := c1.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c1, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("backend="+backend+"/op=stream", func(b *testing.B) {
			c1, c2 := benchNetPair(b, backend)
			const size = 64 << 10
			done := make(chan error, 1)
			go func() {
				_, err := io.CopyN(io.Discard, c2, int64(b.N)*size)
				done <- err
			}()
			buf := make([]byte, size)
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				if _, err := c1.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
