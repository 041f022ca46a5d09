// Command testaudit reads `go test -json` output and prints what a person
// reading a CI log needs: each package's result, the output of every test
// that failed, and every test that was skipped with its reason. It fails
// when a test failed, when a test matching -no-skip was skipped, or when
// no test matching -must-pass passed (so that a pattern that matches
// nothing cannot pass unnoticed).
//
//	RINGLOOP=kernel=6.1 go test -json ./conn/ | go run ./internal/testaudit \
//	    -no-skip 'TestAcceptance\w*/backend=uring' -must-pass 'TestAcceptanceScale/backend=uring'
//
// .ci/run uses it for the kernel-profile pass: the acceptance tests must
// run on io_uring under the profile, not skip.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type key struct{ pkg, test string }

type audit struct {
	noSkip, mustPass *regexp.Regexp
	allowSkip        *regexp.Regexp // skips -no-skip matches that are allowed still
	out              io.Writer

	output  map[key][]string
	skipped []string // "pkg Test: reason"
	passed  map[string]bool
	failed  int
	bad     []string // forbidden skips
}

func newAudit(noSkip, mustPass *regexp.Regexp, out io.Writer) *audit {
	return &audit{noSkip: noSkip, mustPass: mustPass, out: out,
		output: map[key][]string{}, passed: map[string]bool{}}
}

func (a *audit) event(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "output":
		a.output[k] = append(a.output[k], e.Output)
		return
	case "pass":
		if e.Test == "" {
			fmt.Fprintf(a.out, "ok  \t%s\t%.1fs\n", e.Package, e.Elapsed)
		} else {
			a.passed[e.Test] = true
		}
	case "fail":
		a.failed++
		if e.Test == "" {
			// The package's own output: build errors, panics outside a
			// test, the final FAIL line.
			for _, l := range a.output[k] {
				fmt.Fprint(a.out, l)
			}
			fmt.Fprintf(a.out, "FAIL\t%s\t%.1fs\n", e.Package, e.Elapsed)
		} else {
			fmt.Fprintf(a.out, "--- FAIL: %s (%s)\n", e.Test, e.Package)
			for _, l := range a.output[k] {
				fmt.Fprint(a.out, "    "+l)
			}
		}
	case "build-output":
		fmt.Fprint(a.out, e.Output)
		return
	case "build-fail":
		a.failed++
		return
	case "skip":
		if e.Test == "" {
			fmt.Fprintf(a.out, "?   \t%s\t[no test files]\n", e.Package)
			break
		}
		reason := skipReason(a.output[k])
		a.skipped = append(a.skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason))
		if a.noSkip != nil && a.noSkip.MatchString(e.Test) && (a.allowSkip == nil || !a.allowSkip.MatchString(e.Test)) {
			a.bad = append(a.bad, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason))
		}
	default:
		return
	}
	delete(a.output, k)
}

// skipReason is the last line a skipped test logged, its t.Skip message,
// without the framing lines go test adds.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		t := strings.TrimSpace(lines[i])
		if t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") {
			return t
		}
	}
	return ""
}

// finish prints the skips and the verdict; it reports whether the run
// passes.
func (a *audit) finish() bool {
	sort.Strings(a.skipped)
	if len(a.skipped) > 0 {
		fmt.Fprintf(a.out, "skipped (%d):\n", len(a.skipped))
		for _, s := range a.skipped {
			fmt.Fprintf(a.out, "  %s\n", s)
		}
	}
	ok := a.failed == 0
	for _, s := range a.bad {
		fmt.Fprintf(a.out, "testaudit: skipped, but must run: %s\n", s)
		ok = false
	}
	if a.mustPass != nil {
		n := 0
		for t := range a.passed {
			if a.mustPass.MatchString(t) {
				n++
			}
		}
		if n == 0 {
			fmt.Fprintf(a.out, "testaudit: no test matching %q passed\n", a.mustPass)
			ok = false
		} else {
			fmt.Fprintf(a.out, "%d tests matching %q passed\n", n, a.mustPass)
		}
	}
	return ok
}

func main() {
	noSkip := flag.String("no-skip", "", "tests (regexp on the full name, subtests included) that must not be skipped")
	mustPass := flag.String("must-pass", "", "at least one test matching this regexp must pass")
	allowSkip := flag.String("allow-skip", "", "tests among -no-skip's that may skip still (a feature the kernel lacks)")
	flag.Parse()
	var ns, mp *regexp.Regexp
	var err error
	if *noSkip != "" {
		if ns, err = regexp.Compile(*noSkip); err != nil {
			fmt.Fprintln(os.Stderr, "testaudit: -no-skip:", err)
			os.Exit(2)
		}
	}
	if *mustPass != "" {
		if mp, err = regexp.Compile(*mustPass); err != nil {
			fmt.Fprintln(os.Stderr, "testaudit: -must-pass:", err)
			os.Exit(2)
		}
	}
	a := newAudit(ns, mp, os.Stdout)
	if *allowSkip != "" {
		if a.allowSkip, err = regexp.Compile(*allowSkip); err != nil {
			fmt.Fprintln(os.Stderr, "testaudit: -allow-skip:", err)
			os.Exit(2)
		}
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not test2json (go vet output, a build error before the
			// test binary ran): pass it through.
			fmt.Fprintln(os.Stdout, sc.Text())
			a.failed++
			continue
		}
		a.event(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testaudit:", err)
		os.Exit(2)
	}
	if !a.finish() {
		os.Exit(1)
	}
}
