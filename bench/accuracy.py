#!/usr/bin/env python3
"""Judges an agent's records against a gentrace truth file.

usage: accuracy.py TRUTH IFACE [LOOPS] < records.jsonl   (loupe flows --json)

LOOPS: how many times the trace was replayed (its truth is multiplied).

Prints one tab-separated line:
  flows  exact_flows  estimated_flows  within_bound  unnamed_flows
  sent_packets  recorded_packets  exact_packets  unattributed_packets
  top100_ok
where a flow is exact when its records (exact or decoded) hold its packets
and bytes, estimated when one of its records is an estimate (within_bound:
its summed estimates are at least the truth and exceed it by at most the
summed bounds), unnamed when no record names it; top100_ok counts the 100
heaviest flows (by bytes) that are exact or within their bound.
"""
import ipaddress
import json
import sys


def main():
    truth_path, iface = sys.argv[1], sys.argv[2]
    loops = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    truth = {}
    for line in open(truth_path):
        src, dst, proto, sport, dport, packets, nbytes = line.split("\t")
        truth[(src, dst, int(proto), int(sport), int(dport))] = (loops * int(packets), loops * int(nbytes))
    got = {}
    recorded = unattributed = 0
    for line in sys.stdin:
        r = json.loads(line)
        if r["iface"] != iface or r["direction"] != "ingress":
            continue
        recorded += r["packets"]
        if not r.get("src_addr"):
            unattributed += r["packets"]
            continue
        key = (str(ipaddress.ip_address(r["src_addr"])), str(ipaddress.ip_address(r["dst_addr"])),
               r["proto"], r.get("src_port", 0), r.get("dst_port", 0))
        g = got.setdefault(key, [0, 0, False, 0, 0])
        g[0] += r["packets"]
        g[1] += r["bytes"]
        if r.get("accuracy") == "estimated":
            g[2] = True
            g[3] += r.get("max_error_packets", 0)
            g[4] += r.get("max_error_bytes", 0)
    exact = estimated = within = unnamed = exact_packets = 0
    ok = {}
    for key, (packets, nbytes) in truth.items():
        g = got.get(key)
        if g is None:
            unnamed += 1
            ok[key] = False
            continue
        if g[2]:
            estimated += 1
            w = packets <= g[0] <= packets + g[3] and nbytes <= g[1] <= nbytes + g[4]
            within += w
            ok[key] = w
        else:
            e = g[0] == packets and g[1] == nbytes
            exact += e
            exact_packets += packets if e else 0
            ok[key] = e
    top = sorted(truth, key=lambda k: truth[k][1], reverse=True)[:100]
    sent = sum(p for p, _ in truth.values())
    print("\t".join(str(x) for x in (len(truth), exact, estimated, within, unnamed, sent, recorded,
                                      exact_packets, unattributed, sum(ok[k] for k in top))))


if __name__ == "__main__":
    main()
