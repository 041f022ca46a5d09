package test

import (
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// TestDocReferences checks every reference to a file of the repository made
// in a .md file or in a Go comment: the file must exist, and a section it
// names must be a heading of that page. A section is named in one of two
// forms, both checked:
//
//   - a GitHub anchor, the slug of the heading: docs/conn.md#closing, also
//     as the target of a Markdown link;
//   - the heading's title, quoted, right after the file name and a comma:
//     docs/conn.md, "Closing".
//
// A file is referred to by a Markdown link (resolved against the page's
// directory, as GitHub does) or by a plain path with a directory in it
// (resolved against the file's directory, its Go module's root or the
// repository root). A bare file name is checked only as a link target or
// when a section follows it, since it may name a file a program writes. A
// page name followed by anything else that looks like a section (a
// capitalised word or a title in parentheses) is reported too, so that every
// section reference stays checkable.
func TestDocReferences(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	c := &refChecker{root: root, headings: map[string]*pageHeadings{}}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "vendor", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md":
			c.checkMarkdown(path)
		case ".go":
			c.checkGo(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.files < 20 || c.refs < 50 {
		t.Fatalf("scanned %d files and %d references: the scan is broken", c.files, c.refs)
	}
	sort.Strings(c.problems)
	for _, p := range c.problems {
		t.Error(p)
	}
	t.Logf("%d files, %d references checked", c.files, c.refs)
}

type refChecker struct {
	root     string
	headings map[string]*pageHeadings // by absolute path
	files    int
	refs     int
	problems []string
}

// A segment is text to scan: a Markdown page without its code blocks, or
// one group of adjacent Go comments with the comment markers removed.
type segment struct {
	text string
	line int // line of text[0] in the file
}

var (
	// fileRef is a path to a repository file as written in prose.
	fileRef = regexp.MustCompile(`(?:\.\./|\./)*[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*\.(?:md|go|csv|svg|json|mod|sum|sh|txt)\b`)
	mdLink  = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	urlRe   = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s)>\]"'` + "`" + `]+`)
	// After a page's name: a quoted title, an anchor, or something that
	// names a section in a form this test cannot check.
	quotedTitle = regexp.MustCompile(`^` + "`?" + `,\s*"([^"]+)"`)
	anchor      = regexp.MustCompile(`^#([^\s)\]"'` + "`" + `,;]+)`)
	otherTitle  = regexp.MustCompile(`^` + "`?" + `(?:,\s*[A-Z“‘'(]|\s*\(\s*["“]|\s+["“][A-Z])`)
	fence       = regexp.MustCompile("^\\s*(```|~~~)")
)

func (c *refChecker) rel(path string) string {
	if r, err := filepath.Rel(c.root, path); err == nil {
		return filepath.ToSlash(r)
	}
	return path
}

func (c *refChecker) problem(file string, line int, format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf("%s:%d: %s", c.rel(file), line, fmt.Sprintf(format, args...)))
}

func (c *refChecker) checkMarkdown(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		c.problem(path, 0, "%v", err)
		return
	}
	c.files++
	lines := strings.Split(string(b), "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	seg := segment{text: strings.Join(lines, "\n"), line: 1}
	c.checkLinks(path, seg)
	c.checkMentions(path, seg)
}

func (c *refChecker) checkGo(path string) {
	src, err := os.ReadFile(path)
	if err != nil {
		c.problem(path, 0, "%v", err)
		return
	}
	c.files++
	fset := token.NewFileSet()
	file := fset.AddFile(path, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, func(token.Position, string) {}, scanner.ScanComments)
	var cur []string
	start, last := 0, -1
	flush := func() {
		if len(cur) > 0 {
			c.checkMentions(path, segment{text: strings.Join(cur, "\n"), line: start})
		}
		cur = nil
	}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.COMMENT {
			continue
		}
		line := fset.Position(pos).Line
		if line != last+1 {
			flush()
			start = line
		}
		var text string
		if strings.HasPrefix(lit, "//") {
			text = lit[2:]
		} else {
			text = strings.TrimSuffix(strings.TrimPrefix(lit, "/*"), "*/")
		}
		cur = append(cur, text)
		last = line + strings.Count(lit, "\n")
	}
	flush()
}

// lineOf returns the file line of offset i in seg.
func lineOf(seg segment, i int) int { return seg.line + strings.Count(seg.text[:i], "\n") }

// checkLinks checks the relative targets of a page's Markdown links.
func (c *refChecker) checkLinks(path string, seg segment) {
	for _, m := range mdLink.FindAllStringSubmatchIndex(seg.text, -1) {
		target := seg.text[m[2]:m[3]]
		if strings.Contains(target, ":") || strings.HasPrefix(target, "/") {
			continue // a URL or mailto; absolute paths are not repository files
		}
		c.refs++
		line := lineOf(seg, m[0])
		file, frag, _ := strings.Cut(target, "#")
		abs := path
		if file != "" {
			abs = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			if _, err := os.Stat(abs); err != nil {
				c.problem(path, line, "link to %s: no such file", target)
				continue
			}
		}
		if frag != "" && strings.HasSuffix(abs, ".md") && !c.page(abs).slugs[frag] {
			c.problem(path, line, "link to %s: %s has no heading with the anchor #%s", target, c.rel(abs), frag)
		}
	}
}

// checkMentions checks the paths named in prose, and the sections named
// after them.
func (c *refChecker) checkMentions(path string, seg segment) {
	text := urlRe.ReplaceAllStringFunc(seg.text, func(s string) string { return strings.Repeat(" ", len(s)) })
	for _, m := range fileRef.FindAllStringIndex(text, -1) {
		tok := text[m[0]:m[1]]
		if m[0] > 0 && strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:-#@*$%~", rune(text[m[0]-1])) {
			continue // the tail of a longer name, an absolute path or a URL
		}
		after := text[m[1]:]
		section := strings.HasSuffix(tok, ".md") &&
			(anchor.MatchString(after) || quotedTitle.MatchString(after) || otherTitle.MatchString(after))
		if !strings.Contains(tok, "/") && !section {
			continue // a bare name: perhaps a file a program writes
		}
		c.refs++
		line := lineOf(seg, m[0])
		abs := c.resolve(path, tok)
		if abs == "" {
			c.problem(path, line, "%s: no such file", tok)
			continue
		}
		if !section {
			continue
		}
		switch {
		case anchor.MatchString(after):
			slug := anchor.FindStringSubmatch(after)[1]
			if !c.page(abs).slugs[slug] {
				c.problem(path, line, "%s#%s: %s has no heading with that anchor", tok, slug, c.rel(abs))
			}
		case quotedTitle.MatchString(after):
			title := strings.Join(strings.Fields(quotedTitle.FindStringSubmatch(after)[1]), " ")
			if !c.page(abs).titles[title] {
				c.problem(path, line, "%s, %q: %s has no heading with that title", tok, title, c.rel(abs))
			}
		case otherTitle.MatchString(after):
			end := min(len(after), 40)
			c.problem(path, line, "%s%s…: name a section as %s, \"Heading\" or %s#anchor", tok, strings.ReplaceAll(after[:end], "\n", " "), tok, tok)
		}
	}
}

// resolve returns the absolute path a mention names, trying the mentioning
// file's directory, the root of its Go module (where a program of the
// module runs) and the repository root, or "" if none has it.
func (c *refChecker) resolve(from, tok string) string {
	mod := filepath.Dir(from)
	for mod != c.root && len(mod) > len(c.root) {
		if _, err := os.Stat(filepath.Join(mod, "go.mod")); err == nil {
			break
		}
		mod = filepath.Dir(mod)
	}
	for _, base := range []string{filepath.Dir(from), mod, c.root} {
		abs := filepath.Join(base, filepath.FromSlash(tok))
		if _, err := os.Stat(abs); err == nil {
			return abs
		}
	}
	return ""
}

// pageHeadings are the headings of a Markdown page: their titles (as
// rendered, without Markdown markup) and their GitHub anchors.
type pageHeadings struct {
	titles map[string]bool
	slugs  map[string]bool
}

var (
	headingLine = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkMarkup  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

func (c *refChecker) page(abs string) *pageHeadings {
	if h, ok := c.headings[abs]; ok {
		return h
	}
	h := &pageHeadings{titles: map[string]bool{}, slugs: map[string]bool{}}
	c.headings[abs] = h
	b, err := os.ReadFile(abs)
	if err != nil {
		return h
	}
	seen := map[string]int{}
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		m := headingLine.FindStringSubmatch(l)
		if in || m == nil {
			continue
		}
		title := linkMarkup.ReplaceAllString(m[1], "$1")
		title = strings.NewReplacer("`", "", "**", "", "__", "").Replace(title)
		h.titles[title] = true
		slug := githubSlug(title)
		if n := seen[slug]; n > 0 {
			h.slugs[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			h.slugs[slug] = true
		}
		seen[slug]++
	}
	return h
}

// githubSlug is the anchor GitHub gives a heading: lower case, spaces to
// hyphens, and everything but letters, digits, hyphens and underscores
// dropped.
func githubSlug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for title, want := range map[string]string{
		"Memory and the kernel's final word":                        "memory-and-the-kernels-final-word",
		"Connections: conn":                                         "connections-conn",
		"net.Conn and net.Listener on the loops":                    "netconn-and-netlistener-on-the-loops",
		"64 B, depth 1":                                             "64-b-depth-1",
		"Bulk receive: bundles, incremental buffers, a receive cap": "bulk-receive-bundles-incremental-buffers-a-receive-cap",
		"io_uring from Linux 6.1":                                   "io_uring-from-linux-61",
	} {
		if got := githubSlug(title); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", title, got, want)
		}
	}
}
