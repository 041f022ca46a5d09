//go:build linux

package conn_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// TestAcceptanceScale holds 10,000 idle connections open on the server and
// reports the Go heap each one costs (target ≤ 1 KiB; the test fails above
// 4 KiB). The clients live in a child process (this test binary re-executed
// in helper mode), so the server process needs only one fd per connection
// and the nofile hard limit need not cover both ends.
func TestAcceptanceScale(t *testing.T) {
	if os.Getenv(accHelperEnv) == "scale-clients" {
		accScaleClients()
		os.Exit(0)
	}
	const n = 10000
	const perConnLimit = 4 << 10
	accRaiseNofile(t, n+256)
	accForEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.Watchdog(t, 2*time.Minute)
		g := accGroup(t, b)
		srv := accListen(t, g, conn.NopHandler{}, conn.WithBacklog(4096))
		// Start every loop before the baseline, so only connections count.
		for _, l := range g.Loops() {
			done := make(chan struct{})
			l.Execute(func() { close(done) })
			<-done
		}

		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)

		start := time.Now()
		cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptanceScale$", "-test.v=false")
		cmd.Env = append(os.Environ(), accHelperEnv+"=scale-clients",
			"ACC_ADDR="+srv.Addr().String(), "ACC_N="+strconv.Itoa(n))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stdin.Close()
			waitc := make(chan error, 1)
			go func() { waitc <- cmd.Wait() }()
			select {
			case err := <-waitc:
				if err != nil {
					t.Errorf("client process: %v\n%s", err, stderr.String())
				}
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				<-waitc
				t.Errorf("client process did not exit within 20s")
			}
		}()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "ready ") {
			t.Fatalf("client process: %q, %v\n%s", line, err, stderr.String())
		}
		accWaitFor(t, time.Minute, fmt.Sprintf("%d connections on the server", n), func() bool { return srv.Conns() >= n })
		took := time.Since(start)

		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := srv.Conns(); got != n {
			t.Fatalf("server holds %d connections, want %d", got, n)
		}
		perConn := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
		t.Logf("%d idle connections (%s) opened in %v: Go heap %d → %d B, %d B per connection (target ≤ 1024, limit %d); %d goroutines",
			n, strings.TrimSpace(strings.TrimPrefix(line, "ready ")), took.Round(time.Millisecond),
			before.HeapAlloc, after.HeapAlloc, perConn, perConnLimit, runtime.NumGoroutine())
		if perConn > perConnLimit {
			t.Errorf("%d bytes of Go heap per idle connection, want ≤ %d", perConn, perConnLimit)
		}
		stdin.Close() // the clients exit; the server sees every peer close
		accWaitFor(t, time.Minute, "every connection to close", func() bool { return srv.Conns() == 0 })
	})
}

// accRaiseNofile raises RLIMIT_NOFILE's soft limit to at least need (up to
// the hard limit) for the rest of the test binary, or skips the test.
func accRaiseNofile(t *testing.T, need uint64) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < need {
		t.Skipf("RLIMIT_NOFILE hard limit %d is below the %d fds this test needs", lim.Max, need)
	}
	if lim.Cur < need {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Skipf("raising RLIMIT_NOFILE to %d: %v", lim.Max, err)
		}
	}
}

// accScaleClients is the client process of TestAcceptanceScale: it opens ACC_N
// blocking connections to ACC_ADDR, spreading their source addresses over
// 127.0.0.2–127.0.0.201 so ephemeral ports never run short, prints
// "ready ...", and holds them until its stdin closes.
func accScaleClients() {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "scale clients: "+format+"\n", args...)
		os.Exit(1)
	}
	n, _ := strconv.Atoi(os.Getenv("ACC_N"))
	host, portStr, _ := strings.Cut(os.Getenv("ACC_ADDR"), ":")
	port, _ := strconv.Atoi(portStr)
	var dst unix.SockaddrInet4
	dst.Port = port
	for i, f := range strings.Split(host, ".") {
		v, _ := strconv.Atoi(f)
		dst.Addr[i] = byte(v)
	}
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	if lim.Cur < uint64(n)+64 {
		fail("RLIMIT_NOFILE %d is below %d", lim.Cur, n+64)
	}
	const sources = 200
	for i := range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fail("socket %d: %v", i, err)
		}
		// Let connect pick the port for the (source, destination) pair.
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		src := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, byte(2 + i%sources)}}
		if err := unix.Bind(fd, src); err != nil {
			fail("bind %d: %v", i, err)
		}
		if err := unix.Connect(fd, &dst); err != nil {
			fail("connect %d: %v", i, err)
		}
	}
	fmt.Printf("ready %d clients from %d source addresses\n", n, sources)
	io.Copy(io.Discard, os.Stdin)
}
