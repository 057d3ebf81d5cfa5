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

/* One flow: 56 bytes, no padding. Addresses are in network byte order, IPv4
 * stored IPv4-mapped (::ffff:a.b.c.d). Ports and eth_type are in host order.
 * ICMP and ICMPv6 put the type in src_port and the code in dst_port. */
struct flow_key {
	__u8 src_addr[16];
	__u8 dst_addr[16];
	__u8 src_mac[6];
	__u8 dst_mac[6];
	__u32 ifindex;
	__u16 eth_type;
	__u16 src_port;
	__u16 dst_port;
	__u8 proto;
	__u8 direction;
};

/* Counters of one flow over one eviction interval: 40 bytes.
 * In the per-CPU table each CPU owns a copy; in the shared table packets,
 * bytes and tcp_flags are updated with atomic instructions. tcp_flags is 32
 * bits wide because BPF atomics work on 32 and 64-bit words only. */
struct flow_stats {
	__u64 packets;
	__u64 bytes;      /* L2 length as seen at the hook (skb->len) */
	__u64 first_seen; /* bpf_ktime_get_ns() */
	__u64 last_seen;
	__u32 tcp_flags; /* union of the TCP flags byte, AE/NS in bit 8 */
	__u16 sampling;  /* 1 = every packet */
	__u8 dscp;       /* of the last packet */
	__u8 pad;
};

/* Why a packet's flow went through the ring buffer instead of the table. */
enum flow_event_reason {
	FLOW_EVENT_MAP_FULL = 1, /* the table holds flow_budget flows */
	FLOW_EVENT_MAP_BUSY = 2, /* the insert failed for another reason (bucket lock) */
};

/* Ring-buffer record: one packet's contribution to its flow. */
struct flow_event {
	struct flow_key key;
	struct flow_stats stats;
	__u32 reason; /* enum flow_event_reason */
	__s32 err;    /* the failed update's error */
};

#endif
