#!/usr/bin/env bash
# quic-floor.sh: how much of a quic-go server's CPU on package net's UDP
# socket goes to moving datagrams through system calls, and so the most any
# net.PacketConn could gain over it. The server (quicserve -impl net) is
# pinned to one CPU with GOMAXPROCS=1 and the load (quicload) to the
# other, as in the harness; perf samples the server for a few seconds of
# each workload, and the samples whose own function is system-call
# plumbing are added up: entry and exit, the message header and iovec
# copies, the file lookup, epoll, the netpoller and Go's syscall wrappers.
# The UDP stack itself (routing, segmentation, the copy of the payload,
# the delivery) and quic-go's own work are not plumbing: any transport
# pays them.
#
#   bash quic-floor.sh [-s 3] [-o DIR]
#
# Prints, per workload, the plumbing's share and 1 / (1 - share): the
# requests per CPU-second of a server whose datagrams cost no plumbing at
# all, relative to package net's. perf comes from Debian's package when it
# is missing (as root).
set -euo pipefail
cd "$(dirname "$0")"

secs=3
out=$(mktemp -d)
while getopts "s:o:" opt; do
	case $opt in
	s) secs=$OPTARG ;;
	o) out=$OPTARG ;;
	*) exit 2 ;;
	esac
done
mkdir -p "$out"

if ! command -v perf >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get install -y linux-perf >/dev/null || { apt-get update >/dev/null && apt-get install -y linux-perf >/dev/null; }
	else
		echo "quic-floor.sh: perf is not installed (Debian: apt-get install linux-perf)" >&2
		exit 1
	fi
fi
mkdir -p bin
go build -o bin/quicserve ./cmd/quicserve
go build -o bin/quicload ./cmd/quicload

# plumbing PERFDATA: the share of the samples (percent) whose own
# function is system-call plumbing, and the total sampled.
plumbing() {
	perf report -i "$1" --no-children --sort sym --stdio -g none 2>/dev/null | awk '
	/^#/ || NF < 3 { next }
	{
		pct = $1; sub("%", "", pct); sym = $3
		tot += pct
		if (sym ~ /^(entry_SYSCALL|do_syscall_64|syscall_exit|syscall_return|__x64_sys_|__do_sys_|____sys_sendmsg|___sys_sendmsg|__sys_sendmsg|____sys_recvmsg|___sys_recvmsg|__sys_recvmsg|__sys_recvmmsg|do_recvmmsg|__sys_sendmmsg|copy_msghdr_from_user|__copy_msghdr|recvmsg_copy_msghdr|sendmsg_copy_msghdr|__import_iovec|import_iovec|fdget|fput|__fget|sockfd_lookup|security_socket_|sock_sendmsg|sock_recvmsg|__sock_sendmsg|move_addr_to_user|put_cmsg|ep_|do_epoll|internal\/runtime\/syscall|syscall\.|runtime\.entersyscall|runtime\.exitsyscall|runtime\.reentersyscall|runtime\.netpoll|internal\/poll\.|golang\.org\/x\/net\/internal\/socket)/) pl += pct
	}
	END { printf "%.1f %.1f\n", pl, tot }'
}

port=24433
for w in "rr 4 16" "bulk 16 1"; do
	set -- $w
	mode=$1 conns=$2 depth=$3
	GOMAXPROCS=1 taskset -c 0 bin/quicserve -impl net -addr 127.0.0.1:$port -max-runtime $((secs + 10))s >"$out/server-$mode.log" 2>&1 &
	srv=$!
	sleep 0.5
	GOMAXPROCS=1 taskset -c 1 bin/quicload -addr 127.0.0.1:$port -mode "$mode" -conns "$conns" -depth "$depth" \
		-warmup 1s -duration $((secs + 2))s >"$out/load-$mode.log" 2>&1 &
	load=$!
	sleep 1.5
	perf record -e cpu-clock -F 2000 -p $srv -o "$out/$mode.data" -- sleep "$secs" >/dev/null 2>&1
	wait $load
	kill $srv 2>/dev/null || true
	wait $srv 2>/dev/null || true
	read -r pl tot < <(plumbing "$out/$mode.data")
	awk -v m="$mode" -v pl="$pl" -v tot="$tot" 'BEGIN {
		printf "%-4s plumbing %4.1f %% of the server CPU: a transport without it serves at most %.3fx package net\n", m, pl, tot / (tot - pl)
	}'
	port=$((port + 1))
done
echo "perf data in $out"
