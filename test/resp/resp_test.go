package resp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// backends runs f once per backend, io_uring skipped where refused.
func backends(t *testing.T, f func(t *testing.T, b loop.Backend)) {
	t.Helper()
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		t.Run("backend="+b.String(), func(t *testing.T) {
			if b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			testutil.Watchdog(t, 300*time.Second)
			f(t, b)
		})
	}
}

// serve starts a server with default options on a group of two loops on
// backend b; both end with the test.
func serve(t *testing.T, b loop.Backend) (addr string) {
	t.Helper()
	g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(logger))
	if err != nil {
		if b == loop.BackendUring && errors.Is(err, ring.ErrNotSupported) {
			t.Skipf("io_uring unavailable: %v", err)
		}
		t.Fatalf("NewGroup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("group Shutdown: %v", err)
		}
	})
	srv, err := Listen(context.Background(), g, "127.0.0.1:0", NewStore())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv.Addr().String()
}

func scale(full, short int) int {
	if testing.Short() {
		return short
	}
	return full
}

// A client speaks RESP over one connection.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(addr string) (*client, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	return &client{c, bufio.NewReaderSize(c, 64<<10)}, nil
}

// appendCommand appends args as a multibulk command to b.
func appendCommand(b []byte, args ...[]byte) []byte {
	b = strconv.AppendInt(append(b, '*'), int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = strconv.AppendInt(append(b, '$'), int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// reply reads one reply: its type byte ('+', '-', ':', '$', '*') and its
// line or bulk string (nil for a nil bulk string).
func (cl *client) reply() (byte, []byte, error) {
	line, err := cl.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], string(line[1:len(line)-2])
	if kind != '$' {
		return kind, []byte(body), nil
	}
	n, err := strconv.Atoi(body)
	if err != nil {
		return 0, nil, fmt.Errorf("malformed bulk length %q", body)
	}
	if n < 0 {
		return kind, nil, nil
	}
	v := make([]byte, n+2)
	if _, err := io.ReadFull(cl.r, v); err != nil {
		return 0, nil, err
	}
	if string(v[n:]) != "\r\n" {
		return 0, nil, errors.New("bulk string without its CRLF")
	}
	return kind, v[:n], nil
}

// expect reads a reply and checks its type and content.
func (cl *client) expect(kind byte, want []byte) error {
	k, got, err := cl.reply()
	if err != nil {
		return err
	}
	if k != kind || !bytes.Equal(got, want) {
		return fmt.Errorf("reply %q %s, want %q %s", k, abbrev(got), kind, abbrev(want))
	}
	return nil
}

func abbrev(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", b[:40], len(b))
	}
	return strconv.Quote(string(b))
}

// value returns the value of key in round r: size bytes that differ from
// one key and round to the next.
func value(key string, r, size int) []byte {
	v := make([]byte, size)
	seed := uint32(len(key)*131 + r*7919)
	for _, ch := range key {
		seed = seed*31 + uint32(ch)
	}
	for i := range v {
		seed = seed*1664525 + 1013904223
		v[i] = 'a' + byte(seed>>24)%26
	}
	return v
}

// runSession runs rounds of pipelined SETs and GETs of size-byte values,
// depth at a time, over one connection, and checks every reply.
func runSession(addr string, id, rounds, depth, size int) error {
	cl, err := dial(addr)
	if err != nil {
		return err
	}
	defer cl.c.Close()
	// A generous bound on each exchange: a stall fails it.
	cl.c.SetDeadline(time.Now().Add(30 * time.Second))
	// The inline form, then the multibulk form.
	if _, err := cl.c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	if err := cl.expect('+', []byte("PONG")); err != nil {
		return fmt.Errorf("inline PING: %w", err)
	}
	var buf []byte
	for r := range rounds {
		keys := make([][]byte, depth)
		vals := make([][]byte, depth)
		cl.c.SetDeadline(time.Now().Add(30 * time.Second))
		buf = buf[:0]
		for i := range depth {
			keys[i] = fmt.Appendf(nil, "key:%d:%d", id, i)
			vals[i] = value(string(keys[i]), r, size)
			buf = appendCommand(buf, []byte("SET"), keys[i], vals[i])
		}
		if _, err := cl.c.Write(buf); err != nil {
			return fmt.Errorf("round %d: write %d SETs: %w", r, depth, err)
		}
		for i := range depth {
			if err := cl.expect('+', []byte("OK")); err != nil {
				return fmt.Errorf("round %d: SET %d of %d: %w", r, i+1, depth, err)
			}
		}
		cl.c.SetDeadline(time.Now().Add(30 * time.Second))
		buf = buf[:0]
		for i := range depth {
			buf = appendCommand(buf, []byte("GET"), keys[i])
		}
		if _, err := cl.c.Write(buf); err != nil {
			return fmt.Errorf("round %d: write %d GETs: %w", r, depth, err)
		}
		for i := range depth {
			if err := cl.expect('$', vals[i]); err != nil {
				return fmt.Errorf("round %d: GET %d of %d: %w", r, i+1, depth, err)
			}
		}
	}
	cl.c.SetDeadline(time.Now().Add(30 * time.Second))
	buf = buf[:0]
	del := [][]byte{[]byte("DEL")}
	for i := range depth {
		del = append(del, fmt.Appendf(nil, "key:%d:%d", id, i))
	}
	buf = appendCommand(buf, del...)
	buf = appendCommand(buf, []byte("GET"), del[1])
	if _, err := cl.c.Write(buf); err != nil {
		return err
	}
	if err := cl.expect(':', []byte(strconv.Itoa(depth))); err != nil {
		return fmt.Errorf("DEL: %w", err)
	}
	if err := cl.expect('$', nil); err != nil {
		return fmt.Errorf("GET after DEL: %w", err)
	}
	return nil
}

// TestRESPPipelinedLargeValues: 50 clients pipeline SETs and then GETs of
// 100,000-byte values 16 at a time, and of 512,000-byte values 4 at a
// time, against the RESP server with default options; every reply is
// checked. The server stops consuming while unwritable and resumes when
// writable again, so every pipelined request is answered, whatever its
// answers' size against the connection's water marks and inbound limit.
func TestRESPPipelinedLargeValues(t *testing.T) {
	conns, rounds := scale(50, 8), scale(3, 2)
	backends(t, func(t *testing.T, b loop.Backend) {
		addr := serve(t, b)
		for _, tc := range []struct{ size, depth int }{{100_000, 16}, {512_000, 4}} {
			t.Run(fmt.Sprintf("size=%d/depth=%d", tc.size, tc.depth), func(t *testing.T) {
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, conns)
				for id := range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := runSession(addr, id, rounds, tc.depth, tc.size); err != nil {
							errs <- fmt.Errorf("client %d: %w", id, err)
						}
					}()
				}
				wg.Wait()
				close(errs)
				n := 0
				for err := range errs {
					if n++; n <= 5 {
						t.Error(err)
					}
				}
				if n > 5 {
					t.Errorf("and %d more clients failed", n-5)
				}
				t.Logf("%d clients × %d rounds of %d SETs and %d GETs of %d bytes in %v, %d failed",
					conns, rounds, tc.depth, tc.depth, tc.size, time.Since(start).Round(time.Millisecond), n)
			})
		}
	})
}

// TestRedisBenchmark runs redis-benchmark against the RESP server with
// default options: SET and GET of 100,000-byte values 16 pipelined, and of
// 512,000-byte values 4 pipelined, 50 clients; it must complete without
// an error.
func TestRedisBenchmark(t *testing.T) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skip("redis-benchmark is not installed (Debian and Ubuntu: apt-get install redis-tools)")
	}
	clients, requests := scale(50, 10), scale(2000, 200)
	backends(t, func(t *testing.T, b loop.Backend) {
		addr := serve(t, b)
		_, port, _ := net.SplitHostPort(addr)
		for _, tc := range []struct{ size, depth int }{{100_000, 16}, {512_000, 4}} {
			t.Run(fmt.Sprintf("size=%d/depth=%d", tc.size, tc.depth), func(t *testing.T) {
				// A generous bound: a stall fails the run.
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				args := []string{"-h", "127.0.0.1", "-p", port, "-t", "set,get", "-d", strconv.Itoa(tc.size),
					"-P", strconv.Itoa(tc.depth), "-c", strconv.Itoa(clients), "-n", strconv.Itoa(requests), "-q"}
				start := time.Now()
				out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
				// -q rewrites its progress line with carriage returns;
				// keep the final lines.
				var lines []string
				for _, l := range strings.Split(string(out), "\n") {
					if i := strings.LastIndexByte(l, '\r'); i >= 0 {
						l = l[i+1:]
					}
					if l = strings.TrimSpace(l); l != "" {
						lines = append(lines, l)
					}
				}
				t.Logf("redis-benchmark %s (%v): %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), strings.Join(lines, " | "))
				if ctx.Err() != nil {
					t.Fatalf("redis-benchmark did not complete in 60 s")
				}
				if err != nil {
					t.Fatalf("redis-benchmark: %v", err)
				}
				for _, want := range []string{"SET: ", "GET: "} {
					found := false
					for _, l := range lines {
						found = found || strings.HasPrefix(l, want) && strings.Contains(l, "requests per second")
					}
					if !found {
						t.Errorf("no %q result line", want)
					}
				}
				for _, l := range lines {
					if strings.Contains(strings.ToLower(l), "error") {
						t.Errorf("redis-benchmark reported: %s", l)
					}
				}
			})
		}
	})
}

// TestRESPCommands checks the server's commands in both forms, with a
// multibulk command written a byte at a time.
func TestRESPCommands(t *testing.T) {
	backends(t, func(t *testing.T, b loop.Backend) {
		cl, err := dial(serve(t, b))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.c.Close()
		cl.c.SetDeadline(time.Now().Add(30 * time.Second))
		set := appendCommand(nil, []byte("SET"), []byte("k2"), bytes.Repeat([]byte("v"), 100))
		for i := range set {
			if _, err := cl.c.Write(set[i : i+1]); err != nil {
				t.Fatal(err)
			}
		}
		steps := []struct {
			send string
			kind byte
			want string
		}{
			{"", '+', "OK"}, // the SET written a byte at a time
			{"PING\r\n", '+', "PONG"},
			{"ping hello\n", '$', "hello"},
			{"SET k1 v1\r\n", '+', "OK"},
			{"GET k1\r\n", '$', "v1"},
			{string(appendCommand(nil, []byte("GET"), []byte("k2"))), '$', strings.Repeat("v", 100)},
			{string(appendCommand(nil, []byte("SET"), []byte("empty"), nil)), '+', "OK"},
			{"GET empty\r\n", '$', ""},
			{"DEL k1 k2 nothing\r\n", ':', "2"},
			{"CONFIG GET maxmemory\r\n", '*', "0"},
			{"NOSUCH\r\n", '-', "ERR unknown command 'nosuch'"},
			{"\r\n*0\r\nPING\r\n", '+', "PONG"}, // empty commands are skipped
		}
		for _, s := range steps {
			if s.send != "" {
				if _, err := cl.c.Write([]byte(s.send)); err != nil {
					t.Fatal(err)
				}
			}
			if err := cl.expect(s.kind, []byte(s.want)); err != nil {
				t.Errorf("%q: %v", s.send, err)
			}
		}
		// CONFIG GET save answers a pair, as redis-benchmark expects.
		cl.c.Write([]byte("CONFIG GET save\r\n"))
		for _, want := range []struct {
			kind byte
			v    string
		}{{'*', "2"}, {'$', "save"}, {'$', ""}} {
			if err := cl.expect(want.kind, []byte(want.v)); err != nil {
				t.Errorf("CONFIG GET save: %v", err)
			}
		}
		// GET of a missing key is a nil bulk string.
		cl.c.Write([]byte("GET k1\r\n"))
		if k, v, err := cl.reply(); err != nil || k != '$' || v != nil {
			t.Errorf("GET of a deleted key: %q %q %v, want a nil bulk string", k, v, err)
		}
	})
}
