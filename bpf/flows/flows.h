/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The flows capability: flow accounting at the TC/TCX hook.
 *
 * Every packet is counted exactly once: into the active flow table, or, when
 * the table refuses the insert, through the ring buffer, or, when even that is
 * full, into the lost-packets and lost-bytes counters. Nothing is sampled.
 * In sketch mode (cfg_sketch), a packet the table refuses because it is full
 * goes into the half's sketch instead of the ring buffer (sketch/sketch.h):
 * memory stays fixed whatever the number of flows.
 *
 * The tables: per CPU (the default on small machines), each CPU's own
 * slots in an array (slots.h); or one shared hash, updated atomically.
 *
 * Why two tables: userspace flips flow_state.active, then waits for an RCU
 * grace period (it updates an array-of-maps, which makes the kernel wait, see
 * maybe_wait_bpf_programs), so no program can still hold an element of the
 * table it drains. Draining then races with nobody: a packet is never added
 * to an entry after it was read and deleted, and the per-CPU leftovers of
 * reused entries the netobserv paper warns about cannot appear (userspace
 * still filters them, defensively). The tables are two static maps, not an
 * array-of-maps the program looks up: with the map known at each call site
 * the verifier turns lookups into direct calls, where a map taken from an
 * array-of-maps costs an indirect call (a retpoline) per packet.
 *
 * Every map can be pinned (internal/datapath): the tables, the switch, the
 * counters, the ring buffer and the sketches outlive the agent, and programs attached
 * through pinned links keep counting into them while no agent runs. That is
 * why the switch is a map and not a global variable: a global lives in the
 * object's own .bss, which the next agent's programs would not share.
 */
#ifndef LOUPE_FLOWS_H
#define LOUPE_FLOWS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "counters.h"
#include "flow.h"
#include "parse.h"
#include "tunnel.h"
#include "../rules/rules.h"
#include "../sketch/sketch.h"
#include "slots.h"
#include "stats.h"

/* The table switch and what userspace keeps about the two tables: 48 bytes,
 * in a one-entry array that is pinned with the tables, so that the next agent
 * knows which table the programs write and what each holds. The programs read
 * only active; the rest is userspace's (internal/datapath/state.go).
 *
 * An epoch names the contents of one table between two swaps: every swap
 * gives the table it makes active the next epoch, and the store records the
 * epochs it holds, so that a table drained again after a crash is recognised.
 * pin_set tells epochs of different pin sets apart. */
struct table_state {
	__u32 active;      /* the table the programs write: 0 = flows_a, 1 = flows_b */
	__u32 pad;
	__u64 pin_set;     /* random, never 0: the identity of this set of tables */
	__u64 epoch_a;     /* of what flows_a holds (0: never written) */
	__u64 epoch_b;     /* of what flows_b holds */
	__u64 installed_a; /* CLOCK_MONOTONIC when flows_a was last made active */
	__u64 installed_b;
};

/* Why a packet's flow went through the ring buffer instead of the table. */
enum flow_event_reason {
	FLOW_EVENT_MAP_FULL = 1, /* the table holds flow_budget flows */
	FLOW_EVENT_MAP_BUSY = 2, /* the insert failed for another reason (bucket lock) */
	FLOW_EVENT_OFF_PATH = 3, /* off-path mode: every packet goes through the ring buffer */
};

/* Ring-buffer record: one packet's contribution to its flow. */
struct flow_event {
	struct flow_key key;
	__u32 pad; /* flow_stats is 8-byte aligned */
	struct flow_stats stats;
	__u32 reason; /* enum flow_event_reason */
	__s32 err;    /* the failed update's error */
};

#define E2BIG 7
#define EEXIST 17
#define ENOMEM 12

/* Set from Go before load (volatile const: folded by the verifier). */
/* 1 when the tables are one shared hash (atomic adds) instead of per-CPU. */
volatile const __u8 cfg_shared_table = 0;
/* 1 in off-path mode (map_type ringbuf): no table, every packet's header
 * goes through the ring buffer and userspace counts it, the seed's off-path
 * design and the netobserv paper's first version. Kept to compare designs
 * on one machine (bench/), not as the default: it moves the per-packet work
 * to userspace and loses packets when the reader falls behind (counted). */
volatile const __u8 cfg_offpath = 0;

/* The two shared flow tables (map_type shared): one hash, its counters
 * updated with atomic instructions. max_entries (the flow budget) is set
 * from Go before load; with per-CPU tables the flows are in the slot
 * arrays of slots.h instead, and these hold one entry, never written. */
struct flow_table {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct flow_key);     /* Key: the flow */
	__type(value, struct flow_stats); /* Value: its counters this interval */
} flows_a SEC(".maps"), flows_b SEC(".maps");

/* The outer side of the flows the hook saw inside a tunnel (lib/tunnel.h),
 * one table beside each flow table: written with a flow's first packet in
 * the table's interval, drained and cleared with the flow table.
 *
 * Beside the flow table rather than in struct flow_stats: a field there
 * would add its 56 bytes to every flow's value, on every CPU's copy of a
 * per-CPU table, and to every drain's copy, tunnelled or not; here only
 * tunnelled flows have an entry, and only their first packet of an
 * interval pays for it (an insert, where the flow's own insert is). Not
 * preallocated, so that a host without tunnels gives it no memory; sized
 * from Go like the flow tables (the flow budget). When it is full, the
 * flow is counted all the same, without its outer side
 * (COUNTER_TUNNEL_TABLE_FULL). */
struct tunnel_table {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct flow_key);       /* Key: the flow, as in the flow table */
	__type(value, struct tunnel_info);  /* Value: its first packet's outer side this interval */
} tunnels_a SEC(".maps"), tunnels_b SEC(".maps");

/* Which table the programs write, and what userspace keeps about both. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);                /* Key: 0 */
	__type(value, struct table_state); /* Value: the switch and the epochs */
} flow_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); /* resized from Go */
} flow_events SEC(".maps");           /* Record: struct flow_event */

/* Never read or written: its value type is the ring buffer's record. It is
 * pinned with the ring buffer so that an agent of another build can read the
 * records a retired pin set left through their BTF: a ring buffer has no BTF
 * type of its own, and a map's BTF holds only its key and value types. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flow_event);
} event_layout SEC(".maps");


/* What the flows capability keeps per CPU: the coarse clock as last read,
 * and scratch space. */
struct flows_cpu {
	__u64 clock_jiffies; /* jiffies when clock_ns was read */
	__u64 clock_ns;      /* bpf_ktime_get_coarse_ns then */
	/* An aggregate's flow key: off the stack (see rules_scratch). */
	struct flow_key agg_key;
};

/* A map of its own would be the entry program's 65th: the kernel takes 64
 * a program. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);              /* Key: 0 */
	__type(value, struct flows_cpu); /* Value: this CPU's */
} flows_cpu SEC(".maps");

/* coarse_now is bpf_ktime_get_coarse_ns (CLOCK_MONOTONIC_COARSE, the time
 * of the last tick), asked of the kernel about once a tick per CPU rather
 * than on every packet: a helper call, whose return on this project's AMD
 * benchmark machine goes through a return thunk (retbleed), costs about 8
 * ns a packet (BPF_PROG_TEST_RUN, one flow). jiffies moves at the same
 * tick, and the verifier inlines bpf_jiffies64 into one load, so a CPU
 * keeps the coarse time with the jiffies it read it at and asks again when
 * jiffies moved.
 *
 * The tick moves jiffies before the coarse time (tick_do_update_jiffies64,
 * then update_wall_time), so a CPU may read the new jiffies with the old
 * time. When that old time is the one it keeps, it keeps nothing and asks
 * again on the next packet, until the time has moved too. Only a CPU whose
 * last read is older than that (its first packet in a while) can keep the
 * old time for the new tick: in that instant's race last_seen is two ticks
 * behind instead of one, still within the first_seen clamp. */
static __always_inline __u64 coarse_now(void)
{
	__u32 zero = 0;
	struct flows_cpu *c = bpf_map_lookup_elem(&flows_cpu, &zero);
	__u64 j, ns;

	if (!c)
		return bpf_ktime_get_coarse_ns();
	j = bpf_jiffies64();
	if (c->clock_jiffies == j)
		return c->clock_ns;
	ns = bpf_ktime_get_coarse_ns();
	if (ns != c->clock_ns) {
		c->clock_jiffies = j;
		c->clock_ns = ns;
	}
	return ns;
}

/* Time stamps. bpf_ktime_get_ns reads the clock source, which costs about
 * 28 ns a call on the Xeon benchmark machine's TSC, a third of the
 * program's own cost, so it is read once per flow and CPU (first_seen).
 * Every other packet reads the coarse clock (the same CLOCK_MONOTONIC,
 * updated every tick: coarse_now), clamped so that last_seen never
 * precedes first_seen: last_seen is exact to a tick (1-10 ms, CONFIG_HZ),
 * first_seen to the nanosecond. */
static __always_inline void stats_add(struct flow_stats *st, const struct pkt *p, __u16 sampling)
{
	__u64 now = coarse_now();

	if (cfg_shared_table) {
		__sync_fetch_and_add(&st->packets, 1);
		__sync_fetch_and_add(&st->bytes, p->len.bytes);
		if (p->len.segments > 1) {
			__sync_fetch_and_add(&st->extra_segments, p->len.segments - 1);
			__sync_fetch_and_add(&st->extra_wire_bytes, p->len.wire_bytes - p->len.bytes);
		}
		/* Skip the locked OR when the flags are already there, which
		 * is every packet of an established connection but a few. */
		if ((st->tcp_flags | p->tcp_flags) != st->tcp_flags)
			__sync_fetch_and_or(&st->tcp_flags, p->tcp_flags);
	} else {
		/* A CPU's first packet of a flow another CPU created finds
		 * its own copy zeroed by the kernel. */
		if (st->packets == 0) {
			st->first_seen = bpf_ktime_get_ns();
			st->sampling = sampling;
		}
		st->packets++;
		st->bytes += p->len.bytes;
		st->extra_segments += p->len.segments - 1;
		st->extra_wire_bytes += p->len.wire_bytes - p->len.bytes;
		st->tcp_flags |= p->tcp_flags;
	}
	/* Plain stores: in the shared table two CPUs may race here and leave a
	 * last_seen a tick older, which is harmless. */
	st->last_seen = now > st->first_seen ? now : st->first_seen;
	st->dscp = p->dscp;
}

/* ring_send hands one packet's contribution to userspace through the ring
 * buffer; when the buffer is full it is lost, and counted as lost. */
static __always_inline void ring_send(const struct flow_key *key, const struct flow_stats *st,
				      __u32 reason, long err)
{
	struct flow_event *ev;

	ev = bpf_ringbuf_reserve(&flow_events, sizeof(*ev), 0);
	if (!ev) {
		counter_inc(COUNTER_RINGBUF_FULL);
		counter_inc(COUNTER_LOST_PACKETS);
		counter_add(COUNTER_LOST_BYTES, st->bytes);
		return;
	}
	ev->key = *key;
	ev->stats = *st;
	ev->reason = reason;
	ev->err = (__s32)err;
	bpf_ringbuf_submit(ev, 0);
}

/* divert hands a packet the table refused to userspace, saying why. */
static __always_inline void divert(const struct flow_key *key, const struct flow_stats *st,
				   long err)
{
	__u32 reason;

	if (err == -E2BIG || err == -ENOMEM) {
		reason = FLOW_EVENT_MAP_FULL;
		counter_inc(COUNTER_MAP_FULL);
	} else {
		reason = FLOW_EVENT_MAP_BUSY;
		counter_inc(COUNTER_MAP_BUSY);
	}
	ring_send(key, st, reason, err);
}

/* fresh_stats are the counters of a flow's first packet p, seen at now. */
static __always_inline struct flow_stats fresh_stats(const struct pkt *p, __u16 sampling, __u64 now)
{
	struct flow_stats st = {
		.packets = 1,
		.bytes = p->len.bytes,
		.extra_segments = p->len.segments - 1,
		.extra_wire_bytes = p->len.wire_bytes - p->len.bytes,
		.first_seen = now,
		.last_seen = now,
		.tcp_flags = p->tcp_flags,
		.sampling = sampling,
		.dscp = p->dscp,
	};
	return st;
}

/* tunnel_note keeps the outer side of the packet the tunnel step just took
 * out of its tunnel (the tunnel scratch) for the flow of key, in the tunnel
 * table beside flow table idx (0: flows_a, 1: flows_b).
 *
 * A global function: run on a tunnelled flow's first packet of an interval
 * only, and checked by the verifier once rather than at each of the places
 * a packet is accounted (a flow, a sample, an aggregate, each table). */
__noinline int tunnel_note(const struct flow_key *key, __u32 idx)
{
	const struct tunnel_scratch *s = tunnel_scratch_get();
	long err;

	if (!key || !s)
		return 0;
	if (idx)
		err = bpf_map_update_elem(&tunnels_b, key, &s->info, BPF_ANY);
	else
		err = bpf_map_update_elem(&tunnels_a, key, &s->info, BPF_ANY);
	if (err)
		counter_inc(COUNTER_TUNNEL_TABLE_FULL);
	return 0;
}

/* spill counts a packet of len bytes the full table refused into the
 * sketch of half (sketch/sketch.h), instead of the ring buffer: the flow set
 * and count-min sketch, the exact spill totals of its interface, and the
 * counters.
 *
 * A function of its own (a BPF-to-BPF call), not inlined: its stack frame
 * (what the registers cannot hold across the inlined lookups) is then not
 * part of the callers' frames, and the code of the insert appears once in
 * the program instead of at every account() (flows_observe_ruled has
 * several, and account_in two per table). The call is paid on the spill
 * path only. Its frame is still added to its callers' in the deepest chain
 * of calls the verifier sums against 512 bytes (the entry program's,
 * flows_observe_ruled's, spill's), so the insert keeps its frame small: no
 * copy of the key, no array of hashes. */
static __noinline void spill(__u32 half, struct sketch_slot *hdr, const struct flow_key *key, __u64 len)
{
	const struct flow_key *insert = key; /* what goes into the sketch */
	__u64 packets = 1, bytes = len;
	struct sketch_cell *c = 0, *c1;
	__u32 idx, take = 0; /* take: the tag of key, when key takes c */

	if (!hdr || !key)
		return;
	/* The totals first: what the insert leaves live is then few enough
	 * for the registers, and the frame stays small. */
	sketch_count_spill(half & 1, hdr, key, len);
	counter_inc(COUNTER_SPILLED_PACKETS);
	counter_add(COUNTER_SPILLED_BYTES, len);
	/* With a flow cache (sketch.h), the packet goes to its flow's entry,
	 * or takes the lighter entry of its set, whose flow goes into the
	 * sketch. One insert below whatever the path: each inlined copy
	 * would add its own stack slots to the deepest chain of calls. */
	if (cfg_sketch_cache) {
		__u64 h = slot_hash(key);
		__u32 tag = (__u32)h | 1;

		idx = sketch_cache_set(half & 1, h);
		c = bpf_map_lookup_elem(&sketch_cells, &idx);
		idx++;
		c1 = bpf_map_lookup_elem(&sketch_cells, &idx);
		if (!c || !c1) {
			c = 0;
		} else if (*sketch_cache_tag(c1) == tag && slot_key_eq((const struct flow_key *)c1->key_xor, key)) {
			c = c1;
			insert = 0;
		} else if (*sketch_cache_tag(c) == tag && slot_key_eq((const struct flow_key *)c->key_xor, key)) {
			insert = 0;
		} else {
			if (c1->packets < c->packets)
				c = c1;
			insert = 0;
			if (c->packets) {
				insert = (const struct flow_key *)c->key_xor;
				packets = c->packets;
				bytes = c->bytes;
			}
			take = tag;
		}
	}
	if (insert)
		sketch_insert(half & 1, insert, packets, bytes);
	if (!c)
		return;
	if (take) {
		__builtin_memcpy(c->key_xor, key, sizeof(*key));
		*sketch_cache_tag(c) = take;
		c->packets = 0;
		c->bytes = 0;
	}
	c->packets++;
	c->bytes += len;
}

/* spill_cached counts a packet of len bytes into its flow's entry of the
 * flow cache of half (sketch.h), if the flow holds one, and returns 1;
 * otherwise it returns 0 and counts nothing. account_in asks it first once
 * this CPU found the half's table full: a flow with an entry is not in the
 * table (it spilled because the table refused it, and the table takes no
 * flow until userspace clears it, the cache with it), so a hit spares the
 * table's lookup too. Not inlined, for the reasons spill is not. */
static __noinline int spill_cached(__u32 half, struct sketch_slot *hdr, const struct flow_key *key, __u64 len)
{
	struct sketch_cell *c;
	__u32 idx, tag;
	__u64 h;

	if (!hdr || !key)
		return 0;
	h = slot_hash(key);
	tag = (__u32)h | 1;
	idx = sketch_cache_set(half & 1, h);
	for (int way = 0; way < SKETCH_CACHE_WAYS; way++, idx++) {
		c = bpf_map_lookup_elem(&sketch_cells, &idx);
		if (!c)
			return 0;
		if (*sketch_cache_tag(c) == tag && slot_key_eq((const struct flow_key *)c->key_xor, key)) {
			c->packets++;
			c->bytes += len;
			sketch_count_spill(half & 1, hdr, key, len);
			counter_inc(COUNTER_SPILLED_PACKETS);
			counter_add(COUNTER_SPILLED_BYTES, len);
			return 1;
		}
	}
	return 0;
}

/* slot_hit counts p, whose flow key is key, into its flow's slot in this
 * CPU's region of a half (slots.h: index and slots are that half's maps),
 * if the flow has one, and returns 0. Otherwise it returns where the flow
 * goes: its tag in the high 32 bits, and in the low ones the free index
 * entry that ended its probe sequence, SLOT_NONE if none did.
 *
 * Through one of two global functions, one per half (slot_hit_a,
 * slot_hit_b): the verifier checks the probe loop once, on its own, where
 * inlined at every place a packet is accounted (two tables, and the rules'
 * flows, samples and aggregates) the loop's exits multiplied the states of
 * all that follows past the verifier's million instructions. One function
 * per half, not one taking the half: given the half, clang picks the map
 * before a single lookup call, and a call site that may see two maps is one
 * the verifier cannot inline, so both lookups of every packet went through
 * bpf_map_lookup_elem and an indirect call into the array map. With its
 * maps fixed, each function's lookups are a bounds check and a multiply
 * (`bpftool prog dump xlated`: no call but the clock's). The price is a
 * call and a return per packet. Their arguments are plain memory: key
 * comes apart from p, as for flows_observe_ruled. */
static __always_inline __u64 slot_hit(void *index, void *slots, const struct flow_key *key, const struct pkt *p,
				      __u32 sampling)
{
	__u64 h;
	__u32 cpu, home, tag;

	h = slot_hash(key);
	cpu = bpf_get_smp_processor_id();
	/* The hash's high half picks the home entry, its low half is the
	 * tag: two flows that share a home rarely share a tag too, so a
	 * probe past another flow's entry compares 4 bytes, not the key. */
	home = (__u32)(((h >> 32) * (__u64)cfg_slots) >> 32);
	tag = (__u32)h | 1;
	for (__u32 i = 0; i < SLOT_PROBES; i++) {
		__u32 at = home + i, idx;
		struct flow_slot *s;
		__u64 *e, v;

		if (at >= cfg_slots)
			at -= cfg_slots;
		idx = cpu * cfg_slots + at;
		e = bpf_map_lookup_elem(index, &idx);
		if (!e)
			break;
		v = *e;
		if (v == 0)
			return (__u64)tag << 32 | (cpu * cfg_slots + at);
		if ((__u32)(v >> 32) != tag)
			continue;
		/* The slot: the key stays idx's, whose value is spent. */
		idx = cpu * cfg_slot_budget + (__u32)v - 1;
		s = bpf_map_lookup_elem(slots, &idx);
		if (s && slot_key_eq(&s->key, key)) {
			stats_add(&s->stats, p, sampling);
			return 0;
		}
	}
	return (__u64)tag << 32 | SLOT_NONE;
}

__noinline __u64 slot_hit_a(const struct flow_key *key, const struct pkt *p, __u32 sampling)
{
	if (!key || !p)
		return SLOT_NONE;
	return slot_hit(&flow_index_a, &flow_slots_a, key, p, sampling);
}

__noinline __u64 slot_hit_b(const struct flow_key *key, const struct pkt *p, __u32 sampling)
{
	if (!key || !p)
		return SLOT_NONE;
	return slot_hit(&flow_index_b, &flow_slots_b, key, p, sampling);
}

/* account_in counts p into the flow table of half (0: flows_a, and
 * flow_slots_a with flow_index_a; 1: the _b maps; constants at each call
 * site):
 * this CPU's slots (slots.h) with per-CPU tables, the hash table with a
 * shared one; in sketch mode into the half's sketch when the table is
 * full. */
static __always_inline void account_in(void *table, void *slots, void *index, __u32 half, const struct flow_key *key,
				       const struct pkt *p, __u16 sampling)
{
	struct sketch_slot *hdr = 0;
	struct flow_stats *st;
	__u64 place = 0;
	__u64 now;
	long err;

	/* Sketch mode: once this CPU saw the half's table full, a flow that
	 * holds an entry of the flow cache is counted there, without the
	 * table's lookup (spill_cached), and a new flow goes to the sketch
	 * without trying the insert, which would fail again (the table only
	 * empties when userspace clears it, flag included). A sampled packet
	 * (a rule's `sample`) is not spilled: the sketch counts packets, not
	 * what a packet stands for, so it keeps the ring buffer, which
	 * carries its sampling rate. Nor is a GSO/GRO super-packet: the
	 * sketch has no counters for the segments it stands for, and the
	 * ring buffer keeps its wire counts exact. All of this is gone from
	 * the loaded program when cfg_sketch is 0. */
	if (cfg_sketch && sampling == 1 && p->len.segments == 1) {
		hdr = sketch_header(half);
		if (cfg_sketch_cache && hdr && hdr->full && spill_cached(half, hdr, key, p->len.bytes))
			return;
	}

	if (cfg_slots) {
		place = half & 1 ? slot_hit_b(key, p, sampling) : slot_hit_a(key, p, sampling);
		if (place == 0)
			return;
	} else {
		st = bpf_map_lookup_elem(table, key);
		if (st) {
			stats_add(st, p, sampling);
			return;
		}
	}

	if (hdr && hdr->full) {
		spill(half, hdr, key, p->len.bytes);
		return;
	}

	/* The flow's first packet in this table: before the insert, so that
	 * a packet the table refuses (the ring buffer's) has it too. A
	 * spilled flow has none: the sketch keeps no outer side. */
	if (p->tunnel)
		tunnel_note(key, half);

	/* A new flow. The clock is read after the table was picked, so that
	 * every first_seen in a table is later than the moment userspace
	 * installed it (the evictor's stale filter relies on it). */
	now = bpf_ktime_get_ns();
	struct flow_stats fresh = fresh_stats(p, sampling, now);

	if (cfg_slots) {
		/* This CPU's region: nobody else inserts there. */
		err = slot_insert(slots, index, half, (__u32)place, place >> 32, key, &fresh);
		if (err == 0)
			return;
	} else {
		/* NOEXIST: in the shared table BPF_ANY would overwrite the
		 * counters of a CPU that inserted the same flow an instant
		 * ago. */
		err = bpf_map_update_elem(table, key, &fresh, BPF_NOEXIST);
		if (err == 0)
			return;
		if (err == -EEXIST) {
			st = bpf_map_lookup_elem(table, key);
			if (st) {
				stats_add(st, p, sampling);
				return;
			}
		}
	}
	/* A full table spills; a busy one (bucket lock) still diverts. Only
	 * E2BIG, the preallocated table out of free elements (or this CPU's
	 * slots at their budget), sets the flag: ENOMEM is a failed
	 * allocation, which the next insert may not meet. */
	if (cfg_sketch && hdr && (err == -E2BIG || err == -ENOMEM)) {
		if (err == -E2BIG)
			hdr->full = 1;
		spill(half, hdr, key, p->len.bytes);
		return;
	}
	divert(key, &fresh, err);
}

/* account counts p into the flow of key (p's own, or its aggregate), at a
 * sampling rate of 1 in sampling. */
static __always_inline void account(const struct pkt *p, const struct flow_key *key, __u16 sampling)
{
	__u32 zero = 0;
	struct table_state *ts;

	if (cfg_offpath) {
		struct flow_stats one = fresh_stats(p, sampling, bpf_ktime_get_ns());

		ring_send(key, &one, FLOW_EVENT_OFF_PATH, 0);
		return;
	}
	ts = bpf_map_lookup_elem(&flow_state, &zero);

	/* Two call sites, each with a map known to the verifier: lookups
	 * become direct calls (or inlined), where a map taken from an
	 * array-of-maps would cost an indirect call per packet. (The lookup
	 * above is inlined too: an array with a constant key.) Userspace
	 * rewrites the whole value at a swap; only the low bit of active
	 * changes, so even a torn read picks one table or the other. */
	if (ts && (*(volatile __u32 *)&ts->active & 1))
		account_in(&flows_b, &flow_slots_b, &flow_index_b, 1, key, p, sampling);
	else
		account_in(&flows_a, &flow_slots_a, &flow_index_a, 0, key, p, sampling);
}

/* flows_interval is the table of a pair the programs write in this
 * interval: 0 or 1, the flow tables' switch. A capability that keeps a
 * result per flow (dns/dns.h, handshake/handshake.h) keeps two tables and
 * writes the one this says, so that its results swap with the flow tables
 * and a table drained after a swap holds the same interval as the flow
 * table drained with it, whatever the programs write meanwhile. */
static __always_inline __u32 flows_interval(void)
{
	__u32 zero = 0;
	struct table_state *ts = bpf_map_lookup_elem(&flow_state, &zero);

	return ts ? *(volatile __u32 *)&ts->active & 1 : 0;
}

/* flows_observe counts the packet p into its flow. */
static __always_inline void flows_observe(const struct pkt *p)
{
	account(p, p->key, 1);
}

/* prefix_cut keeps the first bits of a 16-byte address and zeroes the
 * rest. */
static __always_inline void prefix_cut(__u8 *addr, __u32 bits)
{
	for (__u32 i = 0; i < 16; i++) {
		__u32 have = i * 8;

		if (have + 8 <= bits)
			continue;
		addr[i] = have >= bits ? 0 : addr[i] & (__u8)(0xff << (8 - (bits - have)));
	}
}

/* flows_aggregate counts p into its aggregate at prefix length plen (1 to
 * 128): the addresses cut to the prefix (IPv4: min(plen, 32) bits of the
 * address), no ports or MACs, and the key's agg_prefix saying plen, so
 * that an aggregate never shares an entry with a flow. */
static __always_inline void flows_aggregate(const struct pkt *p, const struct flow_key *key, __u8 plen)
{
	__u32 zero = 0, bits = plen;
	struct flows_cpu *c = bpf_map_lookup_elem(&flows_cpu, &zero);
	struct flow_key *k;

	if (!c)
		return;
	k = &c->agg_key;
	*k = *key;
	if (k->eth_type == ETH_P_IP)
		bits = 96 + (bits < 32 ? bits : 32);
	if (bits > 128)
		bits = 128;
	prefix_cut(k->src_addr, bits);
	prefix_cut(k->dst_addr, bits);
	__builtin_memset(k->src_mac, 0, sizeof(k->src_mac));
	__builtin_memset(k->dst_mac, 0, sizeof(k->dst_mac));
	k->src_port = 0;
	k->dst_port = 0;
	k->agg_prefix = plen;
	account(p, k, 1);
}

/* flows_observe_ruled counts the packet p, whose flow key is key, as the
 * rule that decides it says, and counts it in the rule's stats.
 *
 * A global function: its frame is not the entry program's, which the
 * capture's chain of calls shares. Its arguments are plain memory, so the
 * key comes apart from p (a pointer read from p would be a number to the
 * verifier), as for capture_observe. */
__noinline int flows_observe_ruled(const struct pkt *p, const struct flow_key *key)
{
	__u32 slot, idx;
	const struct rule *r;
	struct rule_stats *st;
	int judged;

	if (!p || !key)
		return 0;
	judged = rules_decide(key, p->tcp_flags);
	if (judged < 0) {
		account(p, key, 1);
		return 0;
	}
	slot = RULES_SLOT(judged) & (RULES_MAX - 1);
	idx = RULES_SET(judged) * RULES_MAX + slot;
	r = rules_rule(RULES_SET(judged), slot);
	st = bpf_map_lookup_elem(&rules_stats, &idx);
	if (!r || !st) {
		account(p, key, 1);
		return 0;
	}
	st->packets++;
	st->bytes += p->len.bytes;
	switch (r->action) {
	case RULE_SKIP:
		return 0;
	case RULE_SAMPLE:
		if (st->sample_next) {
			st->sample_next--;
			return 0;
		}
		st->sample_next = r->sample_n > 1 ? r->sample_n - 1 : 0;
		st->measured_packets++;
		st->measured_bytes += p->len.bytes;
		account(p, key, r->sample_n > 1 ? r->sample_n : 1);
		return 0;
	case RULE_AGGREGATE:
		st->measured_packets++;
		st->measured_bytes += p->len.bytes;
		flows_aggregate(p, key, r->agg_prefix);
		return 0;
	default:
		st->measured_packets++;
		st->measured_bytes += p->len.bytes;
		account(p, key, 1);
	}
	return 0;
}

#endif
