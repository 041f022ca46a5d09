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
	want := []string{"**pass**", "**pass**", "**pass**", "**pass**", "**miss**"}
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
