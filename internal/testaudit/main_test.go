package main

import (
	"regexp"
	"strings"
	"testing"
)

func run(t *testing.T, noSkip, mustPass string, events ...event) (bool, string) {
	t.Helper()
	var ns, mp *regexp.Regexp
	if noSkip != "" {
		ns = regexp.MustCompile(noSkip)
	}
	if mustPass != "" {
		mp = regexp.MustCompile(mustPass)
	}
	var b strings.Builder
	a := newAudit(ns, mp, &b)
	for _, e := range events {
		a.event(e)
	}
	ok := a.finish()
	return ok, b.String()
}

func skip(test, reason string) []event {
	return []event{
		{Action: "run", Package: "p", Test: test},
		{Action: "output", Package: "p", Test: test, Output: "=== RUN   " + test + "\n"},
		{Action: "output", Package: "p", Test: test, Output: "    x_test.go:1: " + reason + "\n"},
		{Action: "output", Package: "p", Test: test, Output: "--- SKIP: " + test + " (0.00s)\n"},
		{Action: "skip", Package: "p", Test: test},
	}
}

func TestAudit(t *testing.T) {
	pass := []event{
		{Action: "run", Package: "p", Test: "TestA/backend=uring"},
		{Action: "pass", Package: "p", Test: "TestA/backend=uring"},
	}
	end := event{Action: "pass", Package: "p", Elapsed: 1.5}

	ok, out := run(t, `TestA/backend=uring`, `TestA/backend=uring`, append(append(pass, skip("TestB/backend=uring", "no SEND_ZC (6.0)")...), end)...)
	if !ok || !strings.Contains(out, "p TestB/backend=uring: x_test.go:1: no SEND_ZC (6.0)") || !strings.Contains(out, "ok  \tp\t1.5s") {
		t.Errorf("allowed skip: ok=%v\n%s", ok, out)
	}

	ok, out = run(t, `TestB/backend=uring`, "", append(skip("TestB/backend=uring", "io_uring unavailable"), end)...)
	if ok || !strings.Contains(out, "skipped, but must run: p TestB/backend=uring: x_test.go:1: io_uring unavailable") {
		t.Errorf("forbidden skip passed: ok=%v\n%s", ok, out)
	}

	var b strings.Builder
	a := newAudit(regexp.MustCompile(`TestB`), nil, &b)
	a.allowSkip = regexp.MustCompile(`/SendZC$`)
	for _, e := range append(skip("TestB/SendZC", "no SEND_ZC (6.0)"), skip("TestB/Other", "gone")...) {
		a.event(e)
	}
	if a.finish() || !strings.Contains(b.String(), "must run: p TestB/Other") || strings.Contains(b.String(), "must run: p TestB/SendZC") {
		t.Errorf("-allow-skip:\n%s", b.String())
	}

	ok, out = run(t, "", `TestNothing`, append(pass, end)...)
	if ok || !strings.Contains(out, `no test matching "TestNothing" passed`) {
		t.Errorf("a -must-pass matching nothing passed: ok=%v\n%s", ok, out)
	}

	ok, out = run(t, "", "", event{Action: "output", Package: "p", Test: "TestC", Output: "boom\n"},
		event{Action: "fail", Package: "p", Test: "TestC"}, event{Action: "fail", Package: "p"})
	if ok || !strings.Contains(out, "--- FAIL: TestC (p)\n    boom") || !strings.Contains(out, "FAIL\tp") {
		t.Errorf("failure: ok=%v\n%s", ok, out)
	}
}
