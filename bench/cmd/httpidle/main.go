// Command httpidle measures a server's memory per idle HTTP connection: it
// opens -conns keep-alive connections to -addr, sends one GET / on each and
// reads the response, then leaves them idle. It reads the server's VmRSS
// (-pid) before the first connection and after -settle with all of them
// open, and prints the difference per connection.
//
// With -warmup N it first warms the server up with N connections of one
// request each, closed again, so that what a server touches once whatever
// the number of connections (its first goroutines and buffers, a ringloop
// loop's 1 MiB of provided receive buffers, which 256 receives cycle
// through) counts as fixed cost. The figure moves by a few percent with
// where the server's garbage collection cycles fall, which the warm-up
// shifts: compare servers over several warm-ups, not one.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "server address")
	pid := flag.Int("pid", 0, "server process id (for /proc/<pid>/status)")
	n := flag.Int("conns", 10000, "idle connections")
	settle := flag.Duration("settle", 3*time.Second, "wait before the second reading")
	warmup := flag.Int("warmup", 0, "connections of one request each, closed, before the first reading")
	flag.Parse()

	for i := range *warmup {
		open(*addr, i).Close()
	}
	if *warmup > 0 {
		time.Sleep(time.Second)
	}
	before := rssKB(*pid)
	conns := make([]net.Conn, 0, *n)
	for i := range *n {
		conns = append(conns, open(*addr, i))
	}
	time.Sleep(*settle)
	after := rssKB(*pid)
	fmt.Printf("conns %d rss_before_kb %d rss_after_kb %d bytes_per_conn %.0f\n",
		*n, before, after, float64(after-before)*1024/float64(*n))
	for _, c := range conns {
		c.Close()
	}
}

// open dials addr and has one request answered on the connection.
func open(addr string, i int) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dial %d: %v\n", i, err)
		os.Exit(1)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		fmt.Fprintln(os.Stderr, "response:", err)
		os.Exit(1)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			v, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return v
		}
	}
	return 0
}
