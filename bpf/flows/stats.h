/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A flow's counters over one eviction interval (flows.h), apart so that
 * the per-CPU slot tables (slots.h) can hold them beside the key. */
#ifndef LOUPE_FLOWS_STATS_H
#define LOUPE_FLOWS_STATS_H

#include "vmlinux.h"

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

#endif
