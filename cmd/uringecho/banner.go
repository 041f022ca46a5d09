package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
)

// printBanner writes what the server runs on. Its first line,
// "uringecho: listening on <addr>", names the bound address (the real port
// when -addr asked for port 0); tests read it.
func printBanner(w io.Writer, cfg config, addr net.Addr, g *loop.Group) {
	f := g.Features()
	backend := f.Backend.String()
	if cfg.backend == loop.BackendAuto {
		backend += " (auto)"
	}
	if f.FallbackReason != "" {
		backend += ", not io_uring: " + f.FallbackReason
	}
	fmt.Fprintf(w, "uringecho: listening on %s\n", addr)
	if cfg.network == "udp" {
		fmt.Fprintf(w, "  network:  udp (each datagram echoed to its sender; datagrams up to %d bytes)\n", f.DgramBufSize-128)
	}
	fmt.Fprintf(w, "  backend:  %s\n", backend)
	thread := "locked"
	if f.SharedThread {
		thread = "shared"
	}
	fmt.Fprintf(w, "  loops:    %d (ioratio %d, reuseport %v, %s thread)\n", g.Len(), cfg.ioRatio, cfg.reusePort, thread)
	kernel := featureList(f)
	if f.Kernel != "" {
		kernel = "profile " + f.Kernel + " (RINGLOOP=kernel=): " + kernel
	}
	fmt.Fprintf(w, "  kernel:   %s\n", kernel)
	if cfg.debugURL != "" {
		fmt.Fprintf(w, "  debug:    %s/debug/pprof/ %s/debug/vars %s/metrics\n", cfg.debugURL, cfg.debugURL, cfg.debugURL)
	}
	fmt.Fprintf(w, "  stop with Ctrl-C (SIGINT) or SIGTERM\n")
}

// featureList names the io_uring setup flags in use and the features newer
// than the 6.1 floor that the backend found (docs/kernel-support.md).
func featureList(f loop.Features) string {
	var out []string
	if f.Backend == loop.BackendUring {
		var setup []string
		for _, s := range []struct {
			bit  uint32
			name string
		}{
			{ring.SetupSingleIssuer, "SINGLE_ISSUER"},
			{ring.SetupDeferTaskrun, "DEFER_TASKRUN"},
			{ring.SetupTaskrunFlag, "TASKRUN_FLAG"},
			{ring.SetupSubmitAll, "SUBMIT_ALL"},
			{ring.SetupNoSQArray, "NO_SQARRAY"},
		} {
			if f.SetupFlags&s.bit != 0 {
				setup = append(setup, s.name)
			}
		}
		if len(setup) == 0 {
			setup = append(setup, "none")
		}
		out = append(out, "setup="+strings.Join(setup, "|"))
	}
	if f.RecvBundle {
		out = append(out, "recv-bundle")
	} else {
		out = append(out, "no-recv-bundle")
	}
	return strings.Join(out, " ")
}

// reportStats prints one line of counters every interval until ctx ends:
// live connections, bytes echoed (and the rate since the last line), and the
// group's loop counters summed over its loops.
func reportStats(ctx context.Context, w io.Writer, every time.Duration, srv *conn.Server, g *loop.Group, h *echo) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := h.total(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n, s := h.total(), g.Stats().Total
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			fmt.Fprintf(w, "stats: conns=%d bytes=%d (%s/s) turns=%d completions=%d inflight=%d tasks=%d sleeps=%d wakeups=%d stale=%d rebuilds=%d panics=%d cq-overflows=%d cq-lost=%d\n",
				srv.Conns(), n, humanBytes(rate), s.Turns, s.Completions, s.OpsInFlight, s.Tasks, s.Sleeps, s.Wakeups, s.StaleCompletions, s.Rebuilds, s.Panics, s.CQOverflows, s.LostCompletions)
		}
	}
}

// humanBytes renders a byte count with a binary unit.
func humanBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// orOK renders a shutdown error, "ok" for nil.
func orOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}
