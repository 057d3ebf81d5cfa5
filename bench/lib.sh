# Helpers shared by the benchmarks; sourced by bench/run.sh, not run.
#
# Every process a benchmark starts goes through start_bg, every namespace
# through new_pair, and the EXIT trap (bench_cleanup) stops and deletes
# whatever is still there, whatever happened.

# --- cleanup -----------------------------------------------------------------

declare -A STOPSIG=() # pid of a background process we started -> stop signal
NETNS=()              # namespaces we created
CLEANUP_DIRS=()       # directories we created outside $WORK (e.g. on /dev/shm)
BPF_STATS_PREV=""     # kernel.bpf_stats_enabled before we changed it
PAIR_SEQ=0
STOP_RC=0

bench_cleanup() {
	local pid ns d
	set +e
	for pid in "${!STOPSIG[@]}"; do
		stop_bg "$pid" 5
	done
	for ns in "${NETNS[@]}"; do
		ip netns del "$ns" 2>/dev/null
	done
	for d in "${CLEANUP_DIRS[@]}"; do
		rm -rf "$d"
	done
	bpf_stats_restore
}

# --- processes ---------------------------------------------------------------

# alive PID: the process exists and is not a zombie (kill -0 succeeds on an
# unreaped child that has already exited).
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# start_bg VAR SIGNAL LOG CMD...: start CMD in the background with its output
# in LOG, remember it (and the signal that stops it cleanly), and store its
# pid in VAR. `ip netns exec` and `taskset` exec the command, so the pid is
# the command's own.
start_bg() {
	local _var=$1 _sig=$2 _log=$3 _pid
	shift 3
	"$@" >"$_log" 2>&1 &
	_pid=$!
	STOPSIG[$_pid]=$_sig
	printf -v "$_var" '%s' "$_pid"
}

# stop_bg PID [TIMEOUT]: send the process its stop signal, wait up to
# TIMEOUT seconds (default 20), then SIGKILL it and any child of it still
# there. Its exit status is left in STOP_RC.
stop_bg() {
	local pid=$1 timeout=${2:-20} i kids c
	[[ -n ${STOPSIG[$pid]:-} ]] || return 0
	kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
	kill -s "${STOPSIG[$pid]}" "$pid" 2>/dev/null || true
	for ((i = 0; i < timeout * 10; i++)); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		echo "bench: pid $pid did not stop within ${timeout}s: killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	STOP_RC=0
	wait "$pid" 2>/dev/null || STOP_RC=$?
	unset "STOPSIG[$pid]"
	for c in $kids; do
		for ((i = 0; i < 50; i++)); do
			alive "$c" || break
			sleep 0.1
		done
		alive "$c" && kill -KILL "$c" 2>/dev/null
	done
	return 0
}

# wait_log FILE PATTERN TIMEOUT_S [PID]: wait until FILE has a line matching
# PATTERN; fail if it does not within the timeout or if PID dies first.
wait_log() {
	local file=$1 pattern=$2 timeout=$3 pid=${4:-} i
	for ((i = 0; i < timeout * 20; i++)); do
		grep -qE "$pattern" "$file" 2>/dev/null && return 0
		if [[ -n $pid ]] && ! alive "$pid"; then
			echo "bench: process $pid exited before printing /$pattern/; its output:" >&2
			sed 's/^/    /' "$file" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "bench: no /$pattern/ in $file after ${timeout}s; it says:" >&2
	sed 's/^/    /' "$file" >&2
	return 1
}

# watch_usage VAR PID OUT: start procstat on PID (CPU seconds and peak RSS of
# it and its children until it exits), its result to go to OUT.
watch_usage() {
	start_bg "$1" TERM "$3" "$BIN/procstat" -pid "$2" -interval 100ms -timeout 30m
}

# usage_of WATCHER_PID OUT: wait for the watcher (its process has exited)
# and print "CPU_SECONDS PEAK_RSS_KB".
usage_of() {
	local i
	for ((i = 0; i < 100; i++)); do
		alive "$1" || break
		sleep 0.1
	done
	stop_bg "$1" 5
	awk '{print $1, $2}' "$2"
}

# --- namespaces --------------------------------------------------------------

# new_pair: create two namespaces joined by a veth pair, both ends up, IPv6
# off (so that nothing but the benchmark's own traffic crosses the pair),
# with 198.18.0.1/30 on the A end and 198.18.0.2/30 on the B end (RFC 2544's
# benchmark range). Sets NS_A, NS_B, IF_A, IF_B.
new_pair() {
	local n=$((++PAIR_SEQ)) ns
	NS_A=loupeb-$RUN_ID-$n-a NS_B=loupeb-$RUN_ID-$n-b
	IF_A=lb$RUN_ID${n}a IF_B=lb$RUN_ID${n}b
	for ns in "$NS_A" "$NS_B"; do
		ip netns add "$ns"
		NETNS+=("$ns")
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
		ip -n "$ns" link set lo up
	done
	ip -n "$NS_A" link add "$IF_A" type veth peer name "$IF_B" netns "$NS_B"
	ip netns exec "$NS_A" sysctl -qw "net.ipv6.conf.$IF_A.disable_ipv6=1"
	ip netns exec "$NS_B" sysctl -qw "net.ipv6.conf.$IF_B.disable_ipv6=1"
	ip -n "$NS_A" addr add 198.18.0.1/30 dev "$IF_A"
	ip -n "$NS_B" addr add 198.18.0.2/30 dev "$IF_B"
	ip -n "$NS_A" link set "$IF_A" up
	ip -n "$NS_B" link set "$IF_B" up
}

del_pair() {
	local ns keep=()
	ip netns del "$NS_A" 2>/dev/null || true
	ip netns del "$NS_B" 2>/dev/null || true
	for ns in "${NETNS[@]}"; do
		[[ $ns == "$NS_A" || $ns == "$NS_B" ]] || keep+=("$ns")
	done
	NETNS=("${keep[@]}")
}

# rx_packets NS IF: the interface's received-packets counter.
rx_packets() {
	ip netns exec "$1" cat "/sys/class/net/$2/statistics/rx_packets"
}

# --- the agent ---------------------------------------------------------------

# start_agent VAR NS LOG ARGS...: start `loupe run ARGS...` in NS and wait
# until it says it is attached and running.
start_agent() {
	local _var=$1 _ns=$2 _log=$3 _apid
	shift 3
	start_bg _apid TERM "$_log" ip netns exec "$_ns" "$BIN/loupe" run "$@"
	wait_log "$_log" 'msg="loupe running"' 30 "$_apid"
	printf -v "$_var" '%s' "$_apid"
}

# stop_agent PID: SIGTERM (the agent detaches, evicts and flushes), and
# fail loudly if it does not exit 0.
stop_agent() {
	stop_bg "$1" 30
	if ((STOP_RC != 0)); then
		echo "bench: loupe exited with status $STOP_RC on SIGTERM" >&2
		return 1
	fi
}

# metric NS NAME: the value of an agent's metric (its listener on the default
# 127.0.0.1:9464 of namespace NS), summed over its label sets.
metric() {
	ip netns exec "$1" curl -fsS --max-time 5 http://127.0.0.1:9464/metrics |
		awk -v m="$2" '$1 == m || index($1, m "{") == 1 {s += $2} END {printf "%.0f\n", s}'
}

# store_packets STORE IFACE [DIRECTION]: packets of the stored flows of IFACE
# (and DIRECTION, if given).
store_packets() {
	"$BIN/loupe" flows --store "$1" --json | python3 -c '
import json, sys
iface, direction = sys.argv[1], sys.argv[2]
total = 0
for line in sys.stdin:
    r = json.loads(line)
    if r["iface"] == iface and direction in ("", r["direction"]):
        total += r["packets"]
print(total)' "$2" "${3:-}"
}

# --- bpf_stats ---------------------------------------------------------------

bpf_stats_enable() {
	if [[ -z $BPF_STATS_PREV ]]; then
		BPF_STATS_PREV=$(cat /proc/sys/kernel/bpf_stats_enabled)
	fi
	echo 1 >/proc/sys/kernel/bpf_stats_enabled
}

bpf_stats_disable() {
	echo 0 >/proc/sys/kernel/bpf_stats_enabled
}

bpf_stats_restore() {
	if [[ -n $BPF_STATS_PREV ]]; then
		echo "$BPF_STATS_PREV" >/proc/sys/kernel/bpf_stats_enabled
		BPF_STATS_PREV=""
	fi
}

# prog_stats NS IF: "RUN_CNT RUN_TIME_NS" of the programs at the ingress hook
# of IF (the benchmarks send traffic one way, into IF).
prog_stats() {
	ip netns exec "$1" "$BIN/hookbench" stats -iface "$2" |
		awk '$1 ~ /ingress/ {c += $4; t += $5} END {printf "%.0f %.0f\n", c, t}'
}

# --- numbers and markdown ----------------------------------------------------

# mean_sd: mean and sample standard deviation of the numbers on stdin.
mean_sd() {
	awk '{x[NR] = $1; s += $1}
	END {
		if (NR == 0) { print "nan nan"; exit }
		m = s / NR; v = 0
		for (i = 1; i <= NR; i++) v += (x[i] - m) ^ 2
		printf "%.10g %.10g\n", m, (NR > 1 ? sqrt(v / (NR - 1)) : 0)
	}'
}

# calc EXPR: evaluate an arithmetic expression with awk (floating point).
# Numbers go through printf everywhere: Debian's mawk prints a bare number
# above 2^31 in %.6g.
calc() {
	awk "BEGIN {printf \"%.10g\", $1}"
}

# fmt FORMAT VALUE: printf through awk, so that "nan" stays printable.
fmt() {
	awk -v v="$2" "BEGIN {printf \"$1\", v}"
}

machine_info() {
	local cpu
	cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
	echo "Kernel \`$(uname -r)\`, CPU \`$cpu\` × $(nproc), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM;" \
		"loupe built from commit ${BENCH_COMMIT:-unknown}; measured $(date -u '+%Y-%m-%d %H:%M UTC')."
}

# section_begin NAME TITLE: start writing the section of benchmark NAME
# into $SECTION (a temporary file), with its title and the machine.
section_begin() {
	SECTION_NAME=$1
	SECTION=$WORK/section-$1.md
	{
		echo "## $2"
		echo
		echo "$(machine_info) Run with \`bench/run.sh $1\`."
		echo
	} >"$SECTION"
}

# say LINE...: append to the section.
say() {
	printf '%s\n' "$@" >>"$SECTION"
}

# section_end: replace the benchmark's section of bench/RESULTS.md.
section_end() {
	python3 "$BENCH_DIR/sections.py" "$BENCH_DIR/RESULTS.md" "$SECTION_NAME" "$SECTION"
	echo "bench: $SECTION_NAME: results written to bench/RESULTS.md" >&2
}

# median: the median of the numbers on stdin ("nan" if none).
median() {
	sort -g | awk '{x[NR] = $1}
	END {
		if (NR == 0) { print "nan"; exit }
		if (NR % 2) printf "%.10g\n", x[(NR + 1) / 2]
		else printf "%.10g\n", (x[NR / 2] + x[NR / 2 + 1]) / 2
	}'
}
