/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-CPU flow tables: open addressing in an array map.
 *
 * Each CPU owns a region of cfg_slots slots in flow_slots_a (and one in
 * flow_slots_b, the other half of the swap). A slot holds a flow's key and
 * its counters in 128 bytes: two cache lines, aligned (the array is
 * mmapable, so its values start on a page), which the CPU's adjacent-line
 * prefetch fetches together. A flow's place is a hash of its key reduced
 * to the region (multiply-shift, no power of two needed), then the next
 * slots in turn (linear probing) up to SLOT_PROBES of them.
 *
 * Why not the kernel's per-CPU hash: a hit there is a call into the map,
 * a jhash of the 60-byte key, a walk of its bucket and a memcmp, then the
 * per-CPU pointer; it touches the bucket array, the element (48 bytes of
 * header before the key: two lines) and the per-CPU value elsewhere. Here
 * the lookup is inlined by the verifier (an array: a bounds check and a
 * multiply), the hash is eight multiplies, and a hit touches one slot.
 * Measured (bench/RESULTS.md, section 2; docs/architecture.md): the flow
 * program's own cost per packet on one flow fell by about a third.
 *
 * Why per CPU: only this CPU's programs write its region, and programs at
 * the TC hooks do not preempt one another on a CPU (softirq, or bottom
 * halves disabled), so a hit is plain loads and stores, an insert needs no
 * lock, and userspace, which reads a half only after the swap's grace
 * period, sees every slot whole. The price is a key per CPU that sees the
 * flow, where the per-CPU hash kept one key and a value per possible CPU:
 * userspace merges a flow's slots of the CPUs by key (internal/datapath).
 *
 * Nothing is deleted within an interval (userspace frees the slots of a
 * half it drained, which flow_slot_list names), so a free slot ends every
 * probe sequence: a lookup stops at the flow's slot or at the first free
 * one, where the flow is then inserted. A CPU holds at most cfg_slot_budget flows (the flow
 * budget, counted in flow_slots_fill); cfg_slots is twice that, so that
 * probe sequences stay short. A flow that finds no place (the
 * budget reached, or SLOT_PROBES slots taken by others) is refused like a
 * full hash table's insert (-E2BIG): flows.h sends it to the sketch or the
 * ring buffer.
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
	__u32 tag;               /* 0: free; else the key's hash, its low bit set */
	struct flow_stats stats; /* 56 bytes */
	__u64 pad;
};

/* Flows each CPU holds in each half: one per half, per CPU. */
struct slot_fill {
	__u32 used;
	__u32 at; /* scratch: the key of an insert's flow_slot_list entry,
		   * in map memory rather than on the stack, which the
		   * programs' deepest call chain has none of to spare */
};

/* The slots of both halves: [cpu * cfg_slots, (cpu + 1) * cfg_slots) is
 * CPU cpu's region. max_entries (possible CPUs × cfg_slots) is set from Go;
 * in the other table kinds (shared, ring buffer) the array has one slot
 * and cfg_slots is 0. */
struct slot_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);              /* Key: cpu * cfg_slots + slot */
	__type(value, struct flow_slot); /* Value: a flow, or a free slot */
} flow_slots_a SEC(".maps"), flow_slots_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);              /* Key: the half (0: flow_slots_a) */
	__type(value, struct slot_fill); /* Value: this CPU's flows in it */
} flow_slots_fill SEC(".maps");

/* Where the flows are: the slots each CPU filled in each half, in the
 * order it filled them, at [(cpu * 2 + half) * cfg_slot_budget, + its
 * fill). Userspace reads a half's flows from these, never the whole of a
 * region (twice the budget, mostly free), so a drain costs the flows
 * there are. max_entries (possible CPUs × 2 × cfg_slot_budget) is set
 * from Go. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);   /* Key: (cpu * 2 + half) * cfg_slot_budget + n */
	__type(value, __u32); /* Value: the n-th slot filled, an index into the half's table */
} flow_slot_list SEC(".maps");

/* Set from Go before load: slots per CPU (0: per-CPU slot tables off), and
 * the flows a CPU holds per half (at most cfg_slots). */
volatile const __u32 cfg_slots = 0;
volatile const __u32 cfg_slot_budget = 0;

/* Slots a flow may sit past its home slot. Go sizes the regions at twice
 * the budget (datapath.slotsFor): a table at its budget is then half full,
 * where linear probing finds a flow at its home slot or the next on
 * average, and, simulated, no insert of a full table of 65 536 flows ran
 * past 31 slots (internal/datapath/slots.go). */
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
 * map values are). internal/datapath's slotHash is the same function. */
static __always_inline __u64 slot_hash(const struct flow_key *key)
{
	const __u64 *w = (const __u64 *)key;
	__u64 h = 0x9e3779b97f4a7c15ULL;

	h = slot_mix(h, w[0]);
	h = slot_mix(h, w[1]);
	h = slot_mix(h, w[2]);
	h = slot_mix(h, w[3]);
	h = slot_mix(h, w[4]);
	h = slot_mix(h, w[5]);
	h = slot_mix(h, w[6]);
	return slot_mix(h, *(const __u32 *)&w[7]);
}

/* slot_key_eq compares two 8-byte aligned keys, word by word. */
static __always_inline int slot_key_eq(const struct flow_key *a, const struct flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]) |
		(x[5] ^ y[5]) | (x[6] ^ y[6]) | (__u64)(*(const __u32 *)&x[7] ^ *(const __u32 *)&y[7])) == 0;
}

/* slot_insert puts key with its first counters st into the free slot idx
 * that slot_hit (flows.h) returned, on this CPU's fill of half; -E2BIG when
 * the CPU holds its budget or the probe sequence had no free slot. */
static __always_inline long slot_insert(void *table, __u32 half, __u32 idx, __u32 tag,
					const struct flow_key *key, const struct flow_stats *st)
{
	struct slot_fill *fill;
	struct flow_slot *s;
	__u32 *ref;

	if (idx == SLOT_NONE)
		return -E2BIG;
	half &= 1;
	fill = bpf_map_lookup_elem(&flow_slots_fill, &half);
	s = bpf_map_lookup_elem(table, &idx);
	if (!fill || !s || fill->used >= cfg_slot_budget)
		return -E2BIG;
	/* idx is in the region of CPU idx / cfg_slots: this CPU's. */
	fill->at = (idx / cfg_slots * 2 + half) * cfg_slot_budget + fill->used;
	ref = bpf_map_lookup_elem(&flow_slot_list, &fill->at);
	if (!ref)
		return -E2BIG;
	*ref = idx;
	fill->used++;
	__builtin_memcpy(&s->key, key, sizeof(*key));
	s->stats = *st;
	s->tag = tag;
	return 0;
}

#endif
