package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// server is one echo server of the comparison.
type server struct {
	Name string   // as in the CSV and the report
	Argv []string // binary and arguments (the harness adds the address)
	Env  []string // extra environment
	Go   bool     // a Go program: GOMAXPROCS is set
	HTTP bool     // the HTTP workload: driven by httpload instead of loadgen
	UDP  bool     // the UDP workload: loadgen -udp, a peer per connection and a datagram per message
	QUIC bool     // the QUIC workload: driven by quicload (-quic picks request/response or bulk)
}

// serverOrder is the report's column order.
var serverOrder = []string{"c-liburing", "ringloop-uring", "ringloop-epoll", "gnet", "net",
	"http-ringloop-uring", "http-ringloop-epoll", "http-net", "fasthttp-ringloop-uring", "fasthttp-net",
	"udp-ringloop-uring", "udp-ringloop-epoll", "udp-gnet", "udp-net", "udp-mmsg",
	"quic-ringloop-uring", "quic-ringloop-epoll", "quic-net"}

// udpServers are the UDP workload's servers: each echo server's
// -network udp (a datagram back to its sender), driven by loadgen -udp.
var udpServers = map[string][]string{
	"udp-ringloop-uring": {"ringecho", "-network", "udp", "-backend", "uring"},
	"udp-ringloop-epoll": {"ringecho", "-network", "udp", "-backend", "epoll"},
	"udp-gnet":           {"gnetecho", "-network", "udp"},
	"udp-net":            {"netecho", "-network", "udp"},
	"udp-mmsg":           {"netecho", "-network", "udp-mmsg"},
}

// httpServers are the HTTP workload's servers (bench/cmd/httpserve): a
// hello-world handler of a Go HTTP stack on a listener.
var httpServers = map[string][]string{
	"http-ringloop-uring":     {"-stack", "nethttp", "-impl", "ringloop", "-backend", "uring"},
	"http-ringloop-epoll":     {"-stack", "nethttp", "-impl", "ringloop", "-backend", "epoll"},
	"http-net":                {"-stack", "nethttp", "-impl", "net"},
	"fasthttp-ringloop-uring": {"-stack", "fasthttp", "-impl", "ringloop", "-backend", "uring"},
	"fasthttp-net":            {"-stack", "fasthttp", "-impl", "net"},
}

// quicServers are the QUIC workload's servers (bench/cmd/quicserve):
// quic-go on a UDP socket, driven by quicload.
var quicServers = map[string][]string{
	"quic-ringloop-uring": {"-impl", "ringloop", "-backend", "uring"},
	"quic-ringloop-epoll": {"-impl", "ringloop", "-backend", "epoll"},
	"quic-net":            {"-impl", "net"},
}

// build compiles every server and the load generator into binDir and returns
// the servers that could be built, saying why any other is skipped.
func build(benchDir, binDir string, wanted map[string]bool, setup bool) (map[string]server, string, error) {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, "", err
	}
	goBuild := func(tags, pkg string) error {
		args := []string{"build", "-o", binDir + "/"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		args = append(args, pkg)
		cmd := exec.Command("go", args...)
		cmd.Dir = benchDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := goBuild("", "./cmd/loadgen"); err != nil {
		return nil, "", err
	}
	servers := map[string]server{}
	bin := func(n string) string { return filepath.Join(binDir, n) }
	if wanted["net"] {
		if err := goBuild("", "./cmd/netecho"); err != nil {
			return nil, "", err
		}
		servers["net"] = server{Name: "net", Argv: []string{bin("netecho")}, Go: true}
	}
	if wanted["gnet"] {
		if err := goBuild("", "./cmd/gnetecho"); err != nil {
			return nil, "", err
		}
		servers["gnet"] = server{Name: "gnet", Argv: []string{bin("gnetecho")}, Go: true}
	}
	if wanted["ringloop-uring"] || wanted["ringloop-epoll"] {
		if err := goBuild("", "./cmd/ringecho"); err != nil {
			first := strings.SplitN(err.Error(), "\n", 3)
			msg := first[0]
			if len(first) > 1 {
				msg += ": " + first[1]
			}
			progress("skipping ringloop servers: ringecho does not build (%s)\n", msg)
		} else {
			for _, b := range []string{"uring", "epoll"} {
				if wanted["ringloop-"+b] {
					servers["ringloop-"+b] = server{Name: "ringloop-" + b, Argv: []string{bin("ringecho"), "-backend", b}, Go: true}
				}
			}
		}
	}
	for name, args := range udpServers {
		if !wanted[name] {
			continue
		}
		if err := goBuild("", "./cmd/"+args[0]); err != nil {
			return nil, "", err
		}
		servers[name] = server{Name: name, Argv: append([]string{bin(args[0])}, args[1:]...), Go: true, UDP: true}
	}
	anyHTTP := false
	for name := range httpServers {
		anyHTTP = anyHTTP || wanted[name]
	}
	if anyHTTP {
		for _, pkg := range []string{"./cmd/httpserve", "./cmd/httpload"} {
			if err := goBuild("", pkg); err != nil {
				return nil, "", err
			}
		}
		for name, args := range httpServers {
			if wanted[name] {
				servers[name] = server{Name: name, Argv: append([]string{bin("httpserve")}, args...), Go: true, HTTP: true}
			}
		}
	}
	anyQUIC := false
	for name := range quicServers {
		anyQUIC = anyQUIC || wanted[name]
	}
	if anyQUIC {
		for _, pkg := range []string{"./cmd/quicserve", "./cmd/quicload"} {
			if err := goBuild("", pkg); err != nil {
				return nil, "", err
			}
		}
		for name, args := range quicServers {
			if wanted[name] {
				servers[name] = server{Name: name, Argv: append([]string{bin("quicserve")}, args...), Go: true, QUIC: true}
			}
		}
	}
	cinfo := ""
	if wanted["c-liburing"] {
		info, err := buildC(benchDir, bin("uring_echo"), setup)
		if err != nil {
			progress("skipping c-liburing: %v\n", err)
		} else {
			cinfo = info
			servers["c-liburing"] = server{Name: "c-liburing", Argv: []string{bin("uring_echo")}}
		}
	}
	return servers, cinfo, nil
}

// aptTimeout bounds each apt-get step of the C server's setup.
const aptTimeout = 5 * time.Minute

// buildC compiles c/uring_echo.c, installing gcc and liburing-dev with
// apt-get first when they are missing and this process may do so.
func buildC(benchDir, out string, setup bool) (string, error) {
	have := func() bool {
		_, gccErr := exec.LookPath("gcc")
		_, hdrErr := os.Stat("/usr/include/liburing.h")
		return gccErr == nil && hdrErr == nil
	}
	if !have() && setup {
		if _, err := exec.LookPath("apt-get"); err == nil && os.Geteuid() == 0 {
			progress("installing gcc and liburing-dev with apt-get…\n")
			for _, args := range [][]string{{"update"}, {"install", "-y", "--no-install-recommends", "gcc", "libc6-dev", "liburing-dev"}} {
				// Bounded: a mirror that does not answer must not hang the run.
				ctx, cancel := context.WithTimeout(context.Background(), aptTimeout)
				cmd := exec.CommandContext(ctx, "apt-get", args...)
				cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
				b, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					return "", fmt.Errorf("apt-get %s: %v: %s", args[0], err, lastLine(b))
				}
			}
		}
	}
	if !have() {
		return "", fmt.Errorf("gcc or liburing-dev (/usr/include/liburing.h) missing; install them (apt-get install gcc liburing-dev) or run as root with -setup")
	}
	cmd := exec.Command("gcc", "-O2", "-Wall", "-o", out, filepath.Join(benchDir, "c", "uring_echo.c"), "-luring")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc: %v: %s", err, strings.TrimSpace(string(b)))
	}
	info := "gcc -O2"
	if b, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "liburing-dev").Output(); err == nil {
		info += ", liburing " + strings.TrimSpace(string(b))
	}
	return info, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
