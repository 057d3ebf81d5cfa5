/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Sketch mode, the datapath half: when the exact flow table of the half in
 * force is full, new flows spill into fixed-size per-CPU sketches instead of
 * the ring buffer (flows.h, account_in). internal/sketch is the userspace
 * half and the specification: its doc.go gives the memory layout, the hash
 * and its seeds, and the insert bit for bit, and sketch.Encoder is the Go
 * reference of sketch_insert below (internal/datapath's tests compare the
 * two byte for byte).
 *
 * Each CPU holds, per half:
 *   - a flow set: Cells records of struct sketch_cell (an IBLT, FlowRadar's
 *     "encoded flow set"), from which userspace decodes every flow's key,
 *     packets and bytes while it holds fewer flows than its capacity;
 *   - a flow filter: a Bloom filter of FilterBits bits saying whether the
 *     flow set already holds a flow's key;
 *   - a count-min sketch of Rows x Width (packets, bytes) pairs, so that
 *     heavy hitters are still estimated when the flow set does not decode;
 *   - the exact spill totals per (ifindex, direction), and the half's "full"
 *     flag (struct sketch_slot).
 *
 * Why per-CPU: every structure is written by its CPU only, so an insert is
 * plain loads and stores, no atomics, no cache line shared between CPUs;
 * userspace decodes each CPU's tables and merges by key. Why per-CPU arrays:
 * on this kernel the verifier inlines a per-CPU array lookup (a bounds
 * check, a multiply and this CPU's offset: no helper call), so the 3 + FH +
 * Rows lookups of an insert cost a few instructions each.
 *
 * Why one map per structure, holding both halves: a per-CPU array's value is
 * at most 32 KiB (PCPU_MIN_UNIT_SIZE), so a sketch cannot be one value; it
 * is one element per cell, filter word or counter pair, and the halves are
 * two ranges of indexes ([0, N) and [N, 2N)). Doubling the maps instead
 * would not save an instruction (the half is a constant at each of
 * account_in's call sites either way) and would double the maps to pin.
 *
 * Why double-buffered: the sketch half written is the one whose flow table
 * is active (flow_state.active), so userspace reads and clears a half after
 * the same swap and RCU grace period as the table, and the sketch holds
 * exactly the spill of that table's interval.
 *
 * Sizes are load-time constants (volatile const, folded by the verifier):
 * the maps' max_entries and the cfg_sketch_* values below are set together
 * from Go before load (internal/datapath/sketch.go). */
#ifndef LOUPE_SKETCH_H
#define LOUPE_SKETCH_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "flow.h"

#define SKETCH_K 3                  /* cells per flow, one per subrange (sketch.K) */
#define SKETCH_MAX_ROWS 8           /* sketch.MaxRows: the rows loop's bound */
#define SKETCH_MAX_FILTER_HASHES 32 /* the filter loop's bound; Go refuses more */
#define SKETCH_SPILL_SLOTS 256      /* hashed spill-total slots per half (a power of 2) */
#define SKETCH_SPILL_STRIDE (SKETCH_SPILL_SLOTS + 1) /* + the header slot, index 0 */

/* One flow-set cell: 88 bytes, no implicit padding (sketch.Cell). */
struct sketch_cell {
	__u8 key_xor[64];  /* XOR of the keys of the cell's flows */
	__u32 flow_count;  /* flows inserted in the cell */
	__u32 check;       /* sum over the cell's packets of their flow's check term, mod 2^32 */
	__u64 packets;
	__u64 bytes;
};

/* One count-min counter pair: 16 bytes. */
struct sketch_counter {
	__u64 packets;
	__u64 bytes;
};

/* What spilled on one CPU in one half: 24 bytes. Slot 0 of each half is
 * its header: full says the half's flow table refused a new flow on this
 * CPU (E2BIG), and packets/bytes count the spill whose (ifindex,
 * direction) found its slot held by another pair ("other"). Slots 1..256
 * hold one pair each, claimed by its first spilled packet (used). Every
 * spilled packet is in exactly one slot: the totals are exact. */
struct sketch_slot {
	__u64 packets;
	__u64 bytes;
	__u32 ifindex;
	__u8 direction;
	__u8 used; /* 1: the slot holds (ifindex, direction) */
	__u8 full; /* header only: skip the table's doomed insert */
	__u8 pad;
};

/* 1 when sketch mode is on. Off, the verifier removes every line that reads
 * a map below, and a refused insert goes through the ring buffer as before. */
volatile const __u8 cfg_sketch = 0;
/* sketch.Params: the flow set's Cells (the offset of half 1 in
 * sketch_cells) and Cells/3; the filter's bits (a prime), words (the offset
 * of half 1 in sketch_filter) and probes; the count-min rows and width. */
volatile const __u32 cfg_sketch_cells = 3;
volatile const __u32 cfg_sketch_sub = 1;
volatile const __u32 cfg_sketch_filter_bits = 2;
volatile const __u32 cfg_sketch_filter_words = 1;
volatile const __u32 cfg_sketch_filter_hashes = 1;
volatile const __u32 cfg_sketch_rows = 1;
volatile const __u32 cfg_sketch_width = 1;
/* sketch.Params.Cache: the flow cache's entries per half (0: no cache, every
 * spilled packet inserted as it comes). */
volatile const __u32 cfg_sketch_cache = 0;

/* max_entries of the four maps are set from Go: 2 x (Cells + Cache), 2 x
 * filter words, 2 x Rows x Width, 2 x SKETCH_SPILL_STRIDE. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 6);
	__type(key, __u32);                /* Key: half x Cells + cell; then 2 x Cells + half x Cache + entry */
	__type(value, struct sketch_cell); /* Value: the cell, or a flow cache entry, per CPU */
} sketch_cells SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);   /* Key: half x filter words + word */
	__type(value, __u64); /* Value: 64 filter bits, per CPU */
} sketch_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);                   /* Key: half x Rows x Width + row x Width + column */
	__type(value, struct sketch_counter); /* Value: the pair, per CPU */
} sketch_cm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * SKETCH_SPILL_STRIDE);
	__type(key, __u32);                 /* Key: half x SKETCH_SPILL_STRIDE + slot */
	__type(value, struct sketch_slot); /* Value: the slot, per CPU */
} sketch_spill SEC(".maps");

/* The sizes above and the hashing, for an agent that finds these maps
 * pinned (a retired set is decoded with its own parameters, and only by a
 * build that hashes alike): written by userspace at load, never read by
 * the programs. */
struct sketch_params {
	__u32 cells;
	__u32 filter_bits;
	__u32 filter_hashes;
	__u32 rows;
	__u32 width;
	__u32 spill_slots;
	__u32 hash; /* sketch.HashVersion the halves are written with */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sketch_params);
} sketch_conf SEC(".maps");

/* The hash (sketch.Hash, doc.go "The hash"): a key's two full hashes a and
 * b, seeded with SplitMix64's first two outputs from 0; every index comes
 * from them by a finalizer and a multiply-shift. */
#define SKETCH_MUL 0x9E3779B97F4A7C15ULL
#define SKETCH_SEED_A 0xE220A8397B1DCDAFULL
#define SKETCH_SEED_B 0x6E789E6AA1B965F4ULL
#define SKETCH_DERIVE_CELL 1              /* g(1..K): the cells */
#define SKETCH_DERIVE_ROW (1 + SKETCH_K) /* g(K+1..): the count-min rows */

#define SKETCH_MIX(h, x)                                                                           \
	do {                                                                                       \
		(h) ^= (x);                                                                        \
		(h) *= SKETCH_MUL;                                                                 \
		(h) ^= (h) >> 29;                                                                  \
	} while (0)

/* MurmurHash3's fmix64: the full hash's last step, and all of what derives
 * a cell's or a row's value from a and b. */
static __always_inline __u64 sketch_fmix(__u64 h)
{
	h ^= h >> 33;
	h *= 0xFF51AFD7ED558CCDULL;
	h ^= h >> 33;
	h *= 0xC4CEB9FE1A85EC53ULL;
	h ^= h >> 33;
	return h;
}

/* sketch_reduce maps h to [0, n), n at most 2^32: the high half of h times
 * n, over 2^32 (Lemire's multiply-shift), a multiply where % is a
 * division. */
static __always_inline __u32 sketch_reduce(__u64 h, __u32 n)
{
	return ((h >> 32) * n) >> 32;
}

/* sketch_hash2 computes a = H(seed A, key) and b = H(seed B, key): the
 * multiply-xorshift loop over the key's eight little-endian words (struct
 * flow_key's 60 bytes, then 4 zero bytes), then fmix64. The two chains are
 * interleaved word by word, so the CPU overlaps their multiplies. The key
 * is read where it is, with 32-bit loads: it is only 4-byte aligned (on a
 * caller's stack, where the verifier wants every access aligned to its
 * size), and a copy would take stack the deepest chain of calls cannot
 * spare. */
static __always_inline void sketch_hash2(const struct flow_key *key, __u64 *pa, __u64 *pb)
{
	const __u32 *p = (const __u32 *)key;
	__u64 a = SKETCH_SEED_A, b = SKETCH_SEED_B;

#pragma unroll
	for (int w = 0; w < 8; w++) {
		__u64 x = w < 7 ? (__u64)p[2 * w] | (__u64)p[2 * w + 1] << 32 : (__u64)p[14];

		SKETCH_MIX(a, x);
		SKETCH_MIX(b, x);
	}
	*pa = sketch_fmix(a);
	*pb = sketch_fmix(b);
}

/* sketch_header returns the header slot of a half on this CPU. */
static __always_inline struct sketch_slot *sketch_header(__u32 half)
{
	__u32 idx = half ? SKETCH_SPILL_STRIDE : 0;

	return bpf_map_lookup_elem(&sketch_spill, &idx);
}

/* sketch_count_spill adds a spilled packet to its (ifindex, direction)'s
 * slot, claiming the slot if it is free, or to the header's "other" if
 * another pair holds it. */
static __always_inline void sketch_count_spill(__u32 half, struct sketch_slot *hdr,
					       const struct flow_key *key, __u64 len)
{
	__u32 pair = key->ifindex << 1 | (key->direction & 1);
	/* Fibonacci hashing of the pair: its top 8 bits. */
	__u32 idx = (half ? SKETCH_SPILL_STRIDE : 0) + 1 + ((pair * 0x9E3779B1U) >> 24);
	struct sketch_slot *s = bpf_map_lookup_elem(&sketch_spill, &idx);

	if (!s)
		return;
	if (!s->used) {
		s->used = 1;
		s->ifindex = key->ifindex;
		s->direction = key->direction;
	} else if (s->ifindex != key->ifindex || s->direction != key->direction) {
		s = hdr;
	}
	s->packets++;
	s->bytes += len;
}

/* sketch_insert records packets packets of len bytes in all of the flow key
 * into half of this CPU's sketch: the insert of doc.go, as
 * sketch.Encoder.AddN does it.
 *
 *	a, b = the key's two hashes; g(i) = fmix64(a + i*b)
 *	filter: seen = every probe's bit already set; set every probe's bit
 *	for each of the flow's K cells (from g(1..K)):
 *		if !seen: key_xor ^= key; flow_count += 1
 *		check += (u32)a * packets; packets += packets; bytes += len
 *	for each row r: pair at column c(r) (from g(K+1+r)): packets += packets; bytes += len
 *
 * Two full hashes and one finalizer per cell and per row: 34 multiplies
 * with Size's four rows, where a full hash per index was 90. Nothing is
 * kept in an array: each derived value is computed where it is used, so
 * the frame holds only what the inlined lookups make the compiler spill
 * (spill's frame counts in the verifier's 512 bytes for the deepest chain
 * of calls).
 *
 * Every index is below its map's max_entries by construction; the lookups'
 * NULL checks are the verifier's, and never taken. */
static __always_inline void sketch_insert(__u32 half, const struct flow_key *key, __u64 packets, __u64 len)
{
	const __u32 *kw = (const __u32 *)key;
	__u64 a, b, m, pos, step;
	__u32 seen = 1;

	sketch_hash2(key, &a, &b);

	/* The flow filter: FilterHashes probes by double hashing, distinct
	 * bits since m is prime. A bounded loop (the bound is Go's limit), not
	 * unrolled: the verifier walks cfg_sketch_filter_hashes iterations. */
	m = cfg_sketch_filter_bits;
	pos = sketch_reduce(a, m);
	step = 1 + sketch_reduce(b, m - 1);
	{
		__u32 base = half ? cfg_sketch_filter_words : 0;

		for (__u32 i = 0; i < SKETCH_MAX_FILTER_HASHES; i++) {
			__u32 idx;
			__u64 *word, bit;

			if (i >= cfg_sketch_filter_hashes)
				break;
			idx = base + (__u32)(pos >> 6);
			word = bpf_map_lookup_elem(&sketch_filter, &idx);
			if (!word)
				return;
			bit = 1ULL << (pos & 63);
			if (!(*word & bit)) {
				seen = 0;
				*word |= bit;
			}
			pos += step;
			if (pos >= m)
				pos -= m;
		}
	}

	/* The flow set: one cell in each subrange. The key goes into key_xor
	 * 32 bits at a time, as it is read (its last 4 bytes are zero). */
	{
		__u32 sub = cfg_sketch_sub;
		__u32 base = half ? cfg_sketch_cells : 0;

#pragma unroll
		for (int j = 0; j < SKETCH_K; j++) {
			__u32 idx = base + j * sub + sketch_reduce(sketch_fmix(a + (SKETCH_DERIVE_CELL + j) * b), sub);
			struct sketch_cell *c = bpf_map_lookup_elem(&sketch_cells, &idx);

			if (!c)
				return;
			if (!seen) {
				__u32 *x = (__u32 *)c->key_xor;

#pragma unroll
				for (int i = 0; i < 15; i++)
					x[i] ^= kw[i];
				c->flow_count++;
			}
			c->check += (__u32)a * (__u32)packets;
			c->packets += packets;
			c->bytes += len;
		}
	}

	/* The count-min sketch: one pair per row. */
	{
		__u32 width = cfg_sketch_width, rows = cfg_sketch_rows;
		__u32 base = half ? rows * width : 0;

#pragma unroll
		for (int r = 0; r < SKETCH_MAX_ROWS; r++) {
			__u32 idx;
			struct sketch_counter *c;

			if (r >= rows)
				break;
			idx = base + r * width + sketch_reduce(sketch_fmix(a + (SKETCH_DERIVE_ROW + r) * b), width);
			c = bpf_map_lookup_elem(&sketch_cm, &idx);
			if (!c)
				return;
			c->packets += packets;
			c->bytes += len;
		}
	}
}

/* The flow cache (doc.go, "The flow cache"): per CPU and half, Cache
 * entries in front of the sketch, in sets of two picked by the flow tables'
 * hash (slot_hash, flows/slots.h). A spilled flow's packets add up in its
 * entry; a flow without one takes the entry of its set with fewer packets
 * (a free one has none), and the flow that held it goes into the sketch,
 * all its packets in one insert (flows.h, spill). Userspace reads the
 * entries with the half and adds their exact counts to what the flow set
 * decodes of the same flows (internal/sketch, TakeCache). On traffic whose
 * packets are mostly a few flows', a spilled packet then costs a hash, two
 * entries and two adds, where the
 * insert touches the filter's words, three cells and the count-min rows,
 * far apart in memory; keeping the heavier flow of a set keeps the few
 * flows that carry most packets.
 *
 * The entries are struct sketch_cell records of the sketch_cells map, after
 * both halves' cells (a map of their own would be one more than the entry
 * programs may use): key_xor holds the flow's 60-byte key, then its tag (the
 * hash's low half, its low bit set; 0: a free entry); packets and bytes are
 * the flow's since it took the entry; flow_count and check stay 0. */
#define SKETCH_CACHE_WAYS 2

/* sketch_cache_set returns the index of the first entry of the set of hash
 * h in half; the second follows it. */
static __always_inline __u32 sketch_cache_set(__u32 half, __u64 h)
{
	__u32 sets = cfg_sketch_cache / SKETCH_CACHE_WAYS;

	return 2 * cfg_sketch_cells + (half ? cfg_sketch_cache : 0) +
	       SKETCH_CACHE_WAYS * (__u32)(((h >> 32) * sets) >> 32);
}

/* sketch_cache_tag is where an entry keeps its tag. */
static __always_inline __u32 *sketch_cache_tag(struct sketch_cell *c)
{
	return (__u32 *)&c->key_xor[60];
}

#endif
