//go:build linux

// Command idleclient opens -conns connections to an echo server, has one
// message of -size bytes echoed on each (checked), prints "READY <n>" and
// keeps them all open and silent until its standard input closes (or
// -hold passes). The harness (-idle) reads the server's RSS meanwhile:
// the memory a server spends per idle connection.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7000", "server address")
	n := flag.Int("conns", 10000, "connections")
	size := flag.Int("size", 64, "bytes echoed on each connection before it idles (0: none)")
	hold := flag.Duration("hold", 5*time.Minute, "longest time to keep the connections open")
	flag.Parse()

	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	msg := make([]byte, *size)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	got := make([]byte, *size)
	conns := make([]net.Conn, 0, *n)
	for i := range *n {
		c, err := net.DialTimeout("tcp", *addr, 10*time.Second)
		if err != nil {
			fail("dial %d: %v", i, err)
		}
		if *size > 0 {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(msg); err != nil {
				fail("write %d: %v", i, err)
			}
			if _, err := io.ReadFull(c, got); err != nil {
				fail("read %d: %v", i, err)
			}
			if !bytes.Equal(got, msg) {
				fail("connection %d: the echo differs", i)
			}
			c.SetDeadline(time.Time{})
		}
		conns = append(conns, c)
	}
	fmt.Printf("READY %d\n", len(conns))
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(*hold):
	}
	for _, c := range conns {
		c.Close()
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "idleclient: "+format+"\n", a...)
	os.Exit(1)
}
