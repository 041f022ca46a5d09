//go:build linux

package conn_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// TestAcceptanceEMFILE runs an echo server in a child process (this test binary
// in helper mode) whose RLIMIT_NOFILE leaves room for 16 connections, then
// opens 64 connections and keeps dialing for a second: accept fails with
// EMFILE over and over. The child's CPU time over that window must stay
// well below one core (accept backs off instead of spinning), and once the
// clients close, new connections are served again.
func TestAcceptanceEMFILE(t *testing.T) {
	if os.Getenv(accHelperEnv) == "emfile-server" {
		accEMFILEServer()
		os.Exit(0)
	}
	const (
		headroom = 16
		first    = 64
		window   = time.Second
		maxShare = 0.25 // of one core, over the window
	)
	accForEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.Watchdog(t, 2*time.Minute)
		cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptanceEMFILE$", "-test.v=false")
		cmd.Env = append(os.Environ(), accHelperEnv+"=emfile-server",
			"ACC_BACKEND="+b.String(), "ACC_HEADROOM="+strconv.Itoa(headroom))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := false
		defer func() {
			if !exited {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}()
		out := bufio.NewReader(stdout)
		reply := func(cmdLine string) string {
			t.Helper()
			if cmdLine != "" {
				fmt.Fprintln(stdin, cmdLine)
			}
			line, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("server process: %v\n%s", err, stderr.String())
			}
			return strings.TrimSpace(line)
		}
		var addr string
		var limit int
		if _, err := fmt.Sscanf(reply(""), "addr %s nofile %d", &addr, &limit); err != nil {
			t.Fatalf("server process banner: %v\n%s", err, stderr.String())
		}

		// 64 clients, each sending one byte; only about 16 can be accepted.
		var clients []net.Conn
		var mu sync.Mutex
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range clients {
				c.Close()
			}
		}()
		for range first {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			c.Write([]byte{'x'})
			clients = append(clients, c)
		}
		echoed := 0
		echoDeadline := time.Now().Add(300 * time.Millisecond)
		for _, c := range clients {
			c.SetReadDeadline(echoDeadline)
			if _, err := c.Read(make([]byte, 1)); err == nil {
				echoed++
			}
		}

		// The storm: keep dialing during the measured window.
		stormDone := make(chan int)
		go func() {
			n := 0
			for end := time.Now().Add(window); time.Now().Before(end) && n < 256; n++ {
				c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
				if err != nil {
					continue
				}
				mu.Lock()
				clients = append(clients, c)
				mu.Unlock()
			}
			stormDone <- n
		}()
		var cpu, wall time.Duration
		var conns int
		if _, err := fmt.Sscanf(reply("measure "+strconv.FormatInt(int64(window), 10)), "cpu %d wall %d conns %d", &cpu, &wall, &conns); err != nil {
			t.Fatalf("measure: %v\n%s", err, stderr.String())
		}
		dials := <-stormDone
		share := cpu.Seconds() / wall.Seconds()
		t.Logf("fd limit %d: %d of %d first clients echoed, %d server conns, %d storm dials; server CPU %v over %v (%.1f%% of a core)",
			limit, echoed, first, conns, dials, cpu.Round(time.Millisecond), wall.Round(time.Millisecond), 100*share)
		if conns >= first {
			t.Errorf("the server holds %d connections; the fd limit should have stopped it below %d", conns, first)
		}
		if share > maxShare {
			t.Errorf("server used %.0f%% of a core while accept failed with EMFILE, want ≤ %.0f%%", 100*share, 100*maxShare)
		}

		// Free the fds: the server sees every peer close, then serves anew.
		mu.Lock()
		for _, c := range clients {
			c.Close()
		}
		clients = nil
		mu.Unlock()
		start := time.Now()
		for i := range 4 {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("dial after the storm: %v", err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			msg := []byte(fmt.Sprintf("again %d", i))
			c.Write(msg)
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
				t.Fatalf("echo after the storm: %q, %v", got, err)
			}
			c.Close()
		}
		t.Logf("service resumed: 4 echoes within %v of the clients closing", time.Since(start).Round(time.Millisecond))

		stdin.Close()
		done := make(chan error, 1)
		go func() { io.Copy(io.Discard, out); done <- cmd.Wait() }()
		select {
		case err := <-done:
			exited = true
			if err != nil {
				t.Errorf("server process: %v\n%s", err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("server process did not exit within 20s")
		}
	})
}

// accEMFILEServer is the server process of TestAcceptanceEMFILE. It starts an
// echo server on ACC_BACKEND, lowers its RLIMIT_NOFILE to the fds it has
// open plus ACC_HEADROOM, prints "addr <addr> nofile <limit>", then answers
// "measure <ns>" with "cpu <ns> wall <ns> conns <n>" (its CPU time
// over that much wall time), and shuts down when stdin closes.
func accEMFILEServer() {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "emfile server: "+format+"\n", args...)
		os.Exit(1)
	}
	b := loop.BackendEpoll
	if os.Getenv("ACC_BACKEND") == "uring" {
		b = loop.BackendUring
	}
	headroom, _ := strconv.Atoi(os.Getenv("ACC_HEADROOM"))
	g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(accLogger))
	if err != nil {
		fail("NewGroup: %v", err)
	}
	ready := make(chan struct{})
	g.Loop(0).Execute(func() { close(ready) })
	<-ready
	// Lower the limit before listening: io_uring reads RLIMIT_NOFILE when
	// an accept is prepared, so a multishot accept armed earlier would
	// keep the old limit. One fd more for the listener.
	limit := uint64(testutil.FdCount() + 1 + headroom)
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	lim.Cur = limit
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		fail("setrlimit: %v", err)
	}
	srv, err := connListenForHelper(g)
	if err != nil {
		fail("Listen: %v", err)
	}
	fmt.Printf("addr %s nofile %d\n", srv.Addr(), limit)

	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var d time.Duration
		if _, err := fmt.Sscanf(sc.Text(), "measure %d", &d); err != nil {
			fail("command %q: %v", sc.Text(), err)
		}
		var r0, r1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &r0)
		t0 := time.Now()
		time.Sleep(d)
		unix.Getrusage(unix.RUSAGE_SELF, &r1)
		wall := time.Since(t0)
		cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
		fmt.Printf("cpu %d wall %d conns %d\n", cpu, wall, srv.Conns())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		fail("server Shutdown: %v", err)
	}
	if err := g.Shutdown(ctx); err != nil {
		fail("group Shutdown: %v", err)
	}
}
