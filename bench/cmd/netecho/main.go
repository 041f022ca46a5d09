// Command netecho is the standard-library peer of the comparison: a
// goroutine per connection reading into a fixed buffer and writing back what
// it read (the loop io.CopyBuffer runs), until the peer closes.
package main

import (
	"flag"
	"net"

	"github.com/ringloop/ringloop/bench/internal/serve"
)

func main() {
	f := serve.Register()
	bufSize := flag.Int("buf", 16384, "per-connection read buffer in bytes")
	network := flag.String("network", "tcp", "tcp, udp (one goroutine echoes each datagram to its sender), or udp-mmsg (a thread in recvmmsg and sendmmsg, no runtime: the floor)")
	flag.Parse()
	switch *network {
	case "udp":
		serveUDP(f)
		return
	case "udp-mmsg":
		serveMmsg(f)
		return
	}

	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		serve.Fatal("listen", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go echo(c, *bufSize)
		}
	}()
	stopProfile := f.StartProfile()
	serve.Ready(ln.Addr().String())
	serve.Wait(f.MaxRuntime)
	stopProfile()
	ln.Close()
}

// echo copies c's input back to c. Unlike io.Copy it does not hand the
// socket to splice: the peers all move the bytes through user space.
func echo(c net.Conn, size int) {
	defer c.Close()
	buf := make([]byte, size)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// serveUDP echoes datagrams from one net.UDPConn and one goroutine, the
// way a Go UDP server is written: ReadFromUDPAddrPort, then
// WriteToUDPAddrPort (neither allocates).
func serveUDP(f *serve.Flags) {
	c, err := net.ListenUDP("udp4", mustUDPAddr(f.Addr))
	if err != nil {
		serve.Fatal("listen", err)
	}
	c.SetReadBuffer(4 << 20)
	c.SetWriteBuffer(4 << 20)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	stopProfile := f.StartProfile()
	serve.Ready(c.LocalAddr().String())
	serve.Wait(f.MaxRuntime)
	stopProfile()
	c.Close()
}

func mustUDPAddr(s string) *net.UDPAddr {
	a, err := net.ResolveUDPAddr("udp4", s)
	if err != nil {
		serve.Fatal("address", err)
	}
	return a
}
