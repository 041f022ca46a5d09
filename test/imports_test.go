package test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/ringloop/ringloop"

type pkgInfo struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages runs `go list -json` over the whole module (non-test builds).
func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "list", "-json", module+"/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkgInfo
	for {
		var p pkgInfo
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list returned no packages")
	}
	return pkgs
}

// TestPackageDAG checks the layering of the library: ring and sched import
// nothing from the module, sched makes no syscalls, loop never imports conn,
// metrics sits above conn and loop and needs nothing outside the standard
// library and golang.org/x,
// only ring and internal/sock import unsafe, and giouring is never linked
// into a non-test build.
func TestPackageDAG(t *testing.T) {
	pkgs := listPackages(t)
	rel := func(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }
	seen := map[string]bool{}
	for _, p := range pkgs {
		name := rel(p.ImportPath)
		seen[name] = true
		for _, imp := range p.Imports {
			if imp == "unsafe" && name != "ring" && name != "internal/sock" {
				t.Errorf("%s imports unsafe; only ring and internal/sock may", p.ImportPath)
			}
			if name == "sched" && (imp == "syscall" || strings.HasPrefix(imp, "golang.org/x/sys")) {
				t.Errorf("sched imports %s; it must make no syscalls", imp)
			}
			if strings.Contains(imp, "giouring") {
				t.Errorf("%s imports giouring outside the giouring test tag", p.ImportPath)
			}
		}
		for _, dep := range p.Deps {
			inModule := strings.HasPrefix(dep, module+"/")
			switch {
			case name == "ring" && inModule:
				t.Errorf("ring depends on %s; it must import nothing from the module", dep)
			case name == "sched" && inModule:
				t.Errorf("sched depends on %s; it must import nothing from the module", dep)
			case strings.HasPrefix(name, "loop") && dep == module+"/conn":
				t.Errorf("%s depends on conn; conn sits above loop", p.ImportPath)
			case (name == "loop" || name == "conn") && dep == module+"/metrics":
				t.Errorf("%s depends on metrics; metrics sits above conn and loop", p.ImportPath)
			case name == "metrics" && !inModule && !strings.HasPrefix(dep, "golang.org/x/") && strings.Contains(strings.SplitN(dep, "/", 2)[0], "."):
				t.Errorf("metrics depends on %s; it must need only what conn needs: the standard library and golang.org/x (client_golang lives in ringprom)", dep)
			case strings.Contains(dep, "giouring"):
				t.Errorf("%s links giouring", p.ImportPath)
			}
		}
	}
	for _, want := range []string{"ring", "sched", "metrics"} {
		if !seen[want] {
			t.Errorf("package %s not found by go list", want)
		}
	}
}
