#!/usr/bin/env bash
# Runs the store benchmark (which writes bench/store/RESULTS.md) on data it
# also exports as CSV, loads the same records into SQLite with the sqlite3
# CLI, times the same top-10 queries there, and appends that section to
# RESULTS.md. Needs the Debian sqlite3 package (apt-get install -y sqlite3).
#
#   bash bench/store/sqlite_compare.sh          # 10 M records, ~10 minutes
#   N=1000000 bash bench/store/sqlite_compare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

N=${N:-10000000}
SEED=${SEED:-1}
RUNS=${RUNS:-3}
REF=$(date +%s)
OUT=bench/store/RESULTS.md
command -v sqlite3 >/dev/null || { echo "sqlite3 not installed (apt-get install -y sqlite3)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go run ./bench/store -n "$N" -seed "$SEED" -ref "$REF" -csv "$work/flows.csv" -out "$OUT"

db="$work/flows.db"
since=$(( (REF - 3600) * 1000000000 ))
until=$(( REF * 1000000000 ))
t0=$(date +%s.%N)
sqlite3 "$db" <<SQL
PRAGMA journal_mode=WAL;
CREATE TABLE flows(first_seen INTEGER, last_seen INTEGER, src TEXT, dst TEXT,
  src_port INTEGER, dst_port INTEGER, proto INTEGER, packets INTEGER, bytes INTEGER,
  ifindex INTEGER, iface TEXT, direction TEXT, eth_type INTEGER, src_mac TEXT, dst_mac TEXT,
  tcp_flags INTEGER, dscp INTEGER, sampling INTEGER);
.mode csv
.import $work/flows.csv flows
CREATE INDEX flows_last_seen ON flows(last_seen);
SQL
t1=$(date +%s.%N)
load=$(echo "$t1 - $t0" | bc)
dbsize=$(stat -c %s "$db")
rm -f "$work/flows.csv"

# One query per sqlite3 process, like a CLI invocation; the first run after
# the load is not cold (the load just wrote the pages), so take the median.
query() { # name sql
	local times=()
	for _ in $(seq "$RUNS"); do
		local a z
		a=$(date +%s%N)
		sqlite3 "$db" "$2" >/dev/null
		z=$(date +%s%N)
		times+=("$(( (z - a) / 1000000 ))")
	done
	local med
	med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	printf '| SQLite: %s, median of %d (whole sqlite3 process) | %d ms |\n' "$1" "$RUNS" "$med"
}
where="last_seen >= $since AND first_seen <= $until"
# Top's flows are distinct flow keys (the CSV has every key field but the
# VLAN, which the generator leaves 0).
flows="COUNT(DISTINCT src || ' ' || dst || ' ' || src_port || ' ' || dst_port || ' ' || proto || ' ' || ifindex || ' ' || direction || ' ' || eth_type || ' ' || src_mac || ' ' || dst_mac)"
{
	echo
	echo "## Same data in SQLite"
	echo
	echo "\`bash bench/store/sqlite_compare.sh\` ($(sqlite3 --version | cut -d' ' -f1-2)): the records above, loaded with \`.import\` into one table (every field a column, addresses as text), with an index on last_seen."
	echo
	echo "| measurement | value |"
	echo "| --- | --- |"
	printf '| SQLite: load the rows from CSV and build the index | %.1f s |\n' "$load"
	printf '| SQLite: bytes on disk | %.1f MB, %.1f bytes per record |\n' "$(echo "$dbsize / 1000000" | bc -l)" "$(echo "$dbsize / $N" | bc -l)"
	query "top 10 sources, last hour" "SELECT src, SUM(bytes) AS b, SUM(packets), $flows FROM flows WHERE $where GROUP BY src ORDER BY b DESC LIMIT 10;"
	query "top 10 pairs, last hour" "SELECT src, dst, SUM(bytes) AS b, SUM(packets), $flows FROM flows WHERE $where GROUP BY src, dst ORDER BY b DESC LIMIT 10;"
	# (By destination port: Top's service ports need the SYNs of each
	# connection first, which this query does not do.)
	query "top 10 destination ports, last hour" "SELECT dst_port, proto, SUM(bytes) AS b, SUM(packets), $flows FROM flows WHERE $where GROUP BY dst_port, proto ORDER BY b DESC LIMIT 10;"
	echo
	echo "SQLite's top 10 sources (must match the table above):"
	echo
	echo "| src | bytes | packets | flows |"
	echo "| --- | --- | --- | --- |"
	sqlite3 -separator ' | ' "$db" "SELECT src, SUM(bytes) AS b, SUM(packets), $flows FROM flows WHERE $where GROUP BY src ORDER BY b DESC LIMIT 10;" | sed 's/^/| /; s/$/ |/'
} >>"$OUT"
cat "$OUT"
