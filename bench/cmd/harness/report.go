package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ringloop/ringloop/bench/internal/svgplot"
)

// meta describes the machine and the sweep; it is saved next to the CSV so
// that -report can redraw a run.
type meta struct {
	Label, Profile      string
	Started, Finished   string
	Kernel, CPU, GoVer  string
	CPUs                int
	CInfo               string
	LoadBefore          string
	LoadAfter           string
	Conns, Sizes        []int
	Depths              []int
	Reps                int
	TargetReps          int // repetitions of the target cells (64 B, 64–1024 conns), when more than Reps
	Warmup, Duration    string
	Servers             []string
	Command             string
	Commit              string // repository HEAD the servers were built from
	Dirty               string // uncommitted library files in the build, if any
	ServerCPU, ClientCP string
	Kernels             []string // kernel profiles ringloop-uring also ran under (-kernels)
	PublishTo           string   // -publish-to: the docs/bench directory of its own
	QUIC                string   // the QUIC workload the quic-* servers ran (-quic), if any ran
}

func collectMeta(prof, label string, p profile) meta {
	m := meta{Label: label, Profile: prof, Started: time.Now().UTC().Format(time.RFC3339),
		Conns: p.conns, Sizes: p.sizes, Depths: p.depths, Reps: p.reps, TargetReps: p.targetReps,
		Warmup: p.warmup.String(), Duration: p.duration.String(), LoadBefore: loadavg(),
		Command: "go run ./cmd/harness " + shellJoin(os.Args[1:])}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		var name, family, model string
		for _, l := range strings.Split(string(b), "\n") {
			val := func() string { return strings.TrimSpace(l[strings.IndexByte(l, ':')+1:]) }
			switch {
			case strings.HasPrefix(l, "model name"):
				name = val()
			case strings.HasPrefix(l, "cpu family"):
				family = val()
			case strings.HasPrefix(l, "model\t") || strings.HasPrefix(l, "model :"):
				model = val()
			case strings.HasPrefix(l, "processor"):
				m.CPUs++
			}
		}
		// The model name alone ("AMD EPYC") does not tell the generations
		// apart, and they differ in wakeup costs: name family and model.
		m.CPU = name
		if family != "" && model != "" {
			m.CPU = fmt.Sprintf("%s (family %s, model %s)", name, family, model)
		}
	}
	if b, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVer = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(b))
	}
	// Library files with uncommitted changes go into the build too; say so.
	if b, err := exec.Command("git", "status", "--porcelain", "--", "../ring", "../sched", "../loop", "../conn").Output(); err == nil {
		var files []string
		for _, l := range strings.Split(string(b), "\n") {
			if len(l) > 3 && strings.HasSuffix(l, ".go") && !strings.HasSuffix(l, "_test.go") {
				files = append(files, strings.TrimSpace(l[3:]))
			}
		}
		m.Dirty = strings.Join(files, ", ")
	}
	return m
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if strings.ContainsAny(a, " ()'\"") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func writeMeta(dir string, m meta) {
	b, _ := json.MarshalIndent(m, "", "  ")
	_ = os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o644)
}

func readMeta(csvPath string, def meta) meta {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(csvPath), "meta.json"))
	if err != nil {
		return def
	}
	var m meta
	if json.Unmarshal(b, &m) != nil {
		return def
	}
	return m
}

func readCSV(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, nil
	}
	// Columns by name, so that a CSV from before a column was added still
	// reads (the missing metrics stay zero).
	col := map[string]int{}
	for j, name := range recs[0] {
		col[name] = j
	}
	var rows []row
	for _, rec := range recs[1:] {
		get := func(name string) string {
			if j, ok := col[name]; ok && j < len(rec) {
				return rec[j]
			}
			return ""
		}
		fl := func(name string) float64 { v, _ := strconv.ParseFloat(get(name), 64); return v }
		in := func(name string) int { v, _ := strconv.Atoi(get(name)); return v }
		u := func(name string) uint64 { v, _ := strconv.ParseUint(get(name), 10, 64); return v }
		rows = append(rows, row{Server: get("server"), Conns: in("conns"), Size: in("size"), Depth: in("depth"), Rep: in("rep"),
			Elapsed: fl("elapsed_s"), Requests: u("requests"), RPS: fl("rps"), MBps: fl("mbps"),
			ServerCPU: fl("server_cpu_s"), ServerUtil: fl("server_util"), CPUPerMReq: fl("server_cpu_s_per_mreq"),
			ReqPerCPU: fl("req_per_server_cpu_s"), ClientCPU: fl("client_cpu_s"), RunqWait: fl("server_runq_wait_s"),
			ServerSys: fl("server_sys_s"), Ctxsw: u("server_ctxsw"),
			P50: fl("p50_us"), P99: fl("p99_us"), P999: fl("p999_us"), Max: fl("max_us"),
			RSSBaseKB: u("rss_base_kb"), RSSPlateauKB: u("rss_plateau_kb"), HWMKB: u("vmhwm_kb"),
			MemPerConnKB: fl("mem_per_conn_kb"), Errors: u("errors"), Note: get("note"),
			MBPerCPU: fl("mb_per_server_cpu_s"), ServerGSO: get("server_gso"), ClientGSO: get("client_gso"),
			MinShare: fl("min_conn_share")})
	}
	return rows, nil
}

type cellKey struct {
	Server             string
	Conns, Size, Depth int
}

// stat is the median of a metric over a cell's good repetitions, with its
// spread as (max-min)/median.
type stat struct {
	Med, Min, Max float64
	N             int
}

func (s stat) ok() bool { return s.N > 0 }

func (s stat) spread() float64 {
	if s.Med == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Med
}

type summary struct {
	cells   map[cellKey]map[string]stat
	errs    map[cellKey]int
	gso     map[cellKey]gsoSeen // QUIC servers: what their runs reported
	servers []string
	conns   []int
	sizes   []int
	depths  []int
}

var metrics = map[string]func(*row) float64{
	"rps":        func(r *row) float64 { return r.RPS },
	"mbps":       func(r *row) float64 { return r.MBps },
	"reqpercpu":  func(r *row) float64 { return r.ReqPerCPU },
	"mbpercpu":   func(r *row) float64 { return r.MBPerCPU },
	"cpupermreq": func(r *row) float64 { return r.CPUPerMReq },
	"util":       func(r *row) float64 { return r.ServerUtil },
	"p50":        func(r *row) float64 { return r.P50 },
	"p99":        func(r *row) float64 { return r.P99 },
	"p999":       func(r *row) float64 { return r.P999 },
	"hwm":        func(r *row) float64 { return float64(r.HWMKB) },
	"memconn":    func(r *row) float64 { return r.MemPerConnKB },
	"clientcpu":  func(r *row) float64 { return r.ClientCPU },
	"minshare":   func(r *row) float64 { return r.MinShare },
	// sysfrac is the kernel's share of the server's CPU; ctxsw counts
	// context switches per 1,000 requests.
	"sysfrac": func(r *row) float64 {
		if r.ServerCPU == 0 {
			return 0
		}
		return r.ServerSys / r.ServerCPU
	},
	"ctxsw": func(r *row) float64 {
		if r.Requests == 0 {
			return 0
		}
		return float64(r.Ctxsw) / float64(r.Requests) * 1000
	},
	"runqwait": func(r *row) float64 {
		if r.Elapsed == 0 {
			return 0
		}
		return r.RunqWait / r.Elapsed
	},
}

func summarize(rows []row) *summary {
	s := &summary{cells: map[cellKey]map[string]stat{}, errs: map[cellKey]int{}, gso: map[cellKey]gsoSeen{}}
	vals := map[cellKey]map[string][]float64{}
	seenSrv, seenC, seenS, seenD := map[string]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}
	for i := range rows {
		r := &rows[i]
		k := cellKey{r.Server, r.Conns, r.Size, r.Depth}
		seenSrv[r.Server], seenC[r.Conns], seenS[r.Size], seenD[r.Depth] = true, true, true, true
		if r.Errors > 0 || r.Requests == 0 {
			s.errs[k]++
			continue
		}
		if r.ServerGSO != "" || r.ClientGSO != "" {
			seen := s.gso[k]
			seen.server = addDistinct(seen.server, r.ServerGSO)
			seen.client = addDistinct(seen.client, r.ClientGSO)
			s.gso[k] = seen
		}
		if vals[k] == nil {
			vals[k] = map[string][]float64{}
		}
		for name, f := range metrics {
			vals[k][name] = append(vals[k][name], f(r))
		}
	}
	for k, m := range vals {
		s.cells[k] = map[string]stat{}
		for name, v := range m {
			sort.Float64s(v)
			med := v[len(v)/2]
			if len(v)%2 == 0 {
				med = (v[len(v)/2-1] + v[len(v)/2]) / 2
			}
			s.cells[k][name] = stat{Med: med, Min: v[0], Max: v[len(v)-1], N: len(v)}
		}
	}
	for _, n := range serverOrder {
		if seenSrv[n] {
			s.servers = append(s.servers, n)
		}
	}
	s.conns, s.sizes, s.depths = keys(seenC), keys(seenS), keys(seenD)
	return s
}

// gsoSeen is what a QUIC server's runs of one cell reported about GSO on
// the server's and on the client's side, each distinct answer once.
type gsoSeen struct{ server, client []string }

func addDistinct(list []string, v string) []string {
	if v == "" || contains(list, v) {
		return list
	}
	return append(list, v)
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func (s *summary) get(server string, conns, size, depth int, metric string) stat {
	return s.cells[cellKey{server, conns, size, depth}][metric]
}

func (s *summary) has(server string) bool { return contains(s.servers, server) }

// writeReport writes summary.csv, benchmarks.md and the plots into dir, and
// with publish also into ../docs (benchmarks.md) and ../docs/bench. A run
// with kernel profiles (-kernels) publishes into ../docs/bench/kernel-profiles
// instead and replaces only its section of ../docs/benchmarks.md; a run
// without them keeps the section that page has.
func writeReport(dir string, rows []row, m meta, publish bool, benchDir string) error {
	all := summarize(rows)
	s := summarize(withoutKernels(rows, m.Kernels))
	if err := writeSummaryCSV(filepath.Join(dir, "summary.csv"), all); err != nil {
		return err
	}
	plots, err := writePlots(dir, all)
	if err != nil {
		return err
	}
	readme := "../bench/README.md"
	if publish && (len(m.Kernels) > 0 || m.PublishTo != "") {
		readme = "../../../bench/README.md"
	}
	md := markdown(s, m, plots, "", readme, kernelSection(all, m, "results.csv"))
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(md), 0o644); err != nil {
		return err
	}
	progress("report: %s\n", filepath.Join(dir, "benchmarks.md"))
	if !publish {
		return nil
	}
	docs := filepath.Join(benchDir, "..", "docs")
	dbench := filepath.Join(docs, "bench")
	page := filepath.Join(docs, "benchmarks.md")
	old, _ := os.ReadFile(page)
	switch {
	case m.PublishTo != "":
		if strings.ContainsAny(m.PublishTo, "/.") {
			return fmt.Errorf("-publish-to %q: a plain directory name", m.PublishTo)
		}
		dbench = filepath.Join(dbench, m.PublishTo)
	case len(m.Kernels) > 0:
		dbench = filepath.Join(dbench, "kernel-profiles")
	}
	if err := os.MkdirAll(dbench, 0o755); err != nil {
		return err
	}
	if _, err := writePlots(dbench, all); err != nil {
		return err
	}
	for _, f := range []string{"results.csv", "summary.csv", "meta.json"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			if err := os.WriteFile(filepath.Join(dbench, f), b, 0o644); err != nil {
				return err
			}
		}
	}
	if m.PublishTo != "" {
		if err := os.WriteFile(filepath.Join(dbench, "benchmarks.md"), []byte(md), 0o644); err != nil {
			return err
		}
		progress("published: docs/bench/%s/\n", m.PublishTo)
		return nil
	}
	if len(m.Kernels) > 0 {
		if err := os.WriteFile(filepath.Join(dbench, "benchmarks.md"), []byte(md), 0o644); err != nil {
			return err
		}
		if len(old) == 0 {
			return fmt.Errorf("publish: %s is missing: publish a sweep first, then its kernel profiles", page)
		}
		md = spliceKernelSection(string(old), kernelSection(all, m, "bench/kernel-profiles/benchmarks.md"))
		progress("published: docs/bench/kernel-profiles/, its section of docs/benchmarks.md\n")
	} else {
		md = markdown(s, m, plots, "bench/", readme, kernelSectionOf(string(old)))
		progress("published: docs/benchmarks.md, docs/bench/\n")
	}
	return os.WriteFile(page, []byte(md), 0o644)
}

// withoutKernels drops the kernel-profile servers' rows: the report's
// tables and targets compare the servers themselves; the profiles have a
// section of their own.
func withoutKernels(rows []row, kernels []string) []row {
	if len(kernels) == 0 {
		return rows
	}
	var out []row
	for _, r := range rows {
		if !strings.HasPrefix(r.Server, kernelServer("")) {
			out = append(out, r)
		}
	}
	return out
}

// The kernel-profile section sits between these markers in
// docs/benchmarks.md, so that a sweep and a profile run, published at
// different times, each replace only their own part.
const (
	kernelBegin = "<!-- kernel profiles: generated by the harness's -kernels run -->\n"
	kernelEnd   = "<!-- end of kernel profiles -->\n"
)

// kernelSectionOf returns the kernel-profile section of a page, markers
// included, or "".
func kernelSectionOf(page string) string {
	i := strings.Index(page, kernelBegin)
	j := strings.Index(page, kernelEnd)
	if i < 0 || j < i {
		return ""
	}
	return page[i : j+len(kernelEnd)]
}

// spliceKernelSection puts sec in place of the page's kernel-profile
// section, or before its throughput section when it has none.
func spliceKernelSection(page, sec string) string {
	if old := kernelSectionOf(page); old != "" {
		return strings.Replace(page, old, sec, 1)
	}
	if i := strings.Index(page, "## Throughput\n"); i >= 0 {
		return page[:i] + sec + "\n" + page[i:]
	}
	return page + "\n" + sec
}

// kernelSection reports what each kernel profile costs: requests per server
// CPU-second of ringloop-uring under each profile against ringloop-uring on
// the running kernel and against ringloop-epoll, in every cell the profiles
// ran. It is "" when the run has no profiles.
func kernelSection(s *summary, m meta, data string) string {
	var ks []string
	for _, k := range m.Kernels {
		if s.has(kernelServer(k)) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 || !s.has("ringloop-uring") {
		return ""
	}
	running := m.Kernel
	if f := strings.SplitN(running, ".", 3); len(f) >= 2 {
		running = f[0] + "." + f[1]
	}
	type cell struct{ conns, size, depth int }
	var cells []cell
	for _, size := range s.sizes {
		for _, depth := range s.depths {
			for _, c := range s.conns {
				if s.get(kernelServer(ks[0]), c, size, depth, "reqpercpu").ok() {
					cells = append(cells, cell{c, size, depth})
				}
			}
		}
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s## What each kernel costs\n\n", kernelBegin)
	reps := fmt.Sprintf("%d repetitions", m.Reps)
	if m.TargetReps > m.Reps {
		reps += fmt.Sprintf(" (%d for the 64 B cells at 64–1024 connections)", m.TargetReps)
	}
	w("> Generated by the harness in `bench/` (`%s`), %s to %s, commit %s%s; %s (%d logical CPUs), kernel %s; %s. Raw data and plots: [%s](%s).\n\n",
		m.Command, m.Started, m.Finished, orDefault(m.Commit, "?"), dirtyNote(m.Dirty), m.CPU, m.CPUs, m.Kernel, reps, data, data)
	w("ringloop-uring under each kernel profile (`RINGLOOP=kernel=`: io_uring capped at what that release offers, see docs/kernel-support.md), side by side in one run with ringloop-uring on the running kernel (%s) and ringloop-epoll. Requests per server CPU-second, median of the repetitions; ratios are of medians.\n\n", running)
	hdr := func(cols []string) {
		w("| cell | %s |\n|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
	}
	name := func(c cell) string { return fmt.Sprintf("%d × %d B d%d", c.conns, c.size, c.depth) }
	get := func(srv string, c cell) stat { return s.get(srv, c.conns, c.size, c.depth, "reqpercpu") }

	w("**Requests per server CPU-second**\n\n")
	cols := []string{running + " (running)"}
	cols = append(cols, ks...)
	if s.has("ringloop-epoll") {
		cols = append(cols, "epoll")
	}
	hdr(cols)
	for _, c := range cells {
		line := "| " + name(c) + " | " + cellText(get("ringloop-uring", c), s.errs[cellKey{"ringloop-uring", c.conns, c.size, c.depth}], kfmt)
		for _, k := range ks {
			line += " | " + cellText(get(kernelServer(k), c), s.errs[cellKey{kernelServer(k), c.conns, c.size, c.depth}], kfmt)
		}
		if s.has("ringloop-epoll") {
			line += " | " + cellText(get("ringloop-epoll", c), s.errs[cellKey{"ringloop-epoll", c.conns, c.size, c.depth}], kfmt)
		}
		w("%s |\n", line)
	}
	w("\n")

	below := map[string]int{}
	if s.has("ringloop-epoll") {
		w("**÷ epoll** (below 1: io_uring on that kernel costs more CPU per request than epoll)\n\n")
		hdr(append([]string{running + " (running)"}, ks...))
		for _, c := range cells {
			ep := get("ringloop-epoll", c)
			if st := get("ringloop-uring", c); st.ok() && ep.ok() && st.Med < ep.Med {
				below[running+" (running)"]++
			}
			line := "| " + name(c) + " | " + ratio(get("ringloop-uring", c), ep)
			for _, k := range ks {
				st := get(kernelServer(k), c)
				line += " | " + ratio(st, ep)
				if st.ok() && ep.ok() && st.Med < ep.Med {
					below[k]++
				}
			}
			w("%s |\n", line)
		}
		w("\n")
	}
	w("**÷ the running kernel** (what a user on that kernel gives up against %s)\n\n", running)
	hdr(ks)
	for _, c := range cells {
		line := "| " + name(c)
		for _, k := range ks {
			line += " | " + ratio(get(kernelServer(k), c), get("ringloop-uring", c))
		}
		w("%s |\n", line)
	}
	w("\n")
	if s.has("ringloop-epoll") {
		var notes []string
		for _, k := range append([]string{running + " (running)"}, ks...) {
			if below[k] > 0 {
				notes = append(notes, fmt.Sprintf("%s in %d of %d cells", k, below[k], len(cells)))
			}
		}
		if len(notes) > 0 {
			w("**Below epoll:** %s. ", strings.Join(notes, ", "))
		} else {
			w("**No profile falls below epoll in this run.** ")
		}
		w("`loop.BackendAuto` runs io_uring only where the kernel has multishot receive (6.0 and later) and epoll before it; `BackendUring` asks for io_uring on any kernel from 5.6.\n\n")
	}
	var disturbed []string
	for _, c := range cells {
		for _, srv := range append([]string{"ringloop-uring", "ringloop-epoll"}, kernelServers(ks)...) {
			if st := s.get(srv, c.conns, c.size, c.depth, "runqwait"); st.ok() && st.Med > 0.05 {
				disturbed = append(disturbed, fmt.Sprintf("%s %s (%.0f%%)", srv, name(c), st.Med*100))
			}
		}
	}
	if len(disturbed) > 0 {
		w("Waited more than 5 %% of the window for the server's CPU (median of the repetitions; the server's own threads count too, and other processes where there were): %s.\n\n", strings.Join(disturbed, ", "))
	}
	w("%s", kernelEnd)
	return b.String()
}

func writeSummaryCSV(path string, s *summary) error {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	hdr := []string{"server", "conns", "size", "depth", "reps_ok", "reps_failed"}
	names := []string{"rps", "mbps", "reqpercpu", "mbpercpu", "cpupermreq", "util", "p50", "p99", "p999", "hwm", "memconn", "clientcpu", "runqwait", "sysfrac", "ctxsw", "minshare"}
	for _, n := range names {
		hdr = append(hdr, n+"_median", n+"_min", n+"_max")
	}
	_ = w.Write(hdr)
	for _, size := range s.sizes {
		for _, depth := range s.depths {
			for _, conns := range s.conns {
				for _, srv := range s.servers {
					k := cellKey{srv, conns, size, depth}
					st := s.cells[k]
					rec := []string{srv, strconv.Itoa(conns), strconv.Itoa(size), strconv.Itoa(depth),
						strconv.Itoa(st["rps"].N), strconv.Itoa(s.errs[k])}
					for _, n := range names {
						v := st[n]
						rec = append(rec, g(v.Med), g(v.Min), g(v.Max))
					}
					_ = w.Write(rec)
				}
			}
		}
	}
	w.Flush()
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func g(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// serverColor keeps each server's colour the same in every plot.
var serverColor = map[string]string{
	"c-liburing":     "#555555",
	"ringloop-uring": "#d62728",
	"ringloop-epoll": "#ff7f0e",
	"gnet":           "#1f77b4",
	"net":            "#2ca02c",

	"http-ringloop-uring":     "#d62728",
	"http-ringloop-epoll":     "#ff7f0e",
	"http-net":                "#2ca02c",
	"fasthttp-ringloop-uring": "#9467bd",
	"fasthttp-net":            "#8c564b",

	"udp-ringloop-uring": "#d62728",
	"udp-ringloop-epoll": "#ff7f0e",
	"udp-gnet":           "#1f77b4",
	"udp-net":            "#2ca02c",
	"udp-mmsg":           "#555555",
}

type plotRef struct {
	Title, File string
}

func writePlots(dir string, s *summary) ([]plotRef, error) {
	var refs []plotRef
	for _, size := range s.sizes {
		for _, depth := range s.depths {
			for _, pm := range []struct{ metric, file, title, ylabel string }{
				{"rps", "throughput", "Throughput", "requests/s (median)"},
				{"reqpercpu", "cpu-efficiency", "Server CPU efficiency", "requests per server CPU-second (median)"},
			} {
				p := svgplot.Plot{Title: fmt.Sprintf("%s, %d B messages, depth %d", pm.title, size, depth),
					XLabel: "connections", YLabel: pm.ylabel, XLog2: true}
				for _, srv := range s.servers {
					ser := svgplot.Series{Name: srv, Color: serverColor[srv]}
					for _, c := range s.conns {
						st := s.get(srv, c, size, depth, pm.metric)
						y := math.NaN()
						if st.ok() {
							y = st.Med
						}
						ser.X = append(ser.X, float64(c))
						ser.Y = append(ser.Y, y)
					}
					p.Series = append(p.Series, ser)
				}
				name := fmt.Sprintf("%s-s%d-d%d.svg", pm.file, size, depth)
				var b bytes.Buffer
				if err := p.Write(&b); err != nil {
					return nil, err
				}
				if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
					return nil, err
				}
				refs = append(refs, plotRef{p.Title, name})
			}
		}
	}
	return refs, nil
}

// target is one of the project's performance goals, checked cell by cell.
type target struct {
	text     string
	subject  string // server whose ratio is checked
	peer     string
	metric   string
	min      float64 // subject/peer must be ≥ min (or, for lower-is-better, ≤ 1/min)
	lower    bool    // metric is better when lower (latency)
	cellOK   func(conns, size int) bool
	measured []string
	pass     bool
	any      bool
}

// udpTargetCell is the cell the UDP targets are checked on.
func udpTargetCell(conns, size int) bool { return conns == 16 && size == 64 }

func targets() []*target {
	midConns := targetCell
	return []*target{
		{text: "ringloop/uring requests per server CPU-second ≥ 1.15× gnet (64–1024 conns × 64 B)", subject: "ringloop-uring", peer: "gnet", metric: "reqpercpu", min: 1.15, cellOK: midConns},
		{text: "ringloop/uring requests per server CPU-second ≥ 1.3× net (64–1024 conns × 64 B)", subject: "ringloop-uring", peer: "net", metric: "reqpercpu", min: 1.3, cellOK: midConns},
		{text: "ringloop/uring requests per server CPU-second ≥ 0.9× C liburing (64–1024 conns × 64 B)", subject: "ringloop-uring", peer: "c-liburing", metric: "reqpercpu", min: 0.9, cellOK: midConns},
		{text: "ringloop/uring requests per server CPU-second ≥ 1.1× ringloop/epoll (≥ 64 conns, every size)", subject: "ringloop-uring", peer: "ringloop-epoll", metric: "reqpercpu", min: 1.1, cellOK: func(c, _ int) bool { return c >= 64 }},
		{text: "ringloop/uring p99 latency no worse than gnet's (every cell)", subject: "ringloop-uring", peer: "gnet", metric: "p99", min: 1, lower: true, cellOK: func(int, int) bool { return true }},
		{text: "UDP: ringloop/uring requests per server CPU-second ≥ 1.3× net.UDPConn (16 peers × 64 B)", subject: "udp-ringloop-uring", peer: "udp-net", metric: "reqpercpu", min: 1.3, cellOK: udpTargetCell},
		{text: "UDP: ringloop/uring requests per server CPU-second ≥ 1.15× gnet (16 peers × 64 B)", subject: "udp-ringloop-uring", peer: "udp-gnet", metric: "reqpercpu", min: 1.15, cellOK: udpTargetCell},
	}
}

func (t *target) evaluate(s *summary) {
	t.pass = true
	for _, size := range s.sizes {
		for _, depth := range s.depths {
			for _, c := range s.conns {
				if !t.cellOK(c, size) {
					continue
				}
				a, b := s.get(t.subject, c, size, depth, t.metric), s.get(t.peer, c, size, depth, t.metric)
				if !a.ok() || !b.ok() || b.Med == 0 {
					continue
				}
				t.any = true
				ratio := a.Med / b.Med
				good := ratio >= t.min
				if t.lower {
					good = a.Med <= b.Med
				}
				mark := "✓"
				if !good {
					mark = "✗"
					t.pass = false
				}
				t.measured = append(t.measured, fmt.Sprintf("%d×%dB d%d: %.2f %s", c, size, depth, ratio, mark))
			}
		}
	}
}

func markdown(s *summary, m meta, plots []plotRef, plotPrefix, readme, kernels string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Benchmarks\n\n")
	w("> **%s.** Generated by the harness in `bench/` (`%s`), %s to %s. Do not edit by hand: rerun the harness.\n\n", m.Label, m.Command, m.Started, m.Finished)
	if quicOnly(s) {
		w("QUIC servers side by side in one run on one machine; what counts are the ratios between them, not the absolute numbers. ")
		w("Each server runs alone, pinned to CPU %s, against the same quic-go load generator pinned to CPU %s (both with GOMAXPROCS=1); every byte received is verified. ", orDefault(m.ServerCPU, "0"), orDefault(m.ClientCP, "1"))
	} else {
		w("Echo servers side by side in one run on one machine; what counts are the ratios between them, not the absolute numbers. ")
		w("Each server runs alone, pinned to CPU %s, against the same epoll load generator pinned to CPU %s (both with GOMAXPROCS=1 where they are Go programs); every byte echoed is verified. ", orDefault(m.ServerCPU, "0"), orDefault(m.ClientCP, "1"))
	}
	w("How the numbers are taken and how to read them: [bench/README.md](%s). Raw data: [%sresults.csv](%sresults.csv), medians: [%ssummary.csv](%ssummary.csv).\n\n", readme, plotPrefix, plotPrefix, plotPrefix, plotPrefix)
	if plotPrefix != "" {
		w("Where the servers' CPU goes, and what that means for the targets below: [benchmarks-analysis.md](benchmarks-analysis.md).\n\n")
	}
	w("## Machine and sweep\n\n")
	w("| | |\n|---|---|\n")
	w("| built from | commit %s%s |\n", orDefault(m.Commit, "?"), dirtyNote(m.Dirty))
	w("| kernel | %s |\n| CPU | %s (%d logical CPUs) |\n| Go | %s |\n| C server | %s |\n", m.Kernel, m.CPU, m.CPUs, m.GoVer, orDefault(m.CInfo, "not built"))
	w("| load average before / after | %s / %s (a shared machine shows here) |\n", m.LoadBefore, m.LoadAfter)
	reps := fmt.Sprintf("%d repetitions", m.Reps)
	if m.TargetReps > m.Reps {
		reps += fmt.Sprintf(" (%d for the 64 B cells at 64–1024 connections, on which the efficiency targets are checked)", m.TargetReps)
	}
	w("| sweep | conns %v × sizes %v × depth %v, %s, warm-up %s, window %s |\n", m.Conns, m.Sizes, m.Depths, reps, m.Warmup, m.Duration)
	w("| servers | %s |\n\n", strings.Join(s.servers, ", "))
	if m.Reps > 0 && m.Reps < 3 {
		w("**Fewer than 3 repetitions per cell: a check that the harness works, not a result.**\n\n")
	}
	// Outside contention: the C server is one thread, so time it spent
	// runnable but waiting for its CPU was taken by other processes. The Go
	// servers' waits also count their own threads waiting for each other
	// (the runtime's sysmon, net's netpoller thread), which is part of
	// what they cost, not a disturbance. Without the C server, every
	// server's wait is used.
	probe := []string{"c-liburing"}
	if !s.has("c-liburing") {
		probe = s.servers
	}
	var disturbed []string
	cells := 0
	lo, hi := math.Inf(1), 0.0
	for _, size := range s.sizes {
		for _, depth := range s.depths {
			for _, c := range s.conns {
				for _, srv := range probe {
					st := s.get(srv, c, size, depth, "runqwait")
					if !st.ok() {
						continue
					}
					cells++
					if st.Med > 0.05 {
						disturbed = append(disturbed, fmt.Sprintf("%s %d×%dB d%d (%.0f%%)", srv, c, size, depth, st.Med*100))
						lo, hi = math.Min(lo, st.Med), math.Max(hi, st.Med)
					}
				}
			}
		}
	}
	switch {
	case len(disturbed) == cells && cells > 0:
		w("**Every cell was disturbed**: %s waited %.0f–%.0f %% of the window for its CPU (median of the repetitions; see the contention table), so other work shared the server's CPU throughout the run. Read the ratios as indicative only.\n\n", strings.Join(probe, ", "), lo*100, hi*100)
	case len(disturbed) > 0:
		w("**Disturbed cells** (%s, single-threaded, waited more than 5 %% of the window for its CPU, median of the repetitions: other processes shared the server's CPU): %s.\n\n", strings.Join(probe, ", "), strings.Join(disturbed, ", "))
	}
	missing := []string{}
	for _, n := range serverOrder {
		if !s.has(n) && !strings.HasPrefix(n, kernelServer("")) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		w("Not measured in this run: %s.\n\n", strings.Join(missing, ", "))
	}

	w("## Targets\n\n| target | result | cells (ratio, ✓/✗) |\n|---|---|---|\n")
	for _, t := range targets() {
		t.evaluate(s)
		res := "not measured"
		if t.any && t.pass {
			res = "**pass**"
		} else if t.any {
			res = "**miss**"
		}
		w("| %s | %s | %s |\n", t.text, res, strings.Join(t.measured, "; "))
	}
	w("\nRatios are of medians; for latency the ratio is ringloop/uring p99 ÷ gnet p99 (≤ 1 passes).\n\n")

	w("## Server CPU efficiency\n\nRequests per server CPU-second: median of the repetitions, ± half their range relative to the median, and ratios of the first ringloop server against the C ceiling, gnet and `net`.\n\n")
	subject := ""
	for _, n := range []string{"ringloop-uring", "ringloop-epoll"} {
		if s.has(n) {
			subject = n
			break
		}
	}
	for _, size := range s.sizes {
		for _, depth := range s.depths {
			w("### %d B, depth %d\n\n", size, depth)
			hdr := "| conns |"
			sep := "|---:|"
			for _, srv := range s.servers {
				hdr += " " + srv + " |"
				sep += "---:|"
			}
			var peers []string
			if subject != "" {
				for _, p := range []string{"c-liburing", "gnet", "net", "ringloop-epoll"} {
					if s.has(p) && p != subject {
						peers = append(peers, p)
						hdr += fmt.Sprintf(" %s ÷ %s |", short(subject), short(p))
						sep += "---:|"
					}
				}
			}
			w("%s\n%s\n", hdr, sep)
			for _, c := range s.conns {
				line := fmt.Sprintf("| %d |", c)
				for _, srv := range s.servers {
					st := s.get(srv, c, size, depth, "reqpercpu")
					line += " " + cellText(st, s.errs[cellKey{srv, c, size, depth}], kfmt) + " |"
				}
				for _, p := range peers {
					line += " " + ratio(s.get(subject, c, size, depth, "reqpercpu"), s.get(p, c, size, depth, "reqpercpu")) + " |"
				}
				w("%s\n", line)
			}
			w("\n")
		}
	}

	section := func(title, metric, note string, f func(float64) string) {
		w("## %s\n\n%s\n\n", title, note)
		for _, size := range s.sizes {
			for _, depth := range s.depths {
				w("**%d B, depth %d**\n\n| conns |", size, depth)
				for _, srv := range s.servers {
					w(" %s |", srv)
				}
				w("\n|---:|%s\n", strings.Repeat("---:|", len(s.servers)))
				for _, c := range s.conns {
					w("| %d |", c)
					for _, srv := range s.servers {
						w(" %s |", cellText(s.get(srv, c, size, depth, metric), s.errs[cellKey{srv, c, size, depth}], f))
					}
					w("\n")
				}
				w("\n")
			}
		}
	}
	if kernels != "" {
		w("%s\n", kernels)
	}
	section("Throughput", "rps", "Requests per second (median ± half the range of the repetitions). MB/s is requests/s × size (one direction); it is in the CSVs.", kfmt)
	section("Server CPU utilisation", "util", "Server CPU-seconds per second of the window: 100 % means the server's CPU was saturated; below that the client or the round trip limited the rate.", pct)
	section("CPU contention", "runqwait", "Time the server's threads were runnable but waited for their CPU, per second of the window (from /proc/<pid>/task/*/schedstat). For the single-threaded C server this is other processes taking its CPU: near 0 % on a quiet machine, and a few percent or more means the cell is disturbed. For a Go server it also counts the server's own threads waiting for each other (the runtime's sysmon thread, `net`'s netpoller thread and goroutines), which is part of its cost.", pct)
	section("Kernel share of server CPU", "sysfrac", "System time ÷ (user + system time) of the server in the window, from /proc/<pid>/stat. On loopback a server's kernel time includes the TCP work of both ends for what it sends (the peer's receive path runs in the sender's context), so this share bounds what any user-space design can save.", pct)
	section("Context switches per 1,000 requests", "ctxsw", "Voluntary and involuntary context switches of the server's threads in the window (/proc/<pid>/task/*/status), per 1,000 requests: how often it went to sleep or was preempted.", f1)
	section("Least served connection", "minshare", "Requests the least served connection completed in the window, over the mean per connection: 1 when all progressed alike, 0 when one got nothing. A server that starves some connections can post a higher rate than a fair one (its working set is smaller).", f2)
	section("Latency p99", "p99", "p99 latency in µs (median of the repetitions' p99). p50 and p99.9 are in the CSVs.", us1)
	section("Latency p99.9", "p999", "p99.9 latency in µs.", us1)
	section("Peak RSS", "hwm", "VmHWM of the server in MiB at the end of the run.", mib)
	section("Memory per connection", "memconn", "(VmRSS when the measured window starts − VmRSS before the first connection) ÷ connections, in KiB; meaningful from ~64 connections up.", kib)

	w("%s", quicSection(s, m))
	w("## Plots\n\n")
	for _, p := range plots {
		w("![%s](%s%s)\n\n", p.Title, plotPrefix, p.File)
	}
	return b.String()
}

func dirtyNote(d string) string {
	if d == "" {
		return ""
	}
	return " plus uncommitted changes to " + d
}

func short(n string) string {
	switch n {
	case "ringloop-uring":
		return "uring"
	case "ringloop-epoll":
		return "epoll"
	case "c-liburing":
		return "C"
	}
	return n
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func cellText(st stat, failed int, f func(float64) string) string {
	if !st.ok() {
		if failed > 0 {
			return "failed"
		}
		return "–"
	}
	t := f(st.Med)
	if st.N > 1 {
		t += fmt.Sprintf(" ±%.0f%%", st.spread()*50)
	}
	if failed > 0 {
		t += fmt.Sprintf(" (%d failed)", failed)
	}
	return t
}

func ratio(a, b stat) string {
	if !a.ok() || !b.ok() || b.Med == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a.Med/b.Med)
}

func kfmt(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func pct(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }
func us1(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string  { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string  { return fmt.Sprintf("%.2f", v) }
func mib(v float64) string { return fmt.Sprintf("%.1f", v/1024) }
func kib(v float64) string { return fmt.Sprintf("%.1f", v) }

func kernelServers(ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = kernelServer(k)
	}
	return out
}
