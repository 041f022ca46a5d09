package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// it is 100 on every Linux architecture Go supports.
const clockTicks = 100

// runSpec is one cell of the sweep at one repetition.
type runSpec struct {
	Server              server
	Conns, Size, Depth  int
	Rep                 int
	Warmup, Duration    time.Duration
	Requests            uint64
	ServerCPU, ClientCP string
	// ProfileDir, when set, attaches perf to the server for the measured
	// window (-where): counts into <perfName>.stat, samples into
	// <perfName>.data.
	ProfileDir string
	// QUICMode is the QUIC workload run against a QUIC server: "rr"
	// (request/response) or "bulk" (download).
	QUICMode string
}

// loadResult mirrors loadgen.Result's JSON.
type loadResult struct {
	Elapsed    float64 `json:"elapsed_s"`
	Requests   uint64  `json:"requests"`
	RPS        float64 `json:"rps"`
	MBps       float64 `json:"mbps"`
	P50        uint64  `json:"p50_ns"`
	P99        uint64  `json:"p99_ns"`
	P999       uint64  `json:"p999_ns"`
	Max        uint64  `json:"max_ns"`
	Errors     uint64  `json:"errors"`
	FirstError string  `json:"first_error"`
	ClientCPU  float64 `json:"client_cpu_s"`
	MinShare   float64 `json:"min_conn_share"`
	// The QUIC load generator's: whether quic-go sent with GSO on the
	// server's side and on its own ("on", "off", "on k/n" connections).
	ServerGSO string `json:"server_gso"`
	ClientGSO string `json:"client_gso"`
}

// row is one line of the raw CSV.
type row struct {
	Server                  string
	Conns, Size, Depth, Rep int
	Elapsed                 float64
	Requests                uint64
	RPS, MBps               float64
	ServerCPU               float64 // CPU-seconds in the measured window
	ServerUtil              float64 // ServerCPU / Elapsed
	CPUPerMReq              float64 // server CPU-seconds per million requests
	ReqPerCPU               float64 // requests per server CPU-second
	MBPerCPU                float64 // payload MB (10^6 B, one direction) per server CPU-second
	ClientCPU               float64
	RunqWait                float64 // seconds the server's threads waited for a CPU in the window
	ServerSys               float64 // of ServerCPU, the seconds spent in the kernel (stime)
	Ctxsw                   uint64  // context switches of the server's threads in the window
	P50, P99, P999, Max     float64 // microseconds
	RSSBaseKB, RSSPlateauKB uint64
	HWMKB                   uint64
	MemPerConnKB            float64
	Errors                  uint64
	Note                    string
	ServerGSO, ClientGSO    string  // QUIC workload: GSO on the server's and the client's side
	MinShare                float64 // the least served connection's requests over the mean (loadgen.Result.MinShare)
}

var csvHeader = []string{"server", "conns", "size", "depth", "rep", "elapsed_s", "requests", "rps", "mbps",
	"server_cpu_s", "server_util", "server_cpu_s_per_mreq", "req_per_server_cpu_s", "client_cpu_s", "server_runq_wait_s",
	"server_sys_s", "server_ctxsw", "p50_us", "p99_us", "p999_us", "max_us", "rss_base_kb", "rss_plateau_kb", "vmhwm_kb", "mem_per_conn_kb",
	"errors", "note", "mb_per_server_cpu_s", "server_gso", "client_gso", "min_conn_share"}

func (r *row) fields() []string {
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []string{r.Server, strconv.Itoa(r.Conns), strconv.Itoa(r.Size), strconv.Itoa(r.Depth), strconv.Itoa(r.Rep),
		f(r.Elapsed, 3), u(r.Requests), f(r.RPS, 0), f(r.MBps, 2),
		f(r.ServerCPU, 2), f(r.ServerUtil, 3), f(r.CPUPerMReq, 3), f(r.ReqPerCPU, 0), f(r.ClientCPU, 2), f(r.RunqWait, 3),
		f(r.ServerSys, 2), u(r.Ctxsw), f(r.P50, 1), f(r.P99, 1), f(r.P999, 1), f(r.Max, 1), u(r.RSSBaseKB), u(r.RSSPlateauKB), u(r.HWMKB), f(r.MemPerConnKB, 2),
		u(r.Errors), r.Note, f(r.MBPerCPU, 2), r.ServerGSO, r.ClientGSO, f(r.MinShare, 3)}
}

// runOne starts the server, runs the load generator against it and stops
// the server. Every process it starts is gone when it returns.
func runOne(ctx context.Context, spec runSpec, loadgenBin string) (row, error) {
	r := row{Server: spec.Server.Name, Conns: spec.Conns, Size: spec.Size, Depth: spec.Depth, Rep: spec.Rep}
	bound := spec.Warmup + spec.Duration + time.Duration(spec.Conns)*5*time.Millisecond + 30*time.Second
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()

	srv, pid, addr, srvErr, err := startServer(spec.Server, spec.ServerCPU, bound)
	if err != nil {
		return r, err
	}
	defer stopProcess(srv)
	time.Sleep(50 * time.Millisecond) // let the runtime settle before the baseline
	r.RSSBaseKB = procStatusKB(pid, "VmRSS")

	switch {
	case spec.Server.HTTP:
		loadgenBin = filepath.Join(filepath.Dir(loadgenBin), "httpload")
	case spec.Server.QUIC:
		loadgenBin = filepath.Join(filepath.Dir(loadgenBin), "quicload")
	}
	lg := exec.CommandContext(ctx, "taskset", "-c", spec.ClientCP, loadgenBin, "-json",
		"-addr", addr, "-conns", strconv.Itoa(spec.Conns), "-size", strconv.Itoa(spec.Size),
		"-depth", strconv.Itoa(spec.Depth), "-warmup", spec.Warmup.String(), "-duration", spec.Duration.String(),
		"-requests", strconv.FormatUint(spec.Requests, 10))
	if spec.Server.UDP {
		lg.Args = append(lg.Args, "-udp")
	}
	if spec.Server.QUIC {
		lg.Args = append(lg.Args, "-mode", spec.QUICMode)
	}
	lg.Env = append(os.Environ(), "GOMAXPROCS=1")
	lg.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	lgOut, err := lg.StdoutPipe()
	if err != nil {
		return r, err
	}
	var lgErr strings.Builder
	lg.Stderr = &limitedWriter{w: &lgErr, n: 4096}
	if err := lg.Start(); err != nil {
		return r, err
	}
	var cpu0, cpu1, sys0, sys1, wait0, wait1 float64
	var cs0, cs1 uint64
	var prof []*exec.Cmd
	defer func() { stopPerf(prof) }()
	var res loadResult
	gotResult := false
	sc := bufio.NewScanner(lgOut)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "PHASE measure":
			if spec.ProfileDir != "" {
				prof, err = startPerf(ctx, spec.ProfileDir, perfName(r), pid)
				if err != nil {
					progress("perf: %v\n", err)
				}
			}
			cpu0, sys0 = procCPU(pid)
			wait0, cs0 = procRunqWait(pid), procCtxsw(pid)
			r.RSSPlateauKB = procStatusKB(pid, "VmRSS")
		case line == "PHASE done":
			cpu1, sys1 = procCPU(pid)
			wait1, cs1 = procRunqWait(pid), procCtxsw(pid)
			stopPerf(prof)
			prof = nil
		case strings.HasPrefix(line, "RESULT "):
			if err := json.Unmarshal([]byte(line[len("RESULT "):]), &res); err == nil {
				gotResult = true
			}
		}
	}
	lgWait := lg.Wait()
	r.HWMKB = procStatusKB(pid, "VmHWM")
	if !gotResult {
		return r, fmt.Errorf("loadgen against %s: %v %s", spec.Server.Name, lgWait, strings.TrimSpace(lgErr.String()))
	}
	if srvErr.Len() > 0 {
		r.Note = firstLine(srvErr.String())
	}
	r.Elapsed, r.Requests, r.RPS, r.MBps = res.Elapsed, res.Requests, res.RPS, res.MBps
	r.P50, r.P99, r.P999, r.Max = us(res.P50), us(res.P99), us(res.P999), us(res.Max)
	r.Errors, r.ClientCPU, r.MinShare = res.Errors, res.ClientCPU, res.MinShare
	r.ServerGSO, r.ClientGSO = res.ServerGSO, res.ClientGSO
	if res.FirstError != "" {
		r.Note = res.FirstError
	}
	r.ServerCPU, r.ServerSys = cpu1-cpu0, sys1-sys0
	r.RunqWait = wait1 - wait0
	if cs1 > cs0 {
		r.Ctxsw = cs1 - cs0
	}
	if r.Elapsed > 0 {
		r.ServerUtil = r.ServerCPU / r.Elapsed
	}
	if r.Requests > 0 {
		r.CPUPerMReq = r.ServerCPU / float64(r.Requests) * 1e6
	}
	if r.ServerCPU > 0 {
		r.ReqPerCPU = float64(r.Requests) / r.ServerCPU
		r.MBPerCPU = r.MBps * r.Elapsed / r.ServerCPU
	}
	if r.RSSPlateauKB > r.RSSBaseKB {
		r.MemPerConnKB = float64(r.RSSPlateauKB-r.RSSBaseKB) / float64(spec.Conns)
	}
	return r, nil
}

// startServer starts sv pinned to cpu with taskset (which execs it, so the
// pid is the server's), killed if the harness dies, bounded by
// -max-runtime, and waits for its LISTEN line. The caller stops it
// (stopProcess).
func startServer(sv server, cpu string, bound time.Duration) (*exec.Cmd, int, string, *strings.Builder, error) {
	maxRun := int((bound + 10*time.Second) / time.Second)
	argv := append([]string{"-c", cpu}, sv.Argv...)
	if sv.Name == "c-liburing" {
		argv = append(argv, "-t", strconv.Itoa(maxRun))
	} else {
		argv = append(argv, "-max-runtime", fmt.Sprintf("%ds", maxRun))
	}
	srv := exec.Command("taskset", argv...)
	srv.Env = os.Environ()
	if sv.Go {
		srv.Env = append(srv.Env, "GOMAXPROCS=1")
	}
	srv.Env = append(srv.Env, sv.Env...)
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	srvOut, err := srv.StdoutPipe()
	if err != nil {
		return nil, 0, "", nil, err
	}
	srvErr := &strings.Builder{}
	srv.Stderr = &limitedWriter{w: srvErr, n: 4096}
	if err := srv.Start(); err != nil {
		return nil, 0, "", nil, fmt.Errorf("start %s: %w", sv.Name, err)
	}
	addr, err := waitListen(srvOut, 10*time.Second)
	if err != nil {
		stopProcess(srv)
		return nil, 0, "", nil, fmt.Errorf("%s did not start: %v %s", sv.Name, err, strings.TrimSpace(srvErr.String()))
	}
	go io.Copy(io.Discard, srvOut)
	return srv, srv.Process.Pid, addr, srvErr, nil
}

func us(ns uint64) float64 { return float64(ns) / 1e3 }

func waitListen(rd io.Reader, timeout time.Duration) (string, error) {
	ch := make(chan string, 1)
	go func() {
		br := bufio.NewReader(rd)
		for {
			line, err := br.ReadString('\n')
			if strings.HasPrefix(line, "LISTEN ") {
				ch <- strings.TrimSpace(line[len("LISTEN "):])
				return
			}
			if err != nil {
				ch <- ""
				return
			}
		}
	}()
	select {
	case a := <-ch:
		if a == "" {
			return "", errors.New("exited before listening")
		}
		return a, nil
	case <-time.After(timeout):
		return "", errors.New("no LISTEN line in time")
	}
}

// stopProcess sends SIGTERM to the process group, waits up to 3 s, then
// SIGKILLs it, and reaps it.
func stopProcess(cmd *exec.Cmd) {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
}

// procCPU returns utime+stime of pid (all its threads) and stime alone, in
// seconds.
func procCPU(pid int) (total, sys float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return float64(ut+st) / clockTicks, float64(st) / clockTicks
}

// procCtxsw sums the voluntary and involuntary context switches of pid's
// threads (/proc/<pid>/task/*/status).
func procCtxsw(pid int) uint64 {
	return sumTasks(pid, func(dir string) uint64 {
		b, _ := os.ReadFile(dir + "/status")
		return statusNum(b, "voluntary_ctxt_switches") + statusNum(b, "nonvoluntary_ctxt_switches")
	})
}

// sumTasks adds f over the /proc directories of pid's threads.
func sumTasks(pid int, f func(dir string) uint64) uint64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var n uint64
	for _, t := range tasks {
		n += f(fmt.Sprintf("/proc/%d/task/%s", pid, t.Name()))
	}
	return n
}

// procRunqWait sums, over pid's threads, the time they were runnable but
// waiting for a CPU (second field of /proc/<pid>/task/<tid>/schedstat), in
// seconds. On a machine shared with other work this shows how much the
// server was held off its CPU.
func procRunqWait(pid int) float64 {
	ns := sumTasks(pid, func(dir string) uint64 {
		b, _ := os.ReadFile(dir + "/schedstat")
		if f := strings.Fields(string(b)); len(f) >= 2 {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
		return 0
	})
	return float64(ns) / 1e9
}

// procStatusKB reads one "Key: N kB" line of /proc/<pid>/status.
func procStatusKB(pid int, key string) uint64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return statusNum(b, key)
}

// statusNum returns the number of one "Key: N [kB]" line of a /proc status
// file's contents (0 when the key is missing).
func statusNum(b []byte, key string) uint64 {
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key+":") {
			f := strings.Fields(line[len(key)+1:])
			if len(f) > 0 {
				v, _ := strconv.ParseUint(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, ",", ";")
}
