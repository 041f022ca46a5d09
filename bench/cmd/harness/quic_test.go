package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// quicRows is a bulk run of the three QUIC servers: GSO on for quic-net,
// off on the adapter's side, on for every client.
func quicRows() []row {
	mb := map[string]float64{"quic-ringloop-uring": 300, "quic-ringloop-epoll": 280, "quic-net": 250}
	var rows []row
	for rep := 1; rep <= 3; rep++ {
		for srv, v := range mb {
			gso := "off"
			if srv == "quic-net" {
				gso = "on"
			}
			rows = append(rows, row{Server: srv, Conns: 16, Size: 65536, Depth: 1, Rep: rep, Elapsed: 2,
				Requests: 9000, RPS: 4500, MBps: v, ServerCPU: 2, ServerUtil: 1, ReqPerCPU: 4500, MBPerCPU: v,
				ServerGSO: gso, ClientGSO: "on"})
		}
	}
	return rows
}

func TestQUICReport(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "results.csv")
	rows := quicRows()
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
	if back[0].ServerGSO != rows[0].ServerGSO || back[0].ClientGSO != "on" || back[0].MBPerCPU != rows[0].MBPerCPU {
		t.Fatalf("row changed: %+v vs %+v", back[0], rows[0])
	}
	s := summarize(back)
	if !quicOnly(s) {
		t.Fatal("a run of QUIC servers only is not seen as one")
	}
	sec := quicSection(s, meta{QUIC: "bulk"})
	for _, want := range []string{
		"## The QUIC workload",
		"### This run: bulk",
		"**16 connections × 1 download stream each, counted in 65536 B**",
		"| quic-ringloop-uring | 300 ±0% | 1.20 |",
		"| quic-net | 250 ±0% | 1.00 |",
		"| 100% ±0% | off | on |",
		"| 100% ±0% | on | on |",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("section lacks %q:\n%s", want, sec)
		}
	}
	// An echo report carries the section's text but no results.
	echo := quicSection(summarize(synthetic()), meta{})
	if !strings.Contains(echo, "-quic bulk") || strings.Contains(echo, "### This run") {
		t.Errorf("echo report's QUIC section:\n%s", echo)
	}
}

func TestOnlyQUIC(t *testing.T) {
	for servers, want := range map[string]bool{
		"quic-net":                         true,
		"quic-ringloop-uring, quic-net":    true,
		"quic-net,net":                     false,
		"":                                 false,
		"udp-ringloop-uring,quic-net":      false,
		"quic-ringloop-epoll,":             true,
		"ringloop-uring,ringloop-epoll":    false,
		"quic-ringloop-uring,quic-unknown": false,
	} {
		if got := onlyQUIC(servers); got != want {
			t.Errorf("onlyQUIC(%q) = %v, want %v", servers, got, want)
		}
	}
}
