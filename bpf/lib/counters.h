/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Datapath counters: every failure path increments one of these.
 *
 * A per-CPU array, so that counting never takes a lock or bounces a cache
 * line between CPUs; userspace sums the copies. Each program that includes
 * this header gets its own `counters` map.
 */
#ifndef LOUPE_COUNTERS_H
#define LOUPE_COUNTERS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

enum counter {
	COUNTER_MAP_FULL = 0,      /* flow table full: record sent through the ring buffer */
	COUNTER_MAP_BUSY,          /* flow table insert failed otherwise: ring buffer */
	COUNTER_RINGBUF_FULL,      /* ring-buffer reservation failed: packet lost... */
	COUNTER_LOST_PACKETS,      /* ...these many packets */
	COUNTER_LOST_BYTES,        /* ...and bytes, so totals stay exact */
	COUNTER_TRUNCATED_L2,      /* frame shorter than its Ethernet/VLAN headers */
	COUNTER_TRUNCATED_L3,      /* IP header cut short */
	COUNTER_TRUNCATED_L4,      /* transport header cut short */
	COUNTER_BAD_IPV4_IHL,      /* IPv4 header length below 20 bytes */
	COUNTER_VLAN_DEPTH,        /* more VLAN tags than the parser walks */
	COUNTER_IPV6_EXT_DEPTH,    /* more IPv6 extension headers than the parser walks */
	COUNTER_FRAGMENTS,         /* non-first fragments, counted under their L3 flow */
	COUNTER_PULLED,            /* headers beyond the linear area: skb data pulled */
	COUNTER_SPILLED_PACKETS,   /* flow table full: packet counted into the sketch (sketch mode) */
	COUNTER_SPILLED_BYTES,     /* ...and its bytes */
	COUNTER_TUNNEL_TRUNCATED,  /* tunnel header or inner L2/L3 header cut short: keyed by the outer headers */
	COUNTER_TUNNEL_BAD_HEADER, /* tunnel header against its RFC: keyed by the outer headers */
	COUNTER_TUNNEL_DEPTH,      /* a tunnel inside a tunnel: keyed by the first inner packet */
	COUNTER_TUNNEL_TABLE_FULL, /* a tunnelled flow's outer side not kept: side table full */
	COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);   /* Key: enum counter */
	__type(value, __u64); /* Value: events (or bytes) on this CPU */
} counters SEC(".maps");

static __always_inline void counter_add(enum counter c, __u64 n)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);

	if (v)
		*v += n;
}

static __always_inline void counter_inc(enum counter c)
{
	counter_add(c, 1);
}

#endif
