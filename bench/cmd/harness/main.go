//go:build linux

// Command harness runs the side-by-side echo comparison of bench/README.md:
// it builds every server and the load generator, sweeps connections ×
// message sizes × pipelining depths over every server with the server
// pinned to one CPU and the client to another, repeats each cell, and writes
// the raw CSV, a summary, docs/benchmarks.md and SVG plots.
//
//	go run ./cmd/harness -profile short              # a few minutes
//	go run ./cmd/harness -profile full -publish      # the whole sweep, into docs/
//	go run ./cmd/harness -report out/<run>/results.csv -publish   # redraw from a CSV
//
// Run it from bench/.
package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type profile struct {
	conns, sizes, depths []int
	reps                 int
	// targetReps, when above reps, repeats the cells the targets
	// are checked on (64 B at 64 connections and up) this many times:
	// their ratios are within a few percent of the targets, so they get
	// the tighter median.
	targetReps       int
	warmup, duration time.Duration
}

// targetCell reports whether a cell is one the efficiency targets are
// checked on.
func targetCell(conns, size int) bool { return size == 64 && conns >= 64 && conns <= 1024 }

var profiles = map[string]profile{
	"short": {conns: []int{1, 64, 256, 1024}, sizes: []int{64, 4096}, depths: []int{1},
		reps: 3, warmup: 500 * time.Millisecond, duration: 1500 * time.Millisecond},
	"full": {conns: []int{1, 16, 64, 256, 1024}, sizes: []int{64, 512, 4096, 16384}, depths: []int{1, 16},
		reps: 3, targetReps: 9, warmup: time.Second, duration: 3 * time.Second},
	// smoke checks that every piece works; its numbers mean little.
	"smoke": {conns: []int{4}, sizes: []int{64}, depths: []int{1},
		reps: 1, warmup: 200 * time.Millisecond, duration: 700 * time.Millisecond},
}

// quicDefaults are the cells of the QUIC workloads, used when every server
// of a run is a QUIC server and -conns, -sizes and -depths are not given:
// request/response is 64 streams in flight over 4 connections (16 each)
// with 64-byte requests and responses; bulk is 16 connections downloading
// one stream each, counted in 64 KiB units.
var quicDefaults = map[string]struct{ conns, sizes, depths []int }{
	"rr":   {conns: []int{4}, sizes: []int{64}, depths: []int{16}},
	"bulk": {conns: []int{16}, sizes: []int{64 << 10}, depths: []int{1}},
}

func progress(format string, a ...any) { fmt.Fprintf(os.Stderr, format, a...) }

func main() {
	prof := flag.String("profile", "short", "short, full or smoke: sets the defaults of the sweep flags below")
	serversFlag := flag.String("servers", strings.Join(serverOrder[:5], ","), "servers to run (the HTTP, UDP and QUIC workloads' servers, http-*, fasthttp-*, udp-* and quic-*, only when named)")
	quicMode := flag.String("quic", "rr", "the QUIC workload the quic-* servers run: rr (request/response: -conns connections × -depths streams in flight, -sizes bytes each way) or bulk (-conns connections each downloading on -depths streams, counted in -sizes units); with only quic-* servers, -conns, -sizes and -depths default to 4, 64, 16 (rr) or 16, 65536, 1 (bulk)")
	connsFlag := flag.String("conns", "", "connection counts (comma-separated; default from the profile)")
	sizesFlag := flag.String("sizes", "", "message sizes in bytes")
	depthsFlag := flag.String("depths", "", "pipelining depths")
	reps := flag.Int("reps", 0, "repetitions of every cell (≥ 3 for a result; default from the profile)")
	targetReps := flag.Int("target-reps", -1, "repetitions of the cells the targets are checked on (64 B, 64–1024 conns) when more than -reps (default from the profile)")
	warmup := flag.Duration("warmup", 0, "warm-up of every run")
	duration := flag.Duration("duration", 0, "measured window of every run")
	requests := flag.Uint64("requests", 200_000_000, "upper bound on the requests of one measured window")
	serverCPU := flag.String("server-cpu", "0", "CPU the server is pinned to (taskset -c)")
	clientCPU := flag.String("client-cpu", "1", "CPU the load generator is pinned to")
	outDir := flag.String("out", "", "output directory (default out/<time>-<profile>)")
	publish := flag.Bool("publish", false, "also write ../docs/benchmarks.md and ../docs/bench/ (CSV and plots)")
	publishTo := flag.String("publish-to", "", "with -publish: write the run's report, CSVs and plots into ../docs/bench/`NAME`/ only, leaving docs/benchmarks.md as it is (a workload of its own, such as udp)")
	label := flag.String("label", "", "label printed at the top of the report (default names the profile)")
	setup := flag.Bool("setup", true, "install gcc and liburing-dev with apt-get when missing (root only)")
	report := flag.String("report", "", "only regenerate the report from this raw CSV")
	dryRun := flag.Bool("dry-run", false, "build, list the sweep and its estimated time, run nothing")
	idle := flag.Int("idle", 0, "measure server memory per idle connection with this many connections instead of the sweep (echo servers; -reps repetitions, -sizes' first size echoed once per connection)")
	idleSettle := flag.Duration("idle-settle", 3*time.Second, "with -idle: wait between the last connection and the RSS reading")
	where := flag.Bool("where", false, "one run per server and cell with perf attached: system calls, SQEs and context switches per request and a grouped CPU profile, into where.md (needs perf)")
	var variants []variant
	flag.Func("variant", "`NAME=SERVER:ENV=VALUE[:ENV=VALUE…][:arg=FLAG…][:bin=PATH]`: also run SERVER as NAME with this extra environment, extra command-line flags, or the binary at PATH (a build of another commit), side by side with it (repeatable; e.g. shared=ringloop-uring:RINGLOOP=thread=shared, locked=http-ringloop-uring:arg=-thread=locked, before=ringloop-uring:bin=/tmp/old/ringecho)", func(v string) error {
		x, err := parseVariant(v)
		variants = append(variants, x)
		return err
	})
	kernelsFlag := flag.String("kernels", "", "kernel profiles (comma-separated, e.g. 6.1,6.12; io_uring needs 6.1): also run ringloop-uring under RINGLOOP=kernel=<each>, side by side, and report what each kernel costs against the running kernel and epoll; with -publish the section goes into docs/benchmarks.md and the run into docs/bench/kernel-profiles/")
	flag.Parse()
	kernels, err := parseKernels(*kernelsFlag)
	if err != nil {
		fatal(err)
	}
	for i := len(kernels) - 1; i >= 0; i-- { // each goes right after ringloop-uring: newest ends first
		k := kernels[i]
		variants = append(variants, variant{name: kernelServer(k), base: "ringloop-uring", env: []string{"RINGLOOP=kernel=" + k}})
	}

	p, ok := profiles[*prof]
	if !ok {
		fatal(fmt.Errorf("unknown profile %q", *prof))
	}
	qd, ok := quicDefaults[*quicMode]
	if !ok {
		fatal(fmt.Errorf("-quic %q: rr or bulk", *quicMode))
	}
	if onlyQUIC(*serversFlag) {
		p.conns, p.sizes, p.depths = qd.conns, qd.sizes, qd.depths
	}
	if *connsFlag != "" {
		p.conns = ints(*connsFlag)
	}
	if *sizesFlag != "" {
		p.sizes = ints(*sizesFlag)
	}
	if *depthsFlag != "" {
		p.depths = ints(*depthsFlag)
	}
	if *reps > 0 {
		p.reps = *reps
	}
	if *where {
		p.reps, *targetReps = 1, 1
		if _, err := exec.LookPath("perf"); err != nil {
			fatal(fmt.Errorf("-where needs perf (Debian: apt-get install linux-perf): %v", err))
		}
	}
	if *targetReps >= 0 {
		p.targetReps = *targetReps
	}
	if p.targetReps < p.reps {
		p.targetReps = p.reps
	}
	if *warmup > 0 {
		p.warmup = *warmup
	}
	if *duration > 0 {
		p.duration = *duration
	}
	if *label == "" {
		*label = fmt.Sprintf("%s profile", *prof)
	}
	benchDir, err := os.Getwd()
	if err != nil || !fileExists(filepath.Join(benchDir, "cmd", "harness")) {
		fatal(fmt.Errorf("run the harness from bench/"))
	}
	meta := collectMeta(*prof, *label, p)
	meta.Kernels = kernels
	meta.PublishTo = *publishTo
	meta.ServerCPU, meta.ClientCP = *serverCPU, *clientCPU
	for _, s := range strings.Split(*serversFlag, ",") {
		if _, ok := quicServers[strings.TrimSpace(s)]; ok {
			meta.QUIC = *quicMode
		}
	}

	if *report != "" {
		rows, err := readCSV(*report)
		if err != nil {
			fatal(err)
		}
		meta = readMeta(*report, meta)
		if *publishTo != "" {
			meta.PublishTo = *publishTo
		}
		addKernelOrder(meta.Kernels)
		dir := filepath.Dir(*report)
		if err := writeReport(dir, rows, meta, *publish, benchDir); err != nil {
			fatal(err)
		}
		return
	}

	if *serverCPU == *clientCPU {
		fatal(fmt.Errorf("server and client must be pinned to different CPUs"))
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		fatal(fmt.Errorf("taskset (util-linux) is needed to pin server and client: %v", err))
	}
	wanted := map[string]bool{}
	for _, s := range strings.Split(*serversFlag, ",") {
		if s = strings.TrimSpace(s); s != "" {
			wanted[s] = true
		}
	}
	for _, v := range variants {
		if !contains(serverOrder, v.base) || contains(serverOrder, v.name) {
			fatal(fmt.Errorf("variant %s: unknown server %q or a name already taken", v.name, v.base))
		}
		wanted[v.base] = true
	}
	for s := range wanted {
		if !contains(serverOrder, s) {
			fatal(fmt.Errorf("unknown server %q (have %s)", s, strings.Join(serverOrder, ", ")))
		}
	}
	binDir := filepath.Join(benchDir, "bin")
	progress("building servers and load generator into %s…\n", binDir)
	servers, cinfo, err := build(benchDir, binDir, wanted, *setup)
	if err != nil {
		fatal(err)
	}
	meta.CInfo = cinfo
	addVariants(servers, variants)
	var order []server
	for _, n := range serverOrder {
		if s, ok := servers[n]; ok {
			order = append(order, s)
		}
	}
	if len(order) == 0 {
		fatal(fmt.Errorf("no server could be built"))
	}
	if *outDir == "" {
		kind := *prof
		if *where {
			kind = "where"
		}
		if *idle > 0 {
			kind = "idle"
		}
		*outDir = filepath.Join(benchDir, "out", time.Now().Format("20060102-150405")+"-"+kind)
	}

	if *idle > 0 {
		size := 64
		if *sizesFlag != "" {
			size = p.sizes[0]
		}
		n := 3
		if *reps > 0 {
			n = *reps
		}
		if err := idleMode(order, *idle, size, n, *idleSettle, *serverCPU, *clientCPU, binDir, benchDir, *outDir, meta); err != nil {
			fatal(err)
		}
		return
	}

	var specs []runSpec
	for rep := 1; rep <= p.targetReps; rep++ {
		for _, size := range p.sizes {
			for _, depth := range p.depths {
				for _, conns := range p.conns {
					if rep > p.reps && !targetCell(conns, size) {
						continue
					}
					// Servers innermost, so that drift hits all alike, and
					// each repetition starts one server further on, so that
					// none always runs first after a change of cell.
					for i := range order {
						s := order[(i+rep-1)%len(order)]
						spec := runSpec{Server: s, Conns: conns, Size: size, Depth: depth, Rep: rep,
							Warmup: p.warmup, Duration: p.duration, Requests: *requests,
							ServerCPU: *serverCPU, ClientCP: *clientCPU}
						if s.QUIC {
							spec.QUICMode = *quicMode
						}
						if *where {
							spec.ProfileDir = *outDir
						}
						specs = append(specs, spec)
					}
				}
			}
		}
	}
	names := make([]string, len(order))
	for i, s := range order {
		names[i] = s.Name
	}
	meta.Servers = names
	perRun := p.warmup + p.duration + 400*time.Millisecond
	progress("%d runs (%s; %d reps, %d for the target cells) of about %s each: about %s; output in %s\n",
		len(specs), strings.Join(names, ", "), p.reps, p.targetReps, perRun.Round(100*time.Millisecond),
		(time.Duration(len(specs)) * perRun).Round(time.Second), *outDir)

	if *dryRun {
		return
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rawPath := filepath.Join(*outDir, "results.csv")
	f, err := os.Create(rawPath)
	if err != nil {
		fatal(err)
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	writeMeta(*outDir, meta)
	var rows []row
	start := time.Now()
	loadgenBin := filepath.Join(binDir, "loadgen")
	for i, spec := range specs {
		if ctx.Err() != nil {
			progress("\ninterrupted: %d of %d runs done\n", i, len(specs))
			break
		}
		r, err := runOne(ctx, spec, loadgenBin)
		if ctx.Err() != nil {
			progress("\ninterrupted: %d of %d runs done\n", i, len(specs))
			break
		}
		if err != nil {
			r.Errors++
			r.Note = firstLine(err.Error())
		}
		rows = append(rows, r)
		_ = w.Write(r.fields())
		w.Flush()
		done := i + 1
		eta := time.Duration(float64(time.Since(start)) / float64(done) * float64(len(specs)-done)).Round(time.Second)
		status := fmt.Sprintf("%7.0f req/s %6.1f MB/s  srv %3.0f%% CPU %7.0f req/CPU-s  p99 %7.0fµs",
			r.RPS, r.MBps, r.ServerUtil*100, r.ReqPerCPU, r.P99)
		if r.Elapsed > 0 && r.RunqWait/r.Elapsed > 0.05 {
			status += fmt.Sprintf("  (server waited %.0f%% for its CPU)", 100*r.RunqWait/r.Elapsed)
		}
		if spec.Server.QUIC {
			status += fmt.Sprintf("  %7.1f MB/CPU-s  GSO server %s, client %s", r.MBPerCPU, orDefault(r.ServerGSO, "?"), orDefault(r.ClientGSO, "?"))
		}
		if r.Errors > 0 {
			status += "  ERR " + r.Note
		}
		progress("[%3d/%d %3.0f%% eta %8s] %-15s c=%-4d s=%-5d d=%-2d rep %d  %s\n", done, len(specs),
			100*float64(done)/float64(len(specs)), eta, spec.Server.Name, spec.Conns, spec.Size, spec.Depth, spec.Rep, status)
	}
	f.Close()
	meta.Finished = time.Now().UTC().Format(time.RFC3339)
	meta.LoadAfter = loadavg()
	writeMeta(*outDir, meta)
	if *where {
		md := whereReport(*outDir, rows, meta)
		if err := os.WriteFile(filepath.Join(*outDir, "where.md"), []byte(md), 0o644); err != nil {
			fatal(err)
		}
		fmt.Print(md)
		progress("where: %s\n", filepath.Join(*outDir, "where.md"))
		if *publish {
			if err := os.WriteFile(filepath.Join(benchDir, "..", "docs", "bench", "where.md"), []byte(md), 0o644); err != nil {
				fatal(err)
			}
			progress("published: docs/bench/where.md\n")
		}
	} else if err := writeReport(*outDir, rows, meta, *publish, benchDir); err != nil {
		fatal(err)
	}
	progress("raw CSV: %s\n", rawPath)
	failed := 0
	for _, r := range rows {
		if r.Errors > 0 {
			failed++
		}
	}
	switch {
	case failed > 0:
		fatal(fmt.Errorf("%d of %d runs failed (see the note column of %s)", failed, len(rows), rawPath))
	case len(rows) < len(specs):
		fatal(fmt.Errorf("interrupted after %d of %d runs", len(rows), len(specs)))
	}
}

// onlyQUIC reports whether every server named in -servers is a QUIC
// workload's server.
func onlyQUIC(servers string) bool {
	n := 0
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, ok := quicServers[s]; !ok {
			return false
		}
		n++
	}
	return n > 0
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			fatal(fmt.Errorf("bad number %q in %q", f, s))
		}
		out = append(out, v)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "harness:", err)
	os.Exit(1)
}

// A variant runs one of the servers under another name with extra
// environment (the RINGLOOP switch, say) or another build of its binary
// (bin=PATH: a server built from an earlier commit), so that the two are
// measured side by side in one run.
type variant struct {
	name, base string
	env, args  []string
	bin        string
}

func parseVariant(v string) (variant, error) {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return variant{}, fmt.Errorf("want NAME=SERVER:ENV=VALUE, got %q", v)
	}
	parts := strings.Split(rest, ":")
	x := variant{name: name, base: parts[0]}
	for _, e := range parts[1:] {
		if !strings.Contains(e, "=") {
			return variant{}, fmt.Errorf("variant %s: %q is not ENV=VALUE, arg=FLAG or bin=PATH", name, e)
		}
		if path, ok := strings.CutPrefix(e, "bin="); ok {
			x.bin = path
			continue
		}
		if arg, ok := strings.CutPrefix(e, "arg="); ok {
			x.args = append(x.args, arg)
			continue
		}
		x.env = append(x.env, e)
	}
	if len(x.env) == 0 && len(x.args) == 0 && x.bin == "" {
		return variant{}, fmt.Errorf("variant %s: no ENV=VALUE, arg=FLAG or bin=PATH", name)
	}
	return x, nil
}

// addVariants adds each variant whose server was built, placed after it in
// the report's order.
func addVariants(servers map[string]server, variants []variant) {
	for i, v := range variants {
		sv, ok := servers[v.base]
		if !ok {
			continue
		}
		sv.Name = v.name
		sv.Env = append(append([]string(nil), sv.Env...), v.env...)
		if v.bin != "" {
			sv.Argv = append([]string{v.bin}, sv.Argv[1:]...)
		}
		sv.Argv = append(append([]string(nil), sv.Argv...), v.args...)
		servers[v.name] = sv
		at := indexOf(serverOrder, v.base) + 1
		serverOrder = append(serverOrder[:at], append([]string{v.name}, serverOrder[at:]...)...)
		if serverColor[v.name] == "" {
			serverColor[v.name] = variantColors[i%len(variantColors)]
		}
	}
}

var variantColors = []string{"#e377c2", "#17becf", "#bcbd22", "#7f7f7f"}

// kernelServer names ringloop-uring run under a kernel profile.
func kernelServer(k string) string { return "uring-k" + k }

// parseKernels reads -kernels: versions as RINGLOOP=kernel= takes them
// (major.minor), newest first in the report whatever the order given.
func parseKernels(v string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(v, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		maj, min, ok := strings.Cut(k, ".")
		if _, err := strconv.Atoi(maj); err != nil || !ok {
			return nil, fmt.Errorf("-kernels: %q is not a kernel version like 6.1", k)
		}
		if _, err := strconv.Atoi(min); err != nil {
			return nil, fmt.Errorf("-kernels: %q is not a kernel version like 6.1", k)
		}
		if contains(out, k) {
			return nil, fmt.Errorf("-kernels: %s given twice", k)
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return kernelLess(out[j], out[i]) })
	return out, nil
}

// kernelLess orders kernel versions numerically.
func kernelLess(a, b string) bool {
	am, an, _ := strings.Cut(a, ".")
	bm, bn, _ := strings.Cut(b, ".")
	x, _ := strconv.Atoi(am)
	y, _ := strconv.Atoi(bm)
	if x != y {
		return x < y
	}
	x, _ = strconv.Atoi(an)
	y, _ = strconv.Atoi(bn)
	return x < y
}

// addKernelOrder places the kernel-profile servers of a run being redrawn
// (-report) after ringloop-uring, as the run placed them.
func addKernelOrder(kernels []string) {
	at := indexOf(serverOrder, "ringloop-uring") + 1
	for i := len(kernels) - 1; i >= 0; i-- {
		if n := kernelServer(kernels[i]); !contains(serverOrder, n) {
			serverOrder = append(serverOrder[:at], append([]string{n}, serverOrder[at:]...)...)
		}
	}
}
