"""Per-hop latency from Loupe against tcpdump's time stamps of the same
segments on the same interfaces, as a markdown table.

    python3 bench/latency_compare.py LOUPE_JSON REQUESTS NAME=PCAP...

LOUPE_JSON is `loupe latency --json` output; each PCAP a capture with
nanosecond time stamps (tcpdump --time-stamp-precision=nano) of the
interface NAME. A segment is found in a capture by its inner 5-tuple and
the sequence number of its first byte (VXLAN on UDP 4789 is opened); the
first sight counts. For every hop of every record whose two interfaces
were captured, the difference Loupe - tcpdump; p50 and p99 of its absolute
value per hop, against the targets (5 us at p50, 20 us at p99).
"""

import json
import socket
import struct
import sys

TARGET_P50_NS, TARGET_P99_NS = 5000, 20000


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


def main():
    loupe_json, requests = sys.argv[1], int(sys.argv[2])
    caps = {}
    for arg in sys.argv[3:]:
        name, path = arg.split("=", 1)
        caps[name] = sights(path)
    recs = [json.loads(l) for l in open(loupe_json) if l.strip()]
    traced = [r for r in recs if r["trace_id"]]
    diffs, lat = {}, {}
    for r in traced:
        key = (r["src_addr"], r["src_port"], r["dst_addr"], r["dst_port"], r["seq"])
        for h in r["hops"]:
            a, b = caps.get(h["from_iface"]), caps.get(h["to_iface"])
            if a is None or b is None or key not in a or key not in b:
                continue
            pair = (h["from_iface"], h["to_iface"], h["direction"])
            td = b[key] - a[key]
            diffs.setdefault(pair, []).append(abs(h["latency_ns"] - td))
            lat.setdefault(pair, []).append((h["latency_ns"], td))
    print(f"Requests sent: {requests}; records with a trace id: {len(traced)} "
          f"({100.0 * len(traced) / max(requests, 1):.1f} %).")
    print()
    print("| hop | direction | requests | Loupe p50 (µs) | tcpdump p50 (µs) | \\|diff\\| p50 (µs) | \\|diff\\| p99 (µs) | target (5 / 20 µs) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for pair in sorted(diffs):
        d = diffs[pair]
        p50, p99 = pct(d, 0.5), pct(d, 0.99)
        lp = pct([x for x, _ in lat[pair]], 0.5)
        tp = pct([y for _, y in lat[pair]], 0.5)
        ok = "met" if p50 <= TARGET_P50_NS and p99 <= TARGET_P99_NS else "NOT met"
        print(f"| {pair[0]} → {pair[1]} | {pair[2]} | {len(d)} | {lp / 1000:.1f} | {tp / 1000:.1f} | {p50 / 1000:.2f} | {p99 / 1000:.2f} | {ok} |")
    if not diffs:
        print("| (no hop found in both) | | 0 | | | | | NOT met |")


if __name__ == "__main__":
    main()
