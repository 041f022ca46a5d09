package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// readmeImports are the packages a README fragment may use without
// importing them: the wrapper imports those it names.
var readmeImports = map[string]string{
	"conn":    module + "/conn",
	"loop":    module + "/loop",
	"ring":    module + "/ring",
	"sched":   module + "/sched",
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"http":    "net/http",
	"io":      "io",
	"log":     "log",
	"net":     "net",
	"os":      "os",
	"signal":  "os/signal",
	"strings": "strings",
	"syscall": "syscall",
	"time":    "time",
	"tls":     "crypto/tls",
}

// readmeGoBlocks returns the ```go blocks of the README, in order.
func readmeGoBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, line)
		}
	}
	if in {
		t.Fatal("README.md: a ```go block is not closed")
	}
	return blocks
}

// readmeProgram turns a README block into a main package: a block that
// starts with "package main" is one already; any other is a fragment of
// main's body, and gets the imports of readmeImports that it names.
func readmeProgram(block string) string {
	if strings.HasPrefix(strings.TrimSpace(block), "package main") {
		return block
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b([a-z]+)\.[A-Za-z_]`).FindAllStringSubmatch(block, -1) {
		if path, ok := readmeImports[m[1]]; ok {
			used[path] = true
		}
	}
	paths := make([]string, 0, len(used))
	for p := range used {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, p := range paths {
		b.WriteString("\t" + strconv.Quote(p) + "\n")
	}
	b.WriteString(")\n\nfunc main() {\n")
	for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		b.WriteString("\t" + line + "\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// TestReadmeGoBlocksBuild builds every ```go block of README.md as a
// program of this module: a complete program as it is, a fragment inside
// a main function (readmeProgram). The programs are written to a
// directory under test/testdata, which package patterns such as ./...
// skip, and built with the module's own go.mod, so no network is needed.
func TestReadmeGoBlocksBuild(t *testing.T) {
	blocks := readmeGoBlocks(t)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("testdata", "readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.Remove("testdata") // only if nothing else is there
	})
	var pkgs []string
	for i, block := range blocks {
		pkg := filepath.Join(dir, "block"+strconv.Itoa(i+1))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(readmeProgram(block)), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkg))
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	args := append([]string{"build", "-o", t.TempDir() + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command(gobin, args...)
	cmd.Env = append(os.Environ(), "GOPROXY=off") // everything comes from go.sum and the module cache
	if out, err := cmd.CombinedOutput(); err != nil {
		for i, block := range blocks {
			t.Logf("block %d as built:\n%s", i+1, readmeProgram(block))
		}
		t.Fatalf("go build of the README's Go blocks: %v\n%s", err, out)
	}
	t.Logf("built %d README blocks", len(blocks))
}
