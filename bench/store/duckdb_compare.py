#!/usr/bin/env python3
"""Times DuckDB on the store benchmark's records, for bench/store (main.go).

main.go writes the records it stored as CSV (the columns sqlite_compare.sh
loads), runs this with the query window, and reads back one JSON object:
how long the load took, and per grouping the median of the warm runs and
the top 10 rows, which it checks against the store's own answers.

The table lives in memory, in DuckDB's own columnar format, with the
addresses and MACs as text, as they are in the CSV. A flow is a distinct
flow key, as the store counts it: every key field the CSV has (the VLAN
is not in it; the generator leaves it 0).

    python3 bench/store/duckdb_compare.py --csv flows.csv --since NS --until NS [--runs 5]
"""

import argparse
import json
import statistics
import sys
import time

import duckdb

COLUMNS = {
    "first_seen": "BIGINT", "last_seen": "BIGINT", "src": "VARCHAR", "dst": "VARCHAR",
    "src_port": "INTEGER", "dst_port": "INTEGER", "proto": "INTEGER",
    "packets": "UBIGINT", "bytes": "UBIGINT", "ifindex": "UBIGINT", "iface": "VARCHAR",
    "direction": "VARCHAR", "eth_type": "INTEGER", "src_mac": "VARCHAR", "dst_mac": "VARCHAR",
    "tcp_flags": "INTEGER", "dscp": "INTEGER", "sampling": "UBIGINT",
}

FLOW_KEY = "(src, dst, src_port, dst_port, proto, ifindex, direction, eth_type, src_mac, dst_mac)"

# Grouping (as `loupe top --by` names it) -> its columns. The store's
# `port` grouping (the service port, from each connection's SYNs) has no
# plain SQL form; dst-port is the nearest.
GROUPS = {
    "src": ["src"],
    "dst": ["dst"],
    "pair": ["src", "dst"],
    "src-port": ["src_port", "proto"],
    "dst-port": ["dst_port", "proto"],
}


def query(cols, since, until):
    g = ", ".join(cols)
    return (f"SELECT {g}, SUM(bytes) AS b, SUM(packets) AS p, COUNT(DISTINCT {FLOW_KEY}) AS f "
            f"FROM flows WHERE last_seen >= {since} AND first_seen <= {until} "
            f"GROUP BY {g} ORDER BY b DESC, p DESC, f DESC, {g} LIMIT 10")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--since", type=int, required=True, help="unix ns")
    ap.add_argument("--until", type=int, required=True, help="unix ns")
    ap.add_argument("--runs", type=int, default=5, help="warm runs per query (the median is reported)")
    a = ap.parse_args()

    con = duckdb.connect()
    t = time.perf_counter()
    cols = ", ".join(f"'{k}': '{v}'" for k, v in COLUMNS.items())
    con.execute(f"CREATE TABLE flows AS SELECT * FROM read_csv('{a.csv}', header = false, columns = {{{cols}}})")
    load = time.perf_counter() - t
    rows = con.execute("SELECT COUNT(*) FROM flows").fetchone()[0]

    out = {"version": duckdb.__version__, "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
           "load_s": load, "rows": rows, "queries": {}}
    for name, gcols in GROUPS.items():
        sql = query(gcols, a.since, a.until)
        first, times = None, []
        for i in range(a.runs + 1):
            t = time.perf_counter()
            res = con.execute(sql).fetchall()
            d = time.perf_counter() - t
            if i == 0:
                first = d
            else:
                times.append(d)
        out["queries"][name] = {
            "first_ms": first * 1e3,
            "warm_ms": statistics.median(times) * 1e3,
            "sql": sql,
            "rows": [[str(v) for v in r] for r in res],
        }
        print(f"duckdb {name}: first {first * 1e3:.0f} ms, warm median {statistics.median(times) * 1e3:.0f} ms",
              file=sys.stderr)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
