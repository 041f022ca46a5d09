package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
)

// The binary is built once per test run, into a temporary directory.
var binPath string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "uringecho-test-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "uringecho")
	return m.Run()
}

// build compiles the command with the go tool on PATH, once.
func build(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(binPath); err == nil {
		return binPath
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found: %v", err)
	}
	cmd := exec.Command(gobin, "build", "-o", binPath, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binPath
}

// server is a running uringecho process.
type server struct {
	cmd   *exec.Cmd
	lines chan string // stdout, line by line; closed at EOF
	addr  string      // from the banner
	out   bytes.Buffer
}

var listening = regexp.MustCompile(`^uringecho: listening on (\S+)$`)

// start runs name with args in a process group of its own, waits for the
// banner, and kills the group when the test ends if it is still there.
func start(t *testing.T, dir, name string, args ...string) *server {
	t.Helper()
	s := &server{cmd: exec.Command(name, args...), lines: make(chan string, 1024)}
	s.cmd.Dir = dir
	s.cmd.Stderr = os.Stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := s.cmd.Process.Pid
	t.Cleanup(func() {
		if syscall.Kill(-pgid, 0) == nil {
			syscall.Kill(-pgid, syscall.SIGKILL)
			s.cmd.Wait()
			t.Errorf("process group %d was still running at the end of the test", pgid)
		}
	})
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	deadline := time.After(60 * time.Second) // go run may compile first
	for s.addr == "" {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("%s exited before its banner:\n%s", name, s.out.String())
			}
			s.out.WriteString(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				s.addr = m[1]
			}
		case <-deadline:
			t.Fatalf("no banner within 60s; output so far:\n%s", s.out.String())
		}
	}
	return s
}

// expectLine reads output until a line matching re appears (bounded).
func (s *server) expectLine(t *testing.T, re *regexp.Regexp, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("output ended before a line matching %v:\n%s", re, s.out.String())
			}
			s.out.WriteString(line + "\n")
			if re.MatchString(line) {
				return line
			}
		case <-deadline:
			t.Fatalf("no line matching %v within %v:\n%s", re, d, s.out.String())
		}
	}
}

// interrupt sends SIGINT to the server's process group and checks that the
// process exits within one second, leaving nothing behind, and (if
// wantStatus0) with status 0. Under go run the status is the go command's,
// which reports the interrupt it also received, so TestGoRun checks the
// server's own shutdown line instead.
func (s *server) interrupt(t *testing.T, wantStatus0 bool) {
	t.Helper()
	pgid := s.cmd.Process.Pid
	done := make(chan error, 1)
	sent := time.Now()
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
	go func() {
		for line := range s.lines { // drain until EOF so Wait can finish
			s.out.WriteString(line + "\n")
		}
		done <- s.cmd.Wait()
	}()
	select {
	case err := <-done:
		took := time.Since(sent)
		t.Logf("exited %v after SIGINT", took.Round(time.Millisecond))
		if err != nil && wantStatus0 {
			t.Fatalf("exit after SIGINT: %v\n%s", err, s.out.String())
		}
		if took > time.Second {
			t.Errorf("exit took %v after SIGINT, want ≤ 1s", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5s after SIGINT:\n%s", s.out.String())
	}
	// Nothing may be left in the process group (go run's child included).
	deadline := time.Now().Add(time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has members after exit", pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// echoGo checks the echo through Go clients: a few connections, each sending
// payloads of random sizes while reading them back.
func echoGo(t *testing.T, addr string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 4; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		for _, size := range []int{1, 100, 1 + rng.IntN(64<<10), 256 << 10} {
			msg := make([]byte, size)
			for j := range msg {
				msg[j] = byte(rng.Uint32())
			}
			errc := make(chan error, 1)
			go func() { _, err := c.Write(msg); errc <- err }()
			got := make([]byte, size)
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatalf("read echo of %d bytes: %v", size, err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("write: %v", err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("echo of %d bytes differs", size)
			}
		}
		c.Close()
	}
}

// echoNC checks the echo through nc, if it is installed: a line written to
// nc's stdin comes back on its stdout.
func echoNC(t *testing.T, addr string) {
	t.Helper()
	nc, err := exec.LookPath("nc")
	if err != nil {
		t.Logf("nc not installed; echo checked with the Go client only")
		return
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(nc, host, port)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatalf("nc: %v", err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	const line = "hello from nc\n"
	if _, err := io.WriteString(stdin, line); err != nil {
		t.Fatalf("write to nc: %v", err)
	}
	got := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		got <- s
	}()
	select {
	case s := <-got:
		if s != line {
			t.Fatalf("nc echoed %q, want %q", s, line)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no echo through nc within 10s")
	}
}

var cleanShutdown = regexp.MustCompile(`(?m)^uringecho: shut down: \d+ bytes echoed \(conns: ok, loops: ok\)$`)

var statsLine = regexp.MustCompile(`^stats: conns=\d+ bytes=\d+ .*turns=\d+`)

// TestEcho runs the binary on each backend: banner, echo through a Go client
// and nc, periodic stats, and a clean exit on SIGINT.
func TestEcho(t *testing.T) {
	bin := build(t)
	for _, backend := range []string{"uring", "epoll"} {
		t.Run("backend="+backend, func(t *testing.T) {
			if backend == "uring" {
				testutil.SkipIfNoUring(t)
			}
			s := start(t, ".", bin, "-addr", "127.0.0.1:0", "-backend", backend, "-loops", "2", "-stats", "50ms")
			s.expectLine(t, regexp.MustCompile(`^  backend:  `+backend+`$`), 5*time.Second)
			s.expectLine(t, regexp.MustCompile(`^  loops:    2 `), 5*time.Second)
			s.expectLine(t, regexp.MustCompile(`^  kernel:   `), 5*time.Second)
			echoGo(t, s.addr)
			echoNC(t, s.addr)
			line := s.expectLine(t, statsLine, 5*time.Second)
			t.Logf("banner:\n%s", strings.TrimSpace(s.out.String()[:strings.Index(s.out.String(), line)]))
			s.interrupt(t, true)
			if !cleanShutdown.MatchString(s.out.String()) {
				t.Errorf("no clean shutdown line in the output:\n%s", s.out.String())
			}
		})
	}
}

// TestUDPEcho runs -network udp on each backend, with -reuseport too:
// datagrams of every size up to 65,507 bytes come back whole to their
// sender, the stats line counts them, and SIGINT ends the process cleanly.
func TestUDPEcho(t *testing.T) {
	bin := build(t)
	for _, backend := range []string{"uring", "epoll"} {
		for _, reuse := range []bool{false, true} {
			t.Run(fmt.Sprintf("backend=%s/reuseport=%v", backend, reuse), func(t *testing.T) {
				if backend == "uring" {
					testutil.SkipIfNoUring(t)
				}
				s := start(t, ".", bin, "-network", "udp", "-addr", "127.0.0.1:0", "-backend", backend, "-loops", "2",
					"-stats", "50ms", fmt.Sprintf("-reuseport=%v", reuse))
				s.expectLine(t, regexp.MustCompile(`^  network:  udp `), 5*time.Second)
				c, err := net.Dial("udp", s.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.(*net.UDPConn).SetReadBuffer(1 << 20)
				buf := make([]byte, 65536)
				for i, n := range []int{1, 64, 1472, 9000, 65507} {
					msg := bytes.Repeat([]byte{byte('a' + i)}, n)
					if _, err := c.Write(msg); err != nil {
						t.Fatal(err)
					}
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					got, err := c.Read(buf)
					if err != nil || !bytes.Equal(buf[:got], msg) {
						t.Fatalf("echo of %d B: %d B, %v", n, got, err)
					}
				}
				s.expectLine(t, regexp.MustCompile(`^stats: datagrams=5 .*kernel-drops=0 `), 5*time.Second)
				s.interrupt(t, true)
				if !regexp.MustCompile(`uringecho: shut down: 5 datagrams, 76044 bytes echoed \(loops: ok\)`).MatchString(s.out.String()) {
					t.Errorf("no clean shutdown line in the output:\n%s", s.out.String())
				}
			})
		}
	}
}

// RINGLOOP=kernel= runs the server as on another release. At 6.1 io_uring
// runs with what 6.1 has (no bundles: they need 6.17's receive length);
// before 6.1 -backend auto serves on epoll and says why, and -backend
// uring fails at once, naming the release and what it lacks.
func TestKernelProfileEnv(t *testing.T) {
	testutil.SkipIfNoUring(t)
	bin := build(t)
	t.Run("6.1", func(t *testing.T) {
		t.Setenv("RINGLOOP", "kernel=6.1")
		s := start(t, ".", bin, "-addr", "127.0.0.1:0", "-backend", "uring")
		s.expectLine(t, regexp.MustCompile(`^  kernel:   profile 6\.1 \(RINGLOOP=kernel=\): setup=SINGLE_ISSUER\|DEFER_TASKRUN\|TASKRUN_FLAG\|SUBMIT_ALL no-recv-bundle$`), 5*time.Second)
		echoGo(t, s.addr)
		echoNC(t, s.addr)
		s.interrupt(t, true)
	})
	t.Run("auto-5.15", func(t *testing.T) {
		t.Setenv("RINGLOOP", "kernel=5.15")
		s := start(t, ".", bin, "-addr", "127.0.0.1:0", "-backend", "auto")
		line := s.expectLine(t, regexp.MustCompile(`^  backend:  `), 5*time.Second)
		if !regexp.MustCompile(`^  backend:  epoll \(auto\), not io_uring: .*Linux 5\.15.* lacks .*multishot receive.*io_uring needs 6\.1`).MatchString(line) {
			t.Errorf("the banner does not say why auto runs epoll: %q", line)
		}
		echoGo(t, s.addr)
		s.interrupt(t, true)
	})
	t.Run("uring-5.15", func(t *testing.T) {
		t.Setenv("RINGLOOP", "kernel=5.15")
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-backend", "uring")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("-backend uring under RINGLOOP=kernel=5.15: %v, want exit status 1; stdout:\n%s", err, out)
		}
		if !regexp.MustCompile(`Linux 5\.15.* lacks IORING_SETUP_DEFER_TASKRUN, .*multishot receive.*; io_uring needs 6\.1`).MatchString(stderr.String()) {
			t.Errorf("stderr does not name the kernel and what it lacks:\n%s", stderr.String())
		}
		if bytes.Contains(out, []byte("listening")) {
			t.Errorf("it listened:\n%s", out)
		}
	})
}

// TestGoRun starts the server with the README's command (plus a free port,
// since 7777 may be taken on a shared machine), as a newcomer would.
func TestGoRun(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the command; skipped in -short mode")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found: %v", err)
	}
	s := start(t, "../..", gobin, "run", "./cmd/uringecho", "-addr", "127.0.0.1:0")
	echoGo(t, s.addr)
	s.interrupt(t, false)
	if !cleanShutdown.MatchString(s.out.String()) {
		t.Errorf("no clean shutdown line in the output:\n%s", s.out.String())
	}
}

// TestHelp checks that -h describes the command and every flag with its
// default, and exits with status 0.
func TestHelp(t *testing.T) {
	bin := build(t)
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("-h: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Usage: uringecho", "echo server", "-addr", `(default "127.0.0.1:7777")`, "-loops", "GOMAXPROCS",
		"-backend", `(default "auto")`, "-network", `(default "tcp")`, "-ioratio", "(default 50)", "-reuseport", "-stats", "SIGINT",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("-h output lacks %q:\n%s", want, out)
		}
	}
}

// TestBadFlags checks that invalid values are refused with status 2.
func TestBadFlags(t *testing.T) {
	bin := build(t)
	for _, args := range [][]string{{"-network", "sctp"}, {"-backend", "kqueue"}, {"-ioratio", "0"}, {"-loops", "-1"}, {"-stats", "-1s"}, {"-kernel", "6.1"}, {"extra"}} {
		err := exec.Command(bin, args...).Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("uringecho %v: %v, want exit status 2", args, err)
		}
	}
}

// TestDebugAddr runs -debug-addr on each backend: the banner prints the
// URLs, and after some echo traffic /metrics and /debug/vars carry the
// server's counters, /debug/pprof/ answers, and SIGINT still ends the
// process within its budget.
func TestDebugAddr(t *testing.T) {
	bin := build(t)
	for _, backend := range []string{"uring", "epoll"} {
		t.Run("backend="+backend, func(t *testing.T) {
			if backend == "uring" {
				testutil.SkipIfNoUring(t)
			}
			s := start(t, ".", bin, "-addr", "127.0.0.1:0", "-backend", backend, "-loops", "2", "-debug-addr", "127.0.0.1:0")
			line := s.expectLine(t, regexp.MustCompile(`^  debug:    http://\S+/debug/pprof/ `), 5*time.Second)
			base := strings.TrimSuffix(strings.Fields(line)[1], "/debug/pprof/")
			echoGo(t, s.addr)
			get := func(path string) string {
				t.Helper()
				resp, err := http.Get(base + path)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %s, %v", path, resp.Status, err)
				}
				return string(body)
			}
			accepted := regexp.MustCompile(`(?m)^ringloop_server_accepted_total\{group="uringecho-\d+",network="tcp",addr="` + regexp.QuoteMeta(s.addr) + `"\} ([1-9]\d*)$`)
			m := get("/metrics")
			if !accepted.MatchString(m) {
				t.Errorf("/metrics lacks the server's accepted count:\n%s", m)
			}
			if !strings.Contains(m, `ringloop_loop_turns_total{group="uringecho-`) {
				t.Errorf("/metrics lacks the loops' turns")
			}
			var vars struct {
				Ringloop struct {
					Groups []struct {
						Backend string
						Servers []struct {
							Addr     string
							Accepted uint64
						}
					}
				} `json:"ringloop"`
			}
			if err := json.Unmarshal([]byte(get("/debug/vars")), &vars); err != nil {
				t.Fatalf("/debug/vars: %v", err)
			}
			if g := vars.Ringloop.Groups; len(g) != 1 || g[0].Backend != backend || len(g[0].Servers) != 1 ||
				g[0].Servers[0].Addr != s.addr || g[0].Servers[0].Accepted == 0 {
				t.Errorf("/debug/vars ringloop = %+v", vars.Ringloop)
			}
			if p := get("/debug/pprof/"); !strings.Contains(p, "goroutine") {
				t.Errorf("/debug/pprof/ does not list profiles")
			}
			s.interrupt(t, true)
		})
	}
}
