// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Flow accounting at the TC/TCX hook.
 *
 * Every packet is counted exactly once: into the active flow table, or, when
 * the table refuses the insert, through the ring buffer, or, when even that is
 * full, into the lost-packets and lost-bytes counters. Nothing is sampled.
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
 * counters and the ring buffer outlive the agent, and programs attached
 * through pinned links keep counting into them while no agent runs. That is
 * why the switch is a map and not a global variable: a global lives in the
 * object's own .bss, which the next agent's programs would not share.
 */

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "counters.h"
#include "flow.h"
#include "skb.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TCX_NEXT_ACTION -1 /* TCX_NEXT, and TC_ACT_UNSPEC for cls_bpf: let the next program decide */
#define E2BIG 7
#define EEXIST 17
#define ENOMEM 12

/* Set from Go before load (volatile const: folded by the verifier). */
/* 1 when the tables are one shared hash (atomic adds) instead of per-CPU. */
volatile const __u8 cfg_shared_table = 0;

/* The two flow tables. Their type (per-CPU or shared hash) and max_entries
 * (the flow budget) are set from Go before load. */
struct flow_table {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct flow_key);     /* Key: the flow */
	__type(value, struct flow_stats); /* Value: its counters this interval */
} flows_a SEC(".maps"), flows_b SEC(".maps");

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

/* BTF only describes types that globals, maps and function signatures
 * reach; this pointer (in .bss, never used) makes the counter enum visible
 * to bpf2go -type. */
const enum counter *unused_counter __attribute__((unused));

/* Time stamps. bpf_ktime_get_ns reads the clock source, which costs about
 * 28 ns a call on this machine's TSC, a third of the program's own cost, so
 * it is read once per flow and CPU (first_seen). Every other packet reads the
 * coarse clock (the same CLOCK_MONOTONIC, updated every tick), clamped so
 * that last_seen never precedes first_seen: last_seen is exact to a tick
 * (1-10 ms, CONFIG_HZ), first_seen to the nanosecond. */
static __always_inline void stats_add(struct flow_stats *st, const struct pkt_len *len,
				      const struct pkt_meta *meta)
{
	__u64 now = bpf_ktime_get_coarse_ns();

	if (cfg_shared_table) {
		__sync_fetch_and_add(&st->packets, 1);
		__sync_fetch_and_add(&st->bytes, len->bytes);
		if (len->segments > 1) {
			__sync_fetch_and_add(&st->extra_segments, len->segments - 1);
			__sync_fetch_and_add(&st->extra_wire_bytes, len->wire_bytes - len->bytes);
		}
		/* Skip the locked OR when the flags are already there, which
		 * is every packet of an established connection but a few. */
		if ((st->tcp_flags | meta->tcp_flags) != st->tcp_flags)
			__sync_fetch_and_or(&st->tcp_flags, meta->tcp_flags);
	} else {
		/* A CPU's first packet of a flow another CPU created finds
		 * its own copy zeroed by the kernel. */
		if (st->packets == 0) {
			st->first_seen = bpf_ktime_get_ns();
			st->sampling = 1;
		}
		st->packets++;
		st->bytes += len->bytes;
		st->extra_segments += len->segments - 1;
		st->extra_wire_bytes += len->wire_bytes - len->bytes;
		st->tcp_flags |= meta->tcp_flags;
	}
	/* Plain stores: in the shared table two CPUs may race here and leave a
	 * last_seen a tick older, which is harmless. */
	st->last_seen = now > st->first_seen ? now : st->first_seen;
	st->dscp = meta->dscp;
}

/* Hand the packet's contribution to userspace through the ring buffer. */
static __always_inline void divert(const struct flow_key *key, const struct flow_stats *st,
				   long err)
{
	struct flow_event *ev;
	__u32 reason;

	if (err == -E2BIG || err == -ENOMEM) {
		reason = FLOW_EVENT_MAP_FULL;
		counter_inc(COUNTER_MAP_FULL);
	} else {
		reason = FLOW_EVENT_MAP_BUSY;
		counter_inc(COUNTER_MAP_BUSY);
	}

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

static __always_inline void account_in(void *table, const struct flow_key *key,
				       const struct pkt_len *len, const struct pkt_meta *meta)
{
	struct flow_stats *st;
	__u64 now;
	long err;

	st = bpf_map_lookup_elem(table, key);
	if (st) {
		stats_add(st, len, meta);
		return;
	}

	/* A new flow. The clock is read after the table was picked, so that
	 * every first_seen in a table is later than the moment userspace
	 * installed it (the evictor's stale filter relies on it). */
	now = bpf_ktime_get_ns();
	struct flow_stats fresh = {
		.packets = 1,
		.bytes = len->bytes,
		.extra_segments = len->segments - 1,
		.extra_wire_bytes = len->wire_bytes - len->bytes,
		.first_seen = now,
		.last_seen = now,
		.tcp_flags = meta->tcp_flags,
		.sampling = 1,
		.dscp = meta->dscp,
	};
	/* NOEXIST: in the shared table BPF_ANY would overwrite the counters
	 * of a CPU that inserted the same flow an instant ago. */
	err = bpf_map_update_elem(table, key, &fresh, BPF_NOEXIST);
	if (err == 0)
		return;
	if (err == -EEXIST) {
		st = bpf_map_lookup_elem(table, key);
		if (st) {
			stats_add(st, len, meta);
			return;
		}
	}
	divert(key, &fresh, err);
}

static __always_inline void account(const struct flow_key *key, const struct pkt_len *len,
				    const struct pkt_meta *meta)
{
	__u32 zero = 0;
	struct table_state *ts = bpf_map_lookup_elem(&flow_state, &zero);

	/* Two call sites, each with a map known to the verifier: lookups
	 * become direct calls (or inlined), where a map taken from an
	 * array-of-maps would cost an indirect call per packet. (The lookup
	 * above is inlined too: an array with a constant key.) Userspace
	 * rewrites the whole value at a swap; only the low bit of active
	 * changes, so even a torn read picks one table or the other. */
	if (ts && (*(volatile __u32 *)&ts->active & 1))
		account_in(&flows_b, key, len, meta);
	else
		account_in(&flows_a, key, len, meta);
}

static __always_inline int observe(struct __sk_buff *skb, __u8 direction)
{
	struct flow_key key;
	struct pkt_meta meta;
	struct pkt_len len;

	parse_skb(skb, &key, &meta);
	pkt_len_of(skb, &meta, direction, &len);
	key.ifindex = skb->ifindex;
	key.direction = direction;
	account(&key, &len, &meta);
	return TCX_NEXT_ACTION;
}

SEC("tc")
int flows_ingress(struct __sk_buff *skb)
{
	return observe(skb, DIRECTION_INGRESS);
}

SEC("tc")
int flows_egress(struct __sk_buff *skb)
{
	return observe(skb, DIRECTION_EGRESS);
}
