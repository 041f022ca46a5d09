package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// -where: one run per server with perf attached for the measured window,
// and a table of where each server's CPU goes: system calls, SQEs and
// context switches per request (perf stat on tracepoints), and the
// samples of its threads (perf record, software clock) grouped by what
// the code does.

// perfEvents are counted over the window. Tracing every system call costs
// a little per call, so the efficiency of a -where run is not comparable
// with a plain run's; the counts are exact.
var perfEvents = "raw_syscalls:sys_enter,io_uring:io_uring_submit_req,context-switches"

// startPerf attaches perf stat and perf record to pid. Both stop on
// SIGINT (stopPerf), writing their files.
func startPerf(ctx context.Context, dir, name string, pid int) ([]*exec.Cmd, error) {
	p := strconv.Itoa(pid)
	cmds := []*exec.Cmd{
		exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", perfEvents, "-p", p, "-o", filepath.Join(dir, name+".stat")),
		exec.CommandContext(ctx, "perf", "record", "-q", "-e", "cpu-clock", "-F", "1999", "-g", "-p", p, "-o", filepath.Join(dir, name+".data")),
	}
	var started []*exec.Cmd
	for _, c := range cmds {
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stopPerf(started)
			return nil, err
		}
		started = append(started, c)
	}
	time.Sleep(100 * time.Millisecond) // attached before the window's first samples count
	return started, nil
}

func stopPerf(cmds []*exec.Cmd) {
	for _, c := range cmds {
		_ = c.Process.Signal(syscall.SIGINT)
	}
	for _, c := range cmds {
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

// perfName names a run's perf files.
func perfName(r row) string {
	return fmt.Sprintf("%s-c%d-s%d-d%d", r.Server, r.Conns, r.Size, r.Depth)
}

// perfCounts reads perf stat's CSV output: event name → count.
func perfCounts(path string) map[string]float64 {
	out := map[string]float64{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Split(sc.Text(), ",")
		if len(fl) < 3 {
			continue
		}
		if v, err := strconv.ParseFloat(fl[0], 64); err == nil {
			out[fl[2]] = v
		}
	}
	return out
}

// categories group kernel symbols by what the code does; the first match
// wins, anything else is "other kernel". Go and C code outside the kernel
// is "user".
var categories = []struct {
	name string
	re   *regexp.Regexp
}{
	{"io_uring", regexp.MustCompile(`^_*io_`)},
	{"epoll", regexp.MustCompile(`^_*(ep_|do_epoll|x64_sys_epoll|eventpoll)`)},
	{"scheduler, wakeups", regexp.MustCompile(`^_*(schedule|finish_task_switch|try_to_wake_up|ttwu|enqueue_|dequeue_|pick_next|update_curr|update_load|psi_|wake_up|select_task_rq|set_next_entity|put_prev|prepare_task_switch|switch_to|switch_mm|sched_|raw_spin|futex|hrtimer|do_nanosleep|native_sched|avg_vruntime|place_entity|default_wake|autoremove_wake|update_rq|reweight)`)},
	{"syscall entry, files", regexp.MustCompile(`^_*(entry_SYSCALL|do_syscall|syscall_|x64_sys_call|exit_to_user|fdget|fget|fput|ksys_|vfs_|rw_verify|fsnotify|security_file|x64_sys_(read|write|io_uring)|sock_(read|write)_iter|clear_bhb|srso|x86_return)`)},
	{"TCP/IP, sockets, copies", regexp.MustCompile(`^_*(tcp|ip_|ipv4|inet|skb|kfree_skb|consume_skb|alloc_skb|build_skb|sk_|sock|net|dev_|loopback|process_backlog|bbr|napi|release_sock|lock_sock|validate_xmit|eth_|kmalloc_reserve|security_sock|ktime|read_tsc|raw_local_deliver|nf_|sys_(send|recv)|csum|check_object_size|check_heap_object|_?copy_|virt_addr_valid|simple_copy|rep_mov|mem(cpy|set|move)|local_bh|do_softirq|handle_softirqs|rcu_|kmem_cache|kfree|slab|page_frag|mod_timer|sk_reset_timer|__mod_timer)`)},
}

// perfShares groups the samples of a perf.data file by category, in
// percent of all samples.
func perfShares(path string) (map[string]float64, error) {
	out, err := exec.Command("perf", "report", "-i", path, "--no-children", "--sort", "dso,symbol", "-g", "none", "--stdio").Output()
	if err != nil {
		return nil, fmt.Errorf("perf report %s: %v", path, err)
	}
	shares := map[string]float64{}
	total := 0.0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[0], "%") {
			continue
		}
		pc, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		total += pc
		dso, sym := f[1], f[3]
		cat := "user"
		if dso == "[kernel.kallsyms]" {
			cat = "other kernel"
			for _, c := range categories {
				if c.re.MatchString(sym) {
					cat = c.name
					break
				}
			}
		}
		shares[cat] += pc
	}
	if total == 0 {
		return nil, fmt.Errorf("perf report %s: no samples", path)
	}
	for k := range shares {
		shares[k] *= 100 / total
	}
	return shares, nil
}

// whereReport renders every cell of a -where sweep as a markdown table.
func whereReport(dir string, rows []row, m meta) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Where the servers' CPU goes\n\n> Generated by `%s` (commit %s%s), %s. perf attached to each server for its measured window; tracing every system call costs a little per call, so use the plain runs of docs/benchmarks.md for efficiency and this for the breakdown.\n\n", m.Command, orDefault(m.Commit, "?"), dirtyNote(m.Dirty), m.Started)
	type cell struct{ c, s, d int }
	var cells []cell
	seen := map[cell]bool{}
	for _, r := range rows {
		k := cell{r.Conns, r.Size, r.Depth}
		if !seen[k] {
			seen[k] = true
			cells = append(cells, k)
		}
	}
	for _, k := range cells {
		var sub []row
		for _, r := range rows {
			if r.Conns == k.c && r.Size == k.s && r.Depth == k.d {
				sub = append(sub, r)
			}
		}
		fmt.Fprintf(&b, "## %d connections × %d B, depth %d\n\nSamples of the server's threads in percent (software clock, 1999 Hz), grouped by the kernel function or user code they fell in.\n\n", k.c, k.s, k.d)
		b.WriteString(whereTable(dir, sub))
		b.WriteString("\n")
	}
	return b.String()
}

// whereTable renders the -where runs of one cell as markdown.
func whereTable(dir string, rows []row) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cats := []string{"TCP/IP, sockets, copies", "io_uring", "epoll", "syscall entry, files", "scheduler, wakeups", "other kernel", "user"}
	w("| server | req/s | server CPU | µs CPU per request | kernel share | syscalls per request | SQEs per request | context switches per 1k requests |")
	for _, c := range cats {
		w(" %s |", c)
	}
	w("\n|---|%s\n", strings.Repeat("---:|", 7+len(cats)))
	sort.SliceStable(rows, func(i, j int) bool {
		return indexOf(serverOrder, rows[i].Server) < indexOf(serverOrder, rows[j].Server)
	})
	for _, r := range rows {
		if r.Errors > 0 || r.Requests == 0 {
			w("| %s | failed: %s |\n", r.Server, r.Note)
			continue
		}
		n := perfCounts(filepath.Join(dir, perfName(r)+".stat"))
		req := float64(r.Requests)
		w("| %s | %s | %.0f%% | %.2f | %.0f%% | %.2f | %.2f | %.1f |", r.Server, kfmt(r.RPS), r.ServerUtil*100,
			r.CPUPerMReq, metrics["sysfrac"](&r)*100, n["raw_syscalls:sys_enter"]/req, n["io_uring:io_uring_submit_req"]/req,
			n["context-switches"]/req*1000)
		shares, err := perfShares(filepath.Join(dir, perfName(r)+".data"))
		for _, c := range cats {
			if err != nil {
				w(" – |")
			} else {
				w(" %.0f%% |", shares[c])
			}
		}
		w("\n")
	}
	return b.String()
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return len(list)
}
