package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func synthetic() []row {
	var rows []row
	eff := map[string]float64{"c-liburing": 200e3, "ringloop-uring": 190e3, "ringloop-epoll": 160e3, "gnet": 150e3, "net": 140e3}
	for _, c := range []int{1, 64, 256} {
		for rep := 1; rep <= 3; rep++ {
			for srv, e := range eff {
				r := row{Server: srv, Conns: c, Size: 64, Depth: 1, Rep: rep, Elapsed: 2, Requests: uint64(e) * 2,
					ServerCPU: 2, ServerUtil: 1, RPS: e, ReqPerCPU: e + float64(rep), P99: 100, RSSBaseKB: 1000, RSSPlateauKB: 1000 + uint64(c)}
				if srv == "ringloop-uring" {
					r.P99 = 120 // worse than gnet: that target must miss
				}
				rows = append(rows, r)
			}
		}
	}
	rows = append(rows, row{Server: "net", Conns: 256, Size: 64, Depth: 1, Rep: 4, Errors: 1, Note: "boom"})
	return rows
}

func TestSummaryAndTargets(t *testing.T) {
	s := summarize(synthetic())
	st := s.get("gnet", 64, 64, 1, "reqpercpu")
	if st.N != 3 || st.Med != 150e3+2 || st.Min != 150e3+1 || st.Max != 150e3+3 {
		t.Fatalf("median/min/max: %+v", st)
	}
	if s.errs[cellKey{"net", 256, 64, 1}] != 1 {
		t.Fatal("failed run not counted")
	}
	// uring ÷ gnet 1.27, ÷ net 1.36, ÷ C 0.95, ÷ epoll 1.19 pass; p99 120 > 100 misses.
	want := []string{"**pass**", "**pass**", "**pass**", "**pass**", "**miss**", "**miss**", "**miss**"} // the UDP ones: not measured
	for i, tg := range targets() {
		tg.evaluate(s)
		got := "**miss**"
		if tg.any && tg.pass {
			got = "**pass**"
		}
		if got != want[i] {
			t.Errorf("target %q: %s (%v), want %s", tg.text, got, tg.measured, want[i])
		}
	}
}

func TestReportFiles(t *testing.T) {
	dir := t.TempDir()
	if err := writeReport(dir, synthetic(), meta{Label: "test"}, false, dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"summary.csv", "benchmarks.md", "throughput-s64-d1.svg", "cpu-efficiency-s64-d1.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	for _, s := range []string{"uring ÷ C", "| 64 | 200k", "failed", "![Throughput, 64 B messages, depth 1](throughput-s64-d1.svg)"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

func TestCSVRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.csv")
	rows := synthetic()
	var b strings.Builder
	b.WriteString(strings.Join(csvHeader, ",") + "\n")
	for i := range rows {
		b.WriteString(strings.Join(rows[i].fields(), ",") + "\n")
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := readCSV(p)
	if err != nil || len(back) != len(rows) {
		t.Fatalf("%d rows back of %d: %v", len(back), len(rows), err)
	}
	if back[5].Server != rows[5].Server || back[5].ReqPerCPU != rows[5].ReqPerCPU || back[len(back)-1].Note != "boom" {
		t.Fatalf("row changed: %+v vs %+v", back[5], rows[5])
	}
}

// kernelRows is a profile run: ringloop-uring, ringloop-epoll and uring
// under two profiles, 5.10 below epoll in both cells, 6.1 above.
func kernelRows() ([]row, meta) {
	eff := map[string]float64{"ringloop-uring": 200e3, "ringloop-epoll": 160e3, kernelServer("6.1"): 190e3, kernelServer("5.10"): 120e3}
	var rows []row
	for _, size := range []int{64, 4096} {
		for rep := 1; rep <= 3; rep++ {
			for srv, e := range eff {
				rows = append(rows, row{Server: srv, Conns: 64, Size: size, Depth: 1, Rep: rep, Elapsed: 2,
					Requests: uint64(e) * 2, ServerCPU: 2, ServerUtil: 1, RPS: e, ReqPerCPU: e, P99: 100})
			}
		}
	}
	return rows, meta{Label: "profiles", Kernel: "6.18.44-x", CPU: "Some CPU", CPUs: 2, Reps: 3, Kernels: []string{"6.1", "5.10"}, Commit: "abc1234"}
}

func TestKernelSection(t *testing.T) {
	kernels, err := parseKernels("5.10, 6.1")
	if err != nil || strings.Join(kernels, ",") != "6.1,5.10" {
		t.Fatalf("parseKernels: %v %v", kernels, err)
	}
	for _, bad := range []string{"5", "x.1", "5.10,5.10"} {
		if _, err := parseKernels(bad); err == nil {
			t.Errorf("parseKernels(%q) accepted", bad)
		}
	}
	addKernelOrder(kernels)
	rows, m := kernelRows()
	sec := kernelSection(summarize(rows), m, "data.md")
	for _, want := range []string{
		"## What each kernel costs",
		"| cell | 6.18 (running) | 6.1 | 5.10 | epoll |",
		"| 64 × 64 B d1 | 200k ±0% | 190k ±0% | 120k ±0% | 160k ±0% |",
		"| 64 × 4096 B d1 | 1.25 | 1.19 | 0.75 |", // ÷ epoll
		"| 64 × 4096 B d1 | 0.95 | 0.60 |",        // ÷ running
		"**Below epoll:** 5.10 in 2 of 2 cells.",
		"commit abc1234", "Some CPU", "[data.md](data.md)",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("section lacks %q:\n%s", want, sec)
		}
	}
	if strings.Contains(sec, "6.1 in") {
		t.Errorf("6.1 reported below epoll:\n%s", sec)
	}

	// Published: the run goes to docs/bench/kernel-profiles, and only
	// its section of docs/benchmarks.md changes; a later sweep keeps it.
	root := t.TempDir()
	benchDir, docs := filepath.Join(root, "bench"), filepath.Join(root, "docs")
	for _, d := range []string{benchDir, docs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	if err := writeReport(out, synthetic(), meta{Label: "sweep"}, true, benchDir); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(out, rows, m, true, benchDir); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(docs, "benchmarks.md"))
	if !strings.Contains(string(page), "**sweep.**") || !strings.Contains(string(page), "| 64 × 64 B d1 | 200k ±0% | 190k ±0% | 120k ±0% | 160k ±0% |") {
		t.Fatalf("profile run did not splice its section into the sweep's page:\n%s", page)
	}
	if strings.Count(string(page), kernelBegin) != 1 || strings.Index(string(page), kernelBegin) > strings.Index(string(page), "## Throughput") {
		t.Errorf("section not once, before Throughput")
	}
	if _, err := os.Stat(filepath.Join(docs, "bench", "kernel-profiles", "benchmarks.md")); err != nil {
		t.Error(err)
	}
	if err := writeReport(out, synthetic(), meta{Label: "sweep2"}, true, benchDir); err != nil {
		t.Fatal(err)
	}
	page, _ = os.ReadFile(filepath.Join(docs, "benchmarks.md"))
	if !strings.Contains(string(page), "**sweep2.**") || strings.Count(string(page), "| 64 × 64 B d1 | 200k ±0% | 190k ±0% | 120k ±0% | 160k ±0% |") != 1 {
		t.Errorf("a later sweep lost the kernel section:\n%s", page)
	}
	if strings.Contains(string(page), "Not measured in this run: uring-k") || strings.Contains(string(page), ", uring-k") {
		t.Errorf("kernel servers listed as unmeasured servers")
	}
}
