/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The flow key, its counters, and the ring-buffer record.
 *
 * These structs are shared with Go through `bpf2go -type`; keep explicit
 * padding so that the layout is the same on every architecture and no hole is
 * ever hashed with garbage in it.
 */
#ifndef LOUPE_FLOW_H
#define LOUPE_FLOW_H

#include "vmlinux.h"

enum direction {
	DIRECTION_INGRESS = 0,
	DIRECTION_EGRESS = 1,
};

/* One flow: 60 bytes, the last two explicit padding (zeroed: they are hashed).
 * Addresses are in network byte order, IPv4 stored IPv4-mapped
 * (::ffff:a.b.c.d). Ports, eth_type and vlan_id are in host order. ICMP and
 * ICMPv6 put the type in src_port and the code in dst_port. vlan_id is the
 * outermost tag's VLAN ID (0: untagged), whether the tag is still in the frame
 * or the kernel moved it into the skb's metadata. */
struct flow_key {
	__u8 src_addr[16];
	__u8 dst_addr[16];
	__u8 src_mac[6];
	__u8 dst_mac[6];
	__u32 ifindex;
	__u16 eth_type;
	__u16 src_port;
	__u16 dst_port;
	__u16 vlan_id;
	__u8 proto;
	__u8 direction;
	__u8 pad[2];
};

/* Counters of one flow over one eviction interval: 56 bytes.
 * In the per-CPU table each CPU owns a copy; in the shared table the counters
 * and tcp_flags are updated with atomic instructions. tcp_flags is 32 bits
 * wide because BPF atomics work on 32 and 64-bit words only.
 *
 * packets and bytes count the buffers that crossed the hook. A GSO/GRO
 * super-packet is one buffer but several segments on the wire, each with its
 * own copy of the headers: the flow's segments are packets + extra_segments,
 * its wire bytes bytes + extra_wire_bytes. Only what GSO adds is kept, so that
 * a packet that is not GSO (every packet of most flows) costs the shared table
 * no more atomic instructions than before these counters existed. */
struct flow_stats {
	__u64 packets;
	__u64 bytes;            /* L2 length at the hook (skb->len), plus a VLAN tag the kernel stripped on ingress */
	__u64 extra_segments;   /* gso_segs - 1 of every GSO buffer */
	__u64 extra_wire_bytes; /* the headers those segments repeat */
	__u64 first_seen;       /* bpf_ktime_get_ns() */
	__u64 last_seen;
	__u32 tcp_flags; /* union of the TCP flags byte, AE/NS in bit 8 */
	__u16 sampling;  /* 1 = every packet */
	__u8 dscp;       /* of the last packet */
	__u8 pad;
};

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
};

/* Ring-buffer record: one packet's contribution to its flow. */
struct flow_event {
	struct flow_key key;
	__u32 pad; /* flow_stats is 8-byte aligned */
	struct flow_stats stats;
	__u32 reason; /* enum flow_event_reason */
	__s32 err;    /* the failed update's error */
};

#endif
