/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-CPU flow tables: an open-addressing index over dense slots, in
 * array maps.
 *
 * Each CPU owns, in each half of the swap (the _a and _b maps), a region
 * of cfg_slot_budget slots in flow_slots_* and a region of cfg_slots
 * 8-byte entries in flow_index_*. A slot holds a flow's key and counters
 * in 128 bytes: two cache lines, which the CPU's adjacent-line prefetch
 * fetches together. Slots are handed out in order (the CPU's fill counter
 * in flow_slots_fill), so a CPU's flows are the first slots of its region.
 * The index finds them: a flow's home entry is a hash of its key reduced
 * to the region (multiply-shift, no power of two needed), then the next
 * entries in turn (linear probing) up to SLOT_PROBES of them; an entry is
 * 0 (free) or the key's tag (32 bits of its hash) and the slot's number.
 *
 * Why not the kernel's per-CPU hash: a hit there is a call into the map,
 * a jhash of the 60-byte key, a walk of its bucket and a memcmp, then the
 * per-CPU pointer; it touches the bucket array, the element (48 bytes of
 * header before the key: two lines) and the per-CPU value elsewhere. Here
 * the lookups are inlined by the verifier (arrays: a bounds check and a
 * multiply), the hash is eight multiplies, and a hit touches an index
 * entry and one slot; a probe past another flow's entry compares tags,
 * not keys.
 *
 * Why dense slots behind an index, not the slots themselves probed: the
 * index is a sixteenth of the slots' size for as many places, so a flood
 * of flows spreads over few pages (a TLB miss per packet costs more than
 * the lookup, measured with slots probed in place: docs/architecture.md),
 * and userspace reads a half's flows as one run of slots per CPU, costing
 * the flows there are and not the regions' size.
 *
 * Why per CPU: only this CPU's programs write its regions, and programs
 * at the TC hooks do not preempt one another on a CPU (softirq, or bottom
 * halves disabled), so a hit is plain loads and stores, an insert needs
 * no lock, and userspace, which reads a half only after the swap's grace
 * period, sees every slot whole. The price is a key per CPU that sees the
 * flow, where the per-CPU hash kept one key and a value per possible CPU:
 * userspace merges a flow's slots of the CPUs by key (internal/datapath).
 *
 * Nothing is deleted within an interval (userspace frees the index
 * entries and slots of a half it drained), so a free entry ends every
 * probe sequence: a lookup stops at the flow's entry or at the first free
 * one, where the flow is then inserted. A CPU holds at most
 * cfg_slot_budget flows; cfg_slots is twice that, so that probe sequences
 * stay short. A flow that finds no place (the budget reached, or
 * SLOT_PROBES entries taken by others) is refused like a full hash
 * table's insert (-E2BIG): flows.h sends it to the sketch or the ring
 * buffer.
 */
#ifndef LOUPE_FLOWS_SLOTS_H
#define LOUPE_FLOWS_SLOTS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "flow.h"
#include "stats.h"

/* One flow on one CPU: 128 bytes (shared with Go, internal/datapath). */
struct flow_slot {
	struct flow_key key;     /* 60 bytes */
	__u32 tag;               /* the key's hash, its low bit set; 0: a free slot */
	struct flow_stats stats; /* 56 bytes */
	__u32 entry;             /* the index entry of this slot: cpu * cfg_slots + place */
	__u32 pad;
};

/* Flows each CPU holds in each half: one per half, per CPU. */
struct slot_fill {
	__u32 used;
	__u32 at; /* scratch: the key of an insert's slot, in map memory
		   * rather than on the stack, which the programs' deepest
		   * call chain has none of to spare */
};

/* The slots of both halves: [cpu * cfg_slot_budget, (cpu + 1) *
 * cfg_slot_budget) is CPU cpu's region, its first flow_slots_fill.used
 * slots its flows. max_entries (possible CPUs × cfg_slot_budget) is set
 * from Go; in the other table kinds (shared, ring buffer) the arrays have
 * one entry and cfg_slots is 0. */
struct slot_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);              /* Key: cpu * cfg_slot_budget + n */
	__type(value, struct flow_slot); /* Value: the CPU's n-th flow */
} flow_slots_a SEC(".maps"), flow_slots_b SEC(".maps");

/* The index of both halves: [cpu * cfg_slots, (cpu + 1) * cfg_slots) is
 * CPU cpu's region; max_entries (possible CPUs × cfg_slots) is set from
 * Go. Userspace maps it (a sixteenth of the slots' size) to tell, while it
 * reads a CPU's slots, whether another CPU may hold the same flow: only
 * those flows wait to be merged. */
struct slot_index {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);   /* Key: cpu * cfg_slots + place */
	__type(value, __u64); /* Value: 0 free, else tag << 32 | (n + 1): the flow in slot n */
} flow_index_a SEC(".maps"), flow_index_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);              /* Key: the half (0: flow_slots_a) */
	__type(value, struct slot_fill); /* Value: this CPU's flows in it */
} flow_slots_fill SEC(".maps");

/* Set from Go before load: index entries per CPU (0: per-CPU slot tables
 * off), and the flows a CPU holds per half (its slots). */
volatile const __u32 cfg_slots = 0;
volatile const __u32 cfg_slot_budget = 0;

/* How far past its home entry a flow's entry may sit. Go sizes the index at
 * twice the budget (datapath.slotsFor): a full CPU's index is then half
 * full, where linear probing finds a flow at its home entry or the next on
 * average, and, simulated, no insert of a full table of 65 536 flows ran
 * past 31 entries (internal/datapath/slots.go). */
#define SLOT_PROBES 64
#define SLOT_NONE 0xffffffff
#define E2BIG 7 /* as flows.h: a full table's refusal */

/* slot_mix folds one 8-byte word into h (multiply and xor-shift: every
 * bit of w reaches the high bits of h). */
static __always_inline __u64 slot_mix(__u64 h, __u64 w)
{
	h ^= w;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 31);
}

/* slot_hash hashes the 60 bytes of a key, read as seven 8-byte words and
 * a 4-byte one: key must be 8-byte aligned (the entry program's is, and
 * map values are). internal/datapath's slotHash is the same function.
 *
 * Two lanes, the even words and the odd ones, folded together at the end:
 * each mix waits for the multiply before it, so one lane of eight is a
 * chain of eight multiplies, two lanes a chain of five, which the CPU
 * runs side by side (97 to 91 ns a packet, BPF_PROG_TEST_RUN, one flow,
 * AMD EPYC VM). */
static __always_inline __u64 slot_hash(const struct flow_key *key)
{
	const __u64 *w = (const __u64 *)key;
	__u64 a = 0x9e3779b97f4a7c15ULL, b = 0x94d049bb133111ebULL;

	a = slot_mix(a, w[0]);
	b = slot_mix(b, w[1]);
	a = slot_mix(a, w[2]);
	b = slot_mix(b, w[3]);
	a = slot_mix(a, w[4]);
	b = slot_mix(b, w[5]);
	a = slot_mix(a, w[6]);
	b = slot_mix(b, *(const __u32 *)&w[7]);
	return slot_mix(a, b);
}

/* slot_key_eq compares two 8-byte aligned keys, word by word. */
static __always_inline int slot_key_eq(const struct flow_key *a, const struct flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]) |
		(x[5] ^ y[5]) | (x[6] ^ y[6]) | (__u64)(*(const __u32 *)&x[7] ^ *(const __u32 *)&y[7])) == 0;
}

/* slot_insert puts key with its first counters st into this CPU's next
 * free slot of half (table: flow_slots_a or _b, index: flow_index_a or
 * _b, as half), and points the free index entry idx that slot_hit_a or _b
 * (flows.h) returned at it; -E2BIG when the CPU holds its budget or the
 * probe sequence had no free entry. */
static __always_inline long slot_insert(void *table, void *index, __u32 half, __u32 idx, __u32 tag,
					const struct flow_key *key, const struct flow_stats *st)
{
	struct slot_fill *fill;
	struct flow_slot *s;
	__u64 *e;

	if (idx == SLOT_NONE)
		return -E2BIG;
	half &= 1;
	fill = bpf_map_lookup_elem(&flow_slots_fill, &half);
	if (!fill || fill->used >= cfg_slot_budget)
		return -E2BIG;
	/* idx is in the index region of CPU idx / cfg_slots: this CPU's. */
	fill->at = idx / cfg_slots * cfg_slot_budget + fill->used;
	s = bpf_map_lookup_elem(table, &fill->at);
	e = bpf_map_lookup_elem(index, &idx);
	if (!s || !e)
		return -E2BIG;
	__builtin_memcpy(&s->key, key, sizeof(*key));
	s->stats = *st;
	s->tag = tag;
	s->entry = idx;
	*e = (__u64)tag << 32 | (fill->used + 1);
	fill->used++;
	return 0;
}

#endif
