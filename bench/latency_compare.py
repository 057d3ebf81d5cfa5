"""The per-hop latency benchmark's tables (bench/latency.sh), as markdown.

    python3 bench/latency_compare.py detection PROGRUN_LOG COUNTERS NODE=LOUPE_JSON... -- POS=CLIENT_TSV...
    python3 bench/latency_compare.py hops LOUPE_JSON REQUESTS NAME=PCAP...
    python3 bench/latency_compare.py bpf BENCH_OUTPUT
    python3 bench/latency_compare.py http H2LOAD_TSV CPU_TSV
    python3 bench/latency_compare.py rate H2LOAD_TSV CPU_TSV SECONDS
    python3 bench/latency_compare.py keep RESULTS_MD HEADING

detection: the share of requests whose traceparent was found, by its
position: from TestLatencyDetectionRate's log (prog.Run), and from each
node's `loupe latency --json` against the trace ids hopclient sent with
that much padding (its output, one file per position).

hops: LOUPE_JSON is `loupe latency --json` output; each PCAP a capture with
nanosecond time stamps (tcpdump --time-stamp-precision=nano) of the
interface NAME. A segment is found in a capture by its inner 5-tuple and
the sequence number of its first byte (VXLAN on UDP 4789 is opened); the
first sight counts. For every hop of every record whose two interfaces
were captured, Loupe's latency and tcpdump's: p50, p90 and p99 of each,
and p50 and p99 of |Loupe - tcpdump| per hop against the targets (5 us at
p50, 20 us at p99).

bpf: `go test -bench BenchmarkLatency` output (several rounds appended):
median ns per packet per configuration and packet.

http: lines "round with microseconds" (h2load's request times): requests,
p50 and p99 per round and configuration, and pooled; CPU_TSV has the
agents' CPU seconds of each run ("round with seconds").

rate: the same input, from runs at a fixed request rate of SECONDS each:
requests/s, p50, p90 and p99 per round and pooled, and the pooled
difference against the target (p50 at most +5 %, p99 at most +10 %: the
seed's "no significant change").

keep: the subsection of the latency section of RESULTS_MD whose heading
starts with "### HEADING", as it is, under a note that this run left it
out: a run of some parts (BENCH_LATENCY_PARTS) keeps the others' tables.
"""

import json
import re
import socket
import statistics
import struct
import sys

TARGET_P50_NS, TARGET_P99_NS = 5000, 20000
RATE_P50, RATE_P99 = 0.05, 0.10  # at most this much above without --latency


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0xA1B23C4D:
        scale = 1
    elif magic == 0xA1B2C3D4:
        scale = 1000
    else:
        sys.exit(f"{path}: not a little-endian pcap file")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack("<IIII", data[off : off + 16])
        yield sec * 1_000_000_000 + frac * scale, data[off + 16 : off + 16 + incl]
        off += 16 + incl


def tcp_segment(frame):
    """(src, sport, dst, dport, seq, payload length) of a TCP/IPv4 frame,
    opening VXLAN; None for anything else."""
    for _ in range(2):
        if len(frame) < 34 or frame[12:14] != b"\x08\x00":
            return None
        ihl = (frame[14] & 0x0F) * 4
        proto = frame[23]
        total = struct.unpack("!H", frame[16:18])[0]
        l4 = 14 + ihl
        if proto == 17 and struct.unpack("!H", frame[l4 + 2 : l4 + 4])[0] == 4789:
            frame = frame[l4 + 16 :]
            continue
        if proto != 6 or len(frame) < l4 + 20:
            return None
        src, dst = socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34])
        sport, dport, seq = struct.unpack("!HHI", frame[l4 : l4 + 8])
        doff = (frame[l4 + 12] >> 4) * 4
        return src, sport, dst, dport, seq, total - ihl - doff
    return None


def sights(path):
    first = {}
    for ts, frame in packets(path):
        s = tcp_segment(frame)
        if s and s[5] > 0:
            first.setdefault(s[:5], ts)
    return first


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def cdf(xs):
    return " / ".join(f"{pct(xs, p) / 1000:.1f}" for p in (0.5, 0.9, 0.99))


def hops(loupe_json, requests, caps_args):
    caps = {}
    for arg in caps_args:
        name, path = arg.split("=", 1)
        caps[name] = sights(path)
    recs = [json.loads(l) for l in open(loupe_json) if l.strip()]
    traced = [r for r in recs if r["trace_id"]]
    diffs, lat, signed = {}, {}, {}
    for r in recs:
        key = (r["src_addr"], r["src_port"], r["dst_addr"], r["dst_port"], r["seq"])
        for h in r["hops"]:
            a, b = caps.get(h["from_iface"]), caps.get(h["to_iface"])
            if a is None or b is None or key not in a or key not in b:
                continue
            pair = (h["from_iface"], h["to_iface"], h["direction"])
            td = b[key] - a[key]
            diffs.setdefault(pair, []).append(abs(h["latency_ns"] - td))
            lat.setdefault(pair, []).append((h["latency_ns"], td))
            signed.setdefault(pair, []).append(td - h["latency_ns"])
    print(f"Requests sent: {requests}; records: {len(recs)}, with a trace id: {len(traced)} "
          f"({100.0 * len(traced) / max(requests, 1):.1f} % of the requests).")
    print()
    print("| hop | direction | segments | Loupe p50 / p90 / p99 (µs) | tcpdump p50 / p90 / p99 (µs) | tcpdump − Loupe p1 / p50 / p99 (µs) | \\|diff\\| p50 (µs) | \\|diff\\| p99 (µs) | target (5 / 20 µs) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    order = {"out": 0, "in": 1}
    for pair in sorted(diffs, key=lambda p: (order.get(p[2], 2), p)):
        d = diffs[pair]
        p50, p99 = pct(d, 0.5), pct(d, 0.99)
        ok = "met" if p50 <= TARGET_P50_NS and p99 <= TARGET_P99_NS else (
            "p50 met, p99 NOT met" if p50 <= TARGET_P50_NS else "NOT met")
        sd = signed[pair]
        spread = " / ".join(f"{pct(sd, q) / 1000:.1f}" for q in (0.01, 0.5, 0.99))
        print(f"| {pair[0]} → {pair[1]} | {pair[2]} | {len(d)} | {cdf([x for x, _ in lat[pair]])} | "
              f"{cdf([y for _, y in lat[pair]])} | {spread} | {p50 / 1000:.2f} | {p99 / 1000:.2f} | {ok} |")
    if not diffs:
        print("| (no hop found in both) | | 0 | | | | | | NOT met |")


def detection(progrun_log, counters, args):
    sep = args.index("--")
    stores, clients = args[:sep], args[sep + 1:]
    prog = {}
    for m in re.finditer(r"detection reach=(\S+) position=(\d+) found=(\d+) of (\d+)", open(progrun_log).read()):
        prog[(m.group(1), int(m.group(2)))] = (int(m.group(3)), int(m.group(4)))
    found = {}
    for arg in stores:
        node, path = arg.split("=", 1)
        found[node] = {json.loads(l)["trace_id"] for l in open(path) if l.strip()} - {""}
    nodes = [a.split("=", 1)[0] for a in stores]
    print("| position of traceparent (B) | prog.Run, 16 KiB scan | prog.Run, 800 B reach (the seed's) | "
          + " | ".join(f"agent, node {n}" for n in nodes) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in nodes) + " |")

    def rate(f, n):
        return f"{100.0 * f / n:.0f} % ({f}/{n})" if n else "–"

    for arg in clients:
        pos, path = arg.split("=", 1)
        sent = [l.split("\t")[0] for l in open(path) if l.strip()]
        row = [pos]
        for reach in ("default", "800"):
            row.append(rate(*prog[(reach, int(pos))]) if (reach, int(pos)) in prog else "–")
        for n in nodes:
            row.append(rate(sum(1 for t in sent if t in found[n]), len(sent)))
        print("| " + " | ".join(row) + " |")
    c = {}
    for line in open(counters):
        node, ev, v = line.rstrip("\n").split("\t")
        c[(node, ev)] = float(v or 0)
    print()
    print("The kernel's counters over the agents' run (`loupe_latency_events_total`, every hook of the node): "
          + "; ".join(f"node {n}: {c.get((n, 'found_traceparent'), 0):.0f} contexts found of "
                      f"{c.get((n, 'requests'), 0):.0f} request starts" for n in nodes) + ".")


def bpf(path):
    vals = {}
    for m in re.finditer(r"BenchmarkLatency/([^/\s]+)/(\S+?)-\d+\s+\d+\s+\S+ ns/op\s+(\S+) ns/packet", open(path).read()):
        vals.setdefault((m.group(2), m.group(1)), []).append(float(m.group(3)))
    configs = ["flows-only", "all-build", "latency", "latency-sampled-1:1"]
    packets = []
    for p, _ in vals:
        if p not in packets:
            packets.append(p)
    print("| packet | " + " | ".join(configs) + " | latency − all-build |")
    print("| --- | " + " | ".join("---" for _ in configs) + " | --- |")
    for p in packets:
        row = [p]
        for c in configs:
            xs = vals.get((p, c), [])
            row.append(f"{statistics.median(xs):.0f} ({', '.join(f'{x:.0f}' for x in xs)})" if xs else "–")
        on, off = vals.get((p, "latency")), vals.get((p, "all-build"))
        row.append(f"{statistics.median(on) - statistics.median(off):+.0f}" if on and off else "–")
        print("| " + " | ".join(row) + " |")


def http(path, cpu_path):
    runs, cpu = read_runs(path, cpu_path)
    print("| round | agents | requests | p50 (µs) | p99 (µs) | agents' CPU (s) | agents' CPU per request (µs) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    name = {0: "without --latency", 1: "--latency"}

    def row(r, w, xs, c):
        print(f"| {r} | {name[w]} | {len(xs)} | {pct(xs, 0.5)} | {pct(xs, 0.99)} | {c:.2f} | {1e6 * c / len(xs):.2f} |")

    for (r, w) in sorted(runs):
        row(r, w, runs[(r, w)], cpu.get((r, w), float("nan")))
    pooled = {}
    for w in (0, 1):
        xs = [x for (r, ww), v in runs.items() if ww == w for x in v]
        if xs:
            pooled[w] = xs
            row("all", w, xs, sum(v for (r, ww), v in cpu.items() if ww == w))
    if len(pooled) == 2:
        off, on = pooled[0], pooled[1]
        print()
        print(f"With `--latency` against without, pooled: {len(on) / len(off):.2f}× the requests, "
              f"p50 {pct(on, 0.5) - pct(off, 0.5):+d} µs, p99 {pct(on, 0.99) - pct(off, 0.99):+d} µs.")


def read_runs(path, cpu_path):
    cpu = {}
    for line in open(cpu_path):
        r, w, c = line.split("\t")
        cpu[(int(r), int(w))] = float(c)
    runs = {}
    for line in open(path):
        r, w, us = line.split("\t")
        runs.setdefault((int(r), int(w)), []).append(int(us))
    return runs, cpu


def rate(path, cpu_path, secs):
    runs, cpu = read_runs(path, cpu_path)
    secs = float(secs)
    name = {0: "without --latency", 1: "--latency"}
    print("| round | agents | requests/s | p50 (µs) | p90 (µs) | p99 (µs) | agents' CPU (s) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")

    def row(r, w, xs, n, c):
        print(f"| {r} | {name[w]} | {len(xs) / (n * secs):.1f} | {pct(xs, 0.5)} | {pct(xs, 0.9)} | {pct(xs, 0.99)} | {c:.2f} |")

    for (r, w) in sorted(runs):
        row(r, w, runs[(r, w)], 1, cpu.get((r, w), float("nan")))
    pooled = {}
    for w in (0, 1):
        keys = [k for k in runs if k[1] == w]
        if keys:
            pooled[w] = [x for k in keys for x in runs[k]]
            row("all", w, pooled[w], len(keys), sum(v for k, v in cpu.items() if k[1] == w))
    if len(pooled) == 2:
        off, on = pooled[0], pooled[1]
        d50 = pct(on, 0.5) / pct(off, 0.5) - 1
        d99 = pct(on, 0.99) / pct(off, 0.99) - 1
        ok = d50 <= RATE_P50 and d99 <= RATE_P99
        paired = {}
        for q in (0.5, 0.99):
            rs = sorted(pct(runs[(r, 1)], q) / pct(runs[(r, 0)], q) for (r, w) in runs if w == 1 and (r, 0) in runs)
            paired[q] = statistics.median(rs) if rs else float("nan")
        print()
        print(f"Paired by round, median of the rounds' ratios: p50 {paired[0.5]:.3f}×, p99 {paired[0.99]:.3f}×.")
        print()
        print(f"With `--latency` against without, pooled: p50 {pct(on, 0.5) - pct(off, 0.5):+d} µs ({100 * d50:+.1f} %), "
              f"p99 {pct(on, 0.99) - pct(off, 0.99):+d} µs ({100 * d99:+.1f} %). "
              f"Target (no significant change: p50 at most +{100 * RATE_P50:.0f} %, p99 at most +{100 * RATE_P99:.0f} %): "
              f"**{'met' if ok else 'not met'}**.")


HOOKS_NAMES = {
    "none": "nothing attached",
    "empty": "the empty program",
    "flows": "the agents without `--latency`",
    "latency": "the agents with `--latency`",
}


def hooks(path, bpf_path):
    """The hooks part: request latency and BPF time per request of each
    configuration, pooled over the rounds, and the p50 each adds over the
    empty program per µs of BPF time it adds per request."""
    times, order = {}, []
    for line in open(path):
        r, c, us = line.rstrip("\n").split("\t")
        if c not in times:
            order.append(c)
        times.setdefault(c, []).append(int(us))
    reqs, ns, runs = {}, {}, {}
    for line in open(bpf_path):
        r, c, n, t, k = line.rstrip("\n").split("\t")
        reqs[c] = reqs.get(c, 0) + int(n)
        ns[c] = ns.get(c, 0) + int(t)
        runs[c] = runs.get(c, 0) + int(k)

    def key(c):  # nothing, empty, the spins by their BPF time, the agents
        rank = {"none": 0, "empty": 1, "flows": 3, "latency": 4}
        return (rank.get(c, 2), ns.get(c, 0) / max(reqs.get(c, 1), 1))

    order.sort(key=key)
    base = None
    if "empty" in times and reqs.get("empty"):
        base = (pct(times["empty"], 0.5), ns["empty"] / reqs["empty"] / 1000)
    print("| at the hooks | requests | BPF µs per request | BPF runs per request | p50 (µs) | p90 (µs) | p99 (µs) | p50 added per BPF µs added, over the empty program |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in order:
        xs = times[c]
        name = HOOKS_NAMES.get(c, f"a program spinning {c.split(':')[1]} per run" if c.startswith("spin:") else c)
        if c == "none" or not reqs.get(c):
            bpf_us, per, slope = "–", "–", "–"
        else:
            b = ns[c] / reqs[c] / 1000
            bpf_us, per = f"{b:.1f}", f"{runs[c] / reqs[c]:.1f}"
            slope = "–"
            # Only where the configuration adds BPF time that stands out
            # of bpf_stats' own spread: a ratio over ~0 means nothing.
            if base and c != "empty" and b - base[1] > 0.5:
                slope = f"{(pct(xs, 0.5) - base[0]) / (b - base[1]):.1f}"
        print(f"| {name} | {len(xs)} | {bpf_us} | {per} | {pct(xs, 0.5)} | {pct(xs, 0.9)} | {pct(xs, 0.99)} | {slope} |")
    print()


def keep(results_md, heading):
    text = open(results_md).read()
    m = re.search(r"<!-- bench:latency:begin -->\n(.*?)<!-- bench:latency:end -->", text, re.S)
    lines = m.group(1).splitlines() if m else []
    out, inside = [], False
    for line in lines:
        if line.startswith("_Carried from"):
            continue  # a part carried before is carried again, whole
        if line.startswith("### "):
            inside = line.startswith("### " + heading)
        elif line.startswith("```"):
            inside = False
        if inside:
            out.append(line)
    if not out:
        return
    print(out[0])
    print()
    print("_Carried from an earlier run of this section: BENCH_LATENCY_PARTS left this part out of the run below._")
    print()
    print("\n".join(out[1:]).strip("\n"))
    print()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "detection":
        detection(args[0], args[1], args[2:])
    elif cmd == "hops":
        hops(args[0], int(args[1]), args[2:])
    elif cmd == "bpf":
        bpf(args[0])
    elif cmd == "http":
        http(args[0], args[1])
    elif cmd == "rate":
        rate(args[0], args[1], args[2])
    elif cmd == "hooks":
        hooks(args[0], args[1])
    elif cmd == "keep":
        keep(args[0], args[1])
    else:
        sys.exit(f"latency_compare.py: unknown command {cmd!r}")


if __name__ == "__main__":
    main()
