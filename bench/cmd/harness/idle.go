package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The idle mode (-idle N): server memory per idle connection. For each
// echo server and repetition, the harness starts the server, reads its RSS,
// has idleclient open N connections that each get one message echoed and
// then stay silent, waits -idle-settle, reads the RSS again and reports the
// difference per connection: everything the server keeps per connection,
// Go heap, goroutine stacks and kernel-filled buffers alike, as RSS sees
// it. Servers run in turn within each repetition, so drift hits all alike.

// idleRow is one idle measurement.
type idleRow struct {
	Server          string
	Conns, Size     int
	Rep             int
	BaseKB, AfterKB uint64
	PerConn         float64 // bytes per connection
}

// runIdle measures sv once.
func runIdle(ctx context.Context, sv server, conns, size, rep int, settle time.Duration, serverCPU, clientCPU, clientBin string) (idleRow, error) {
	r := idleRow{Server: sv.Name, Conns: conns, Size: size, Rep: rep}
	bound := time.Duration(conns)*2*time.Millisecond + settle + 60*time.Second
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	srv, pid, addr, srvErr, err := startServer(sv, serverCPU, bound)
	if err != nil {
		return r, err
	}
	defer stopProcess(srv)
	time.Sleep(200 * time.Millisecond) // let the runtime settle before the baseline
	r.BaseKB = procStatusKB(pid, "VmRSS")

	cl := exec.CommandContext(ctx, "taskset", "-c", clientCPU, clientBin,
		"-addr", addr, "-conns", strconv.Itoa(conns), "-size", strconv.Itoa(size))
	cl.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cl.StdinPipe()
	if err != nil {
		return r, err
	}
	out, err := cl.StdoutPipe()
	if err != nil {
		return r, err
	}
	var clErr strings.Builder
	cl.Stderr = &limitedWriter{w: &clErr, n: 4096}
	if err := cl.Start(); err != nil {
		return r, err
	}
	defer func() { in.Close(); _ = cl.Wait() }()
	sc := bufio.NewScanner(out)
	ready := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "READY ") {
			ready = true
			break
		}
	}
	if !ready {
		return r, fmt.Errorf("idleclient against %s: %s %s", sv.Name, strings.TrimSpace(clErr.String()), strings.TrimSpace(srvErr.String()))
	}
	go io.Copy(io.Discard, out)
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	r.AfterKB = procStatusKB(pid, "VmRSS")
	r.PerConn = (float64(r.AfterKB) - float64(r.BaseKB)) * 1024 / float64(conns)
	return r, nil
}

// idleMode runs the idle measurement of every server in order and writes
// idle.csv and idle.md into outDir.
func idleMode(order []server, conns, size, reps int, settle time.Duration, serverCPU, clientCPU, binDir, benchDir, outDir string, m meta) error {
	clientBin := filepath.Join(binDir, "idleclient")
	cmd := exec.Command("go", "build", "-o", binDir+"/", "./cmd/idleclient")
	cmd.Dir = benchDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/idleclient: %v\n%s", err, b)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	var rows []idleRow
	for rep := 1; rep <= reps; rep++ {
		for _, sv := range order {
			if sv.HTTP || sv.QUIC {
				continue
			}
			r, err := runIdle(context.Background(), sv, conns, size, rep, settle, serverCPU, clientCPU, clientBin)
			if err != nil {
				progress("idle %s rep %d: %v\n", sv.Name, rep, err)
				continue
			}
			progress("idle %-15s c=%d rep %d  rss %d → %d KB  %6.0f B per connection\n", r.Server, conns, rep, r.BaseKB, r.AfterKB, r.PerConn)
			rows = append(rows, r)
		}
	}
	var csv strings.Builder
	csv.WriteString("server,conns,size,rep,rss_base_kb,rss_after_kb,bytes_per_conn\n")
	for _, r := range rows {
		fmt.Fprintf(&csv, "%s,%d,%d,%d,%d,%d,%.0f\n", r.Server, r.Conns, r.Size, r.Rep, r.BaseKB, r.AfterKB, r.PerConn)
	}
	if err := os.WriteFile(filepath.Join(outDir, "idle.csv"), []byte(csv.String()), 0o644); err != nil {
		return err
	}
	md := idleReport(rows, order, conns, size, reps, settle, m)
	if err := os.WriteFile(filepath.Join(outDir, "idle.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(md)
	progress("idle report: %s\n", filepath.Join(outDir, "idle.md"))
	return nil
}

// idleReport renders the medians per server.
func idleReport(rows []idleRow, order []server, conns, size, reps int, settle time.Duration, m meta) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Server memory per idle connection\n\n")
	fmt.Fprintf(&b, "%s. %d connections, each echoed one %d-byte message and then idle; server RSS read before the first connection and %v after the last; %d repetitions, servers in turn.\n\n",
		machineLine(m), conns, size, settle, reps)
	b.WriteString("| server | bytes per idle connection (median) | min–max |\n|---|---:|---:|\n")
	for _, sv := range order {
		var v []float64
		for _, r := range rows {
			if r.Server == sv.Name {
				v = append(v, r.PerConn)
			}
		}
		if len(v) == 0 {
			continue
		}
		sort.Float64s(v)
		fmt.Fprintf(&b, "| %s | %.0f | %.0f–%.0f |\n", sv.Name, v[len(v)/2], v[0], v[len(v)-1])
	}
	return b.String()
}

// machineLine names the CPU (with its family and model, which the model
// name alone may not tell), the kernel, Go and the commit measured.
func machineLine(m meta) string {
	fam, model := "", ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "cpu family":
				fam = strings.TrimSpace(v)
			case "model":
				model = strings.TrimSpace(v)
			}
		}
	}
	return fmt.Sprintf("%s (family %s, model %s), %d CPUs, Linux %s, %s, commit %s", m.CPU, fam, model, m.CPUs, m.Kernel, m.GoVer, m.Commit)
}
