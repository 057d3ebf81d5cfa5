/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The flow key: the fields of a packet every capability keys on. The
 * parser fills it (struct pkt embeds one); the flows capability's counters
 * and records are in flows/flows.h.
 *
 * Shared with Go through `bpf2go -type`; keep explicit padding so that the
 * layout is the same on every architecture and no hole is ever hashed with
 * garbage in it.
 */
#ifndef LOUPE_FLOW_H
#define LOUPE_FLOW_H

#include "vmlinux.h"

enum direction {
	DIRECTION_INGRESS = 0,
	DIRECTION_EGRESS = 1,
};

/* One flow: 60 bytes, the last explicit padding (zeroed: it is hashed).
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
	/* 0: a flow; P (1..128): an aggregate of the flows between two /P
	 * prefixes, without ports or MACs (a rule's `aggregate /P`, flows.h). */
	__u8 agg_prefix;
	__u8 pad;
};

#endif
