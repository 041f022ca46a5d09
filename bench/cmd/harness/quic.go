package main

import (
	"fmt"
	"strings"
)

// isQUIC reports whether a server of the report is one of the QUIC
// workload's (or a variant named after one).
func isQUIC(name string) bool {
	_, ok := quicServers[name]
	return ok || strings.HasPrefix(name, "quic-")
}

// quicOnly reports whether every server of the run is a QUIC server.
func quicOnly(s *summary) bool {
	for _, n := range s.servers {
		if !isQUIC(n) {
			return false
		}
	}
	return len(s.servers) > 0
}

// quicWorkloadText says how to run the QUIC workload and what it measures;
// it opens the report's QUIC section whether or not the run had QUIC
// servers.
const quicWorkloadText = `The ` + "`quic-*`" + ` servers (` + "`bench/cmd/quicserve`" + `) serve quic-go on one UDP socket: ` + "`quic-ringloop-uring`" + ` and ` + "`quic-ringloop-epoll`" + ` on ringloop's net.PacketConn adapter (` + "`conn.ListenPacketNet`" + `, one loop), ` + "`quic-net`" + ` on ` + "`net.ListenUDP`" + `. Each handles a stream on a goroutine of its own. The load generator, ` + "`bench/cmd/quicload`" + `, is quic-go on package net's UDP sockets (one per connection, GSO allowed), pinned to the other CPU. TLS 1.3 with a certificate the server makes up at start; the connections are set up before the warm-up. ` + "`-quic`" + ` picks the workload; with only ` + "`quic-*`" + ` servers named, ` + "`-conns`" + `, ` + "`-sizes`" + ` and ` + "`-depths`" + ` default to its cell:

- **Request/response** (` + "`-quic rr`" + `, the default): 64 streams in flight over 4 connections (16 each; ` + "`-conns`" + ` × ` + "`-depths`" + `). Every request is a new stream carrying 64 bytes (` + "`-sizes`" + `) and the end of the client's side; the server reads it to the end and writes it back as the response. Each response is checked; its latency runs from opening the stream to reading the end of the response. The headline is requests per server CPU-second; p50 and p99 as for the other workloads.
- **Bulk** (` + "`-quic bulk`" + `): 16 connections, each downloading on one stream (` + "`-depths`" + ` streams per connection) a pattern the server writes without end; every byte is checked. The headline is MB received per server CPU-second (column ` + "`mb_per_server_cpu_s`" + `), with MB/s beside it; a "request" is 64 KiB received (` + "`-sizes`" + `), and there is no latency.

From ` + "`bench/`" + ` (` + "`-publish -publish-to quic`" + ` puts a run's report and data in ` + "`docs/bench/quic/`" + `):

` + "```sh" + `
go run ./cmd/harness -servers quic-ringloop-uring,quic-ringloop-epoll,quic-net -quic rr -reps 3
go run ./cmd/harness -servers quic-ringloop-uring,quic-ringloop-epoll,quic-net -quic bulk -reps 3
` + "```" + `

After the window the load generator asks the server, on a stream of each connection, whether quic-go sends that connection's packets with GSO (generic segmentation offload: one system call for a train of packets), and reads the same of its own side; both go into ` + "`results.csv`" + ` (` + "`server_gso`" + `, ` + "`client_gso`" + `) and into this section's table of a run with QUIC servers. quic-go uses GSO only on a socket with ` + "`ReadMsgUDP`" + ` and ` + "`WriteMsgUDP`" + ` (as ` + "`*net.UDPConn`" + ` has) on a kernel with ` + "`UDP_SEGMENT`" + `; on any other net.PacketConn it sends one datagram per call. Servers compare like for like only where their GSO columns agree.

`

// quicSection is the report's section on the QUIC workload: how to run it,
// and the results of the run's QUIC servers, if any.
func quicSection(s *summary, m meta) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## The QUIC workload\n\n%s", quicWorkloadText)
	var servers []string
	for _, n := range s.servers {
		if isQUIC(n) {
			servers = append(servers, n)
		}
	}
	if len(servers) == 0 {
		return b.String()
	}
	bulk := m.QUIC == "bulk"
	headline, headName := "reqpercpu", "req per server CPU-s"
	if bulk {
		headline, headName = "mbpercpu", "MB per server CPU-s"
	}
	peer := ""
	if contains(servers, "quic-net") {
		peer = "quic-net"
	}
	kind := "request/response"
	if bulk {
		kind = "bulk"
	}
	w("### This run: %s\n\nMedians of the repetitions (± half their range). GSO as each run's load generator reported it (\"on k/n\": on k of n connections).\n\n", kind)
	for _, size := range s.sizes {
		for _, depth := range s.depths {
			for _, c := range s.conns {
				measured := false
				for _, srv := range servers {
					k := cellKey{srv, c, size, depth}
					measured = measured || s.get(srv, c, size, depth, "rps").ok() || s.errs[k] > 0
				}
				if !measured {
					continue
				}
				if bulk {
					w("**%d connections × %s each, counted in %d B**\n\n", c, plural(depth, "download stream"), size)
				} else {
					w("**%d connections × %s in flight each, %d B requests and responses**\n\n", c, plural(depth, "stream"), size)
				}
				cols := []string{"server", headName}
				if peer != "" {
					cols = append(cols, "÷ "+peer)
				}
				if bulk {
					cols = append(cols, "MB/s", "req per server CPU-s")
				} else {
					cols = append(cols, "req/s", "MB per server CPU-s", "p50 µs", "p99 µs")
				}
				cols = append(cols, "server CPU", "GSO server side", "GSO client side")
				w("| %s |\n|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)-1))
				for _, srv := range servers {
					k := cellKey{srv, c, size, depth}
					get := func(metric string) stat { return s.get(srv, c, size, depth, metric) }
					line := []string{srv, cellText(get(headline), s.errs[k], mbfmt)}
					if peer != "" {
						line = append(line, ratio(get(headline), s.get(peer, c, size, depth, headline)))
					}
					if bulk {
						line = append(line, cellText(get("mbps"), 0, kfmt), cellText(get("reqpercpu"), 0, kfmt))
					} else {
						line = append(line, cellText(get("rps"), 0, kfmt), cellText(get("mbpercpu"), 0, mbfmt),
							cellText(get("p50"), 0, us1), cellText(get("p99"), 0, us1))
					}
					g := s.gso[k]
					line = append(line, cellText(get("util"), 0, pct), gsoCell(g.server), gsoCell(g.client))
					w("| %s |\n", strings.Join(line, " | "))
				}
				w("\n")
			}
		}
	}
	return b.String()
}

func gsoCell(seen []string) string {
	if len(seen) == 0 {
		return "–"
	}
	return strings.Join(seen, " / ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// mbfmt is kfmt with a decimal for small values (MB per CPU-second of
// small requests).
func mbfmt(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return kfmt(v)
}
