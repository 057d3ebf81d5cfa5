/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A packet at the TC hook, before any capability looks at it: parsed once
 * (headers that lie beyond the linear area pulled in), its anomalies counted,
 * and its lengths worked out: the buffer's at the hook, and what the buffer
 * stands for on the wire.
 *
 * Everything here reads __sk_buff fields, which the verifier rewrites into
 * plain loads: no helper call, but the one pull of a non-linear packet.
 */
#ifndef LOUPE_SKB_H
#define LOUPE_SKB_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "counters.h"
#include "flow.h"
#include "parse.h"

/* How much of a non-linear packet to pull in when headers cross the linear
 * area: Ethernet, two VLAN tags, IPv6 with extension headers, TCP. */
#define PULL_LEN 256

/* parse_init zeroes key and meta and enters what the kernel already took out
 * of the frame: the outermost VLAN tag, which the stack moves into the skb's
 * metadata before TC ingress (skb_vlan_untag), and which a VLAN device with
 * transmit offload leaves there on egress. */
static __always_inline void parse_init(struct __sk_buff *skb, struct flow_key *key,
				       struct pkt_meta *meta)
{
	__builtin_memset(key, 0, sizeof(*key));
	__builtin_memset(meta, 0, sizeof(*meta));
	if (skb->vlan_present) {
		key->vlan_id = skb->vlan_tci & VLAN_VID_MASK;
		meta->vlan_tags = 1;
		meta->vlan_meta = 1;
	}
}

/* count_anomalies maps a final parse result and its flags to the datapath
 * counters. */
static __always_inline void count_anomalies(int res, const struct pkt_meta *meta)
{
	switch (res) {
	case PARSE_TRUNCATED_L2:
		counter_inc(COUNTER_TRUNCATED_L2);
		break;
	case PARSE_TRUNCATED_L3:
		counter_inc(COUNTER_TRUNCATED_L3);
		break;
	case PARSE_TRUNCATED_L4:
		counter_inc(COUNTER_TRUNCATED_L4);
		break;
	}
	if (meta->flags) {
		if (meta->flags & PARSE_F_BAD_IHL)
			counter_inc(COUNTER_BAD_IPV4_IHL);
		if (meta->flags & PARSE_F_VLAN_DEPTH)
			counter_inc(COUNTER_VLAN_DEPTH);
		if (meta->flags & PARSE_F_EXT_DEPTH)
			counter_inc(COUNTER_IPV6_EXT_DEPTH);
		if (meta->flags & PARSE_F_FRAGMENT)
			counter_inc(COUNTER_FRAGMENTS);
	}
}

/* parse_skb fills key (but ifindex and direction) and meta from skb, and
 * counts what was odd about it. It returns the parse result (enum
 * parse_result): whatever it is, key holds what could be read. */
static __always_inline int parse_skb(struct __sk_buff *skb, struct flow_key *key,
				     struct pkt_meta *meta)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	int res;

	parse_init(skb, key, meta);
	res = parse_packet(data, end, key, meta);
	if (res != PARSE_OK && skb->len > (__u32)(end - data)) {
		/* The headers run past the linear area: pull them in and parse
		 * again. Rare (drivers put headers in the linear part), and it
		 * may unclone the skb, so only done when needed. */
		__u32 want = skb->len < PULL_LEN ? skb->len : PULL_LEN;

		counter_inc(COUNTER_PULLED);
		if (bpf_skb_pull_data(skb, want) == 0) {
			parse_init(skb, key, meta);
			data = (void *)(long)skb->data;
			end = (void *)(long)skb->data_end;
			res = parse_packet(data, end, key, meta);
		}
	}
	count_anomalies(res, meta);
	return res;
}

/* What one buffer at the hook counts for. */
struct pkt_len {
	__u64 bytes;      /* the buffer's L2 length, with a tag stripped on ingress */
	__u64 segments;   /* the wire packets it stands for */
	__u64 wire_bytes; /* their length on the wire: every segment has the headers */
};

/* pkt_len_of works out the lengths of the buffer skb, parsed into meta, at
 * the hook of the given direction.
 *
 * A GSO buffer (a TCP super-packet before the NIC or the stack segments it, or
 * segments GRO merged on receive) counts as gso_segs segments, each with the
 * headers up to meta->off.payload: bytes + (gso_segs - 1) * headers, the sum
 * of the segments' lengths whatever the last one's size.
 *
 * A tag in the skb's metadata is counted on ingress only: there the stack
 * stripped it from the frame the interface received and counted. On egress it
 * is not in the frame yet; a veth with transmit VLAN offload (the default)
 * sends it in metadata and counts the frame without it (see README, "What the
 * hook sees"). */
static __always_inline void pkt_len_of(struct __sk_buff *skb, const struct pkt_meta *meta,
				       __u8 direction, struct pkt_len *out)
{
	__u32 tag = direction == DIRECTION_INGRESS && meta->vlan_meta ? VLAN_HLEN : 0;
	__u32 len = skb->len;
	__u32 segs = skb->gso_segs;

	if (segs == 0) {
		/* A GSO buffer from an untrusted source (SKB_GSO_DODGY: a tap
		 * or virtio device with a vnet header) carries only gso_size
		 * until the stack segments it; count what it will become. */
		__u32 size = skb->gso_size;

		segs = 1;
		if (size && len > meta->off.payload)
			segs = (len - meta->off.payload + size - 1) / size;
	}
	out->bytes = len + tag;
	out->segments = segs;
	out->wire_bytes = out->bytes + (__u64)(segs - 1) * (meta->off.payload + tag);
}

#endif
