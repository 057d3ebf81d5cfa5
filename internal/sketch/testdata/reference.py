#!/usr/bin/env python3
"""An implementation of the sketch's hashing and insert written from the
package documentation (internal/sketch/doc.go) alone, sharing no code with
the Go package: it prints the values TestHashGolden, TestIndexesGolden and
TestEncodeGolden hold.

    python3 internal/sketch/testdata/reference.py
"""
import hashlib
import struct

M64 = (1 << 64) - 1
K = 3


def fmix64(h):
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    h ^= h >> 33
    return h


def H(seed, key):
    h = seed
    for (w,) in struct.iter_unpack("<Q", key):
        h ^= w
        h = (h * 0x9E3779B97F4A7C15) & M64
        h ^= h >> 29
    return fmix64(h)


def splitmix64(state, n):
    out = []
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


SEED_A, SEED_B = splitmix64(0, 2)


def reduce(h, n):
    assert 1 <= n <= 1 << 32
    return ((h >> 32) * n) >> 32


class Derived:
    def __init__(self, key):
        self.a = H(SEED_A, key)
        self.b = H(SEED_B, key)

    def g(self, i):
        return fmix64((self.a + i * self.b) & M64)

    def cells(self, sub):
        return [j * sub + reduce(self.g(1 + j), sub) for j in range(K)]

    def column(self, r, width):
        return reduce(self.g(1 + K + r), width)

    def probes(self, m, kf):
        p, step = reduce(self.a, m), 1 + reduce(self.b, m - 1)
        out = []
        for _ in range(kf):
            out.append(p)
            p += step
            if p >= m:
                p -= m
        return out

    def check(self):
        return self.a & 0xFFFFFFFF


class Sketch:
    """One CPU's memory: the flow set's cells, the filter's words, the
    count-min pairs, as doc.go lays them out (little-endian)."""

    def __init__(self, sub, m, kf, rows, width):
        self.sub, self.m, self.kf, self.rows, self.width = sub, m, kf, rows, width
        self.cells = [[bytearray(64), 0, 0, 0, 0] for _ in range(K * sub)]
        self.filter = [0] * ((m + 63) // 64)
        self.cm = [[0, 0] for _ in range(rows * width)]

    def add(self, key, length):
        d = Derived(key)
        seen = True
        for p in d.probes(self.m, self.kf):
            bit = 1 << (p % 64)
            seen = seen and self.filter[p // 64] & bit != 0
            self.filter[p // 64] |= bit
        for c in d.cells(self.sub):
            cell = self.cells[c]
            if not seen:
                for i in range(64):
                    cell[0][i] ^= key[i]
                cell[1] = (cell[1] + 1) & 0xFFFFFFFF
            cell[2] = (cell[2] + d.check()) & 0xFFFFFFFF
            cell[3] = (cell[3] + 1) & M64
            cell[4] = (cell[4] + length) & M64
        for r in range(self.rows):
            pair = self.cm[r * self.width + d.column(r, self.width)]
            pair[0] += 1
            pair[1] += length

    def flow_set(self):
        return b"".join(bytes(c[0]) + struct.pack("<IIQQ", *c[1:]) for c in self.cells)

    def filter_bytes(self):
        return b"".join(struct.pack("<Q", w) for w in self.filter)

    def count_min(self):
        return b"".join(struct.pack("<QQ", *p) for p in self.cm)


def flow_key(src, dst, sport, dport, proto, direction):
    """struct flow_key as helpers_test.go's flowKey lays it out, then 4 zero
    bytes: IPv4-mapped addresses, MACs, ifindex 2, IPv4."""
    k = bytearray(64)
    k[10:12] = b"\xff\xff"
    k[12:16] = bytes(src)
    k[26:28] = b"\xff\xff"
    k[28:32] = bytes(dst)
    k[32:44] = bytes([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2])
    struct.pack_into("<IHHH", k, 44, 2, 0x0800, sport, dport)
    k[56], k[57] = proto, direction
    return bytes(k)


GOLDEN_KEYS = [
    bytes(64),
    bytes(range(64)),
    flow_key((10, 0, 0, 1), (10, 0, 0, 2), 40000, 443, 6, 0),
]


def main():
    print("seeds: %#018x %#018x" % (SEED_A, SEED_B))
    print("TestHashGolden: H(seed A), H(seed B)")
    for k in GOLDEN_KEYS:
        print("\t{0x%016X, 0x%016X}," % (H(SEED_A, k), H(SEED_B, k)))
    print("TestIndexesGolden: 1000 cells a subrange, 1009 filter bits, 10 probes, rows 1000 wide")
    for k in GOLDEN_KEYS:
        d = Derived(k)
        print("\t{[K]int{%s}, [10]int{%s}, 0x%08X, [4]int{%s}}," % (
            ", ".join(map(str, d.cells(1000))),
            ", ".join(map(str, d.probes(1009, 10))),
            d.check(),
            ", ".join(str(d.column(r, 1000)) for r in range(4))))
    print("TestEncodeGolden: key i, 3 packets of 60+100i, +1, +2 bytes")
    s = Sketch(1000, 1009, 10, 4, 1000)
    for i, k in enumerate(GOLDEN_KEYS):
        for j in range(3):
            s.add(k, 60 + 100 * i + j)
    for name, b in (("flow set", s.flow_set()), ("filter", s.filter_bytes()), ("count-min", s.count_min())):
        print('\t"%s": "%s",' % (name, hashlib.sha256(b).hexdigest()))


if __name__ == "__main__":
    main()
