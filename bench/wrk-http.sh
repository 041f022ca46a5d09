#!/usr/bin/env bash
# wrk-http.sh: net/http served through package net and through ringloop's
# net.Listener adapter on each backend, loaded by wrk from another process.
# Like the harness, the server is pinned to one CPU with GOMAXPROCS=1 and
# the client to the other; the servers take turns within each repetition,
# so that the ratios compare runs made side by side.
#
#   bash wrk-http.sh [-c "1 64 1024"] [-r 3] [-d 5] [-o results.csv] [-s "servers"]
#
# The ringloop servers run the adapters' recommended configuration (loops
# on a shared thread); the -locked ones run loops on locked threads.
#
# Prints one line per run and, at the end, each ringloop server's medians
# divided by package net's: requests per server CPU-second, p50 and p99.
# wrk comes from Debian's package when it is missing (as root).
set -euo pipefail
cd "$(dirname "$0")"

conns="1 64 1024"
reps=3
dur=5
out=wrk-http.csv
servers="http-net http-ringloop-uring http-ringloop-epoll"
while getopts "c:r:d:o:s:" opt; do
	case $opt in
	c) conns=$OPTARG ;;
	r) reps=$OPTARG ;;
	d) dur=$OPTARG ;;
	o) out=$OPTARG ;;
	s) servers=$OPTARG ;;
	*) exit 2 ;;
	esac
done

if ! command -v wrk >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get install -y wrk >/dev/null || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
	else
		echo "wrk-http.sh: wrk is not installed (Debian: apt-get install wrk)" >&2
		exit 1
	fi
fi
mkdir -p bin
go build -o bin/httpserve ./cmd/httpserve

declare -A args=(
	[http-net]="-impl net"
	[http-ringloop-uring]="-impl ringloop -backend uring"
	[http-ringloop-epoll]="-impl ringloop -backend epoll"
	[http-ringloop-uring-locked]="-impl ringloop -backend uring -thread locked"
	[http-ringloop-epoll-locked]="-impl ringloop -backend epoll -thread locked"
)
for s in $servers; do
	[ -n "${args[$s]:-}" ] || { echo "wrk-http.sh: unknown server $s (${!args[*]})" >&2; exit 2; }
done
tick=$(getconf CLK_TCK)

# cpu_ticks PID: the process's user and system time, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# micros VALUE: wrk's latency ("812.00us", "1.21ms", "2.00s") in µs.
micros() {
	awk -v v="$1" 'BEGIN {
		n = v + 0
		if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /s$/) print n * 1e6; else print n
	}'
}

echo "server,conns,rep,rps,req_per_server_cpu_s,p50_us,p99_us" >"$out"
for rep in $(seq 1 "$reps"); do
	for c in $conns; do
		for s in $servers; do
			log=$(mktemp)
			GOMAXPROCS=1 taskset -c 0 bin/httpserve ${args[$s]} -addr 127.0.0.1:0 -max-runtime 10m >"$log" 2>&1 &
			pid=$!
			addr=""
			for _ in $(seq 100); do
				addr=$(awk '/^LISTEN/ {print $2}' "$log")
				[ -n "$addr" ] && break
				sleep 0.1
			done
			[ -n "$addr" ] || { echo "$s did not start:"; cat "$log"; kill $pid; exit 1; }
			# Warm up, then measure (one wrk thread on the client's CPU).
			taskset -c 1 wrk -t1 -c"$c" -d1s "http://$addr/" >/dev/null
			t0=$(cpu_ticks $pid)
			res=$(taskset -c 1 wrk -t1 -c"$c" -d"${dur}s" --latency "http://$addr/")
			t1=$(cpu_ticks $pid)
			kill $pid
			wait $pid 2>/dev/null || true
			rm -f "$log"
			reqs=$(awk '/requests in/ {print $1}' <<<"$res")
			rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$res")
			p50=$(micros "$(awk '$1 == "50%" {print $2}' <<<"$res")")
			p99=$(micros "$(awk '$1 == "99%" {print $2}' <<<"$res")")
			eff=$(awk -v r="$reqs" -v t=$((t1 - t0)) -v k="$tick" 'BEGIN { if (t > 0) printf "%.0f", r / (t / k); else print 0 }')
			echo "$s,$c,$rep,$rps,$eff,$p50,$p99" >>"$out"
			printf "%-22s c=%-5s rep %s  %10s req/s  %8s req/CPU-s  p50 %7sµs  p99 %7sµs\n" "$s" "$c" "$rep" "$rps" "$eff" "$p50" "$p99"
		done
	done
done

echo
echo "ratios to http-net (medians over $reps repetitions): requests per server CPU-second, p50, p99"
awk -F, 'NR > 1 {
	k = $1 SUBSEP $2
	n[k]++; e[k, n[k]] = $5; a[k, n[k]] = $6; b[k, n[k]] = $7
	cs[$2] = 1; ss[$1] = 1
}
function med(arr, k, m,    i, j, t, v) {
	for (i = 1; i <= m; i++) v[i] = arr[k, i]
	for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
	return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
}
END {
	for (c in cs) for (s in ss) {
		if (s == "http-net") continue
		k = s SUBSEP c; base = "http-net" SUBSEP c
		if (!n[k] || !n[base]) continue
		printf "%-22s c=%-5s %.2f  %.2f  %.2f\n", s, c, med(e, k, n[k]) / med(e, base, n[base]), med(a, k, n[k]) / med(a, base, n[base]), med(b, k, n[k]) / med(b, base, n[base])
	}
}' "$out" | sort -t= -k2 -n
