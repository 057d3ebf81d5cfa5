/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A packet at the TC hook, before any capability looks at it: parsed once
 * (headers that lie beyond the linear area pulled in), its anomalies counted,
 * and its lengths worked out: the buffer's at the hook, and what the buffer
 * stands for on the wire. The result is one struct pkt (parse.h) that the
 * entry program hands to every enabled capability.
 *
 * Everything here reads __sk_buff fields, which the verifier rewrites into
 * plain loads: no helper call, but the one pull of a non-linear packet.
 */
#ifndef LOUPE_PKT_H
#define LOUPE_PKT_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "counters.h"
#include "flow.h"
#include "parse.h"

/* How much of a non-linear packet to pull in when headers cross the linear
 * area: Ethernet, two VLAN tags, IPv6 with extension headers, TCP. */
#define PULL_LEN 256

/* pkt_init zeroes key and p, points p at key, and enters what the kernel already took out of the
 * frame: the outermost VLAN tag, which the stack moves into the skb's
 * metadata before TC ingress (skb_vlan_untag), and which a VLAN device with
 * transmit offload leaves there on egress. */
static __always_inline void pkt_init(struct __sk_buff *skb, struct flow_key *key, struct pkt *p)
{
	__builtin_memset(key, 0, sizeof(*key));
	__builtin_memset(p, 0, sizeof(*p));
	p->key = key;
	if (skb->vlan_present) {
		p->key->vlan_id = skb->vlan_tci & VLAN_VID_MASK;
		p->vlan_tags = 1;
		p->vlan_meta = 1;
	}
}

/* count_anomalies maps a final parse result and its flags to the datapath
 * counters. */
static __always_inline void count_anomalies(const struct pkt *p)
{
	switch (p->result) {
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
	if (p->flags) {
		if (p->flags & PARSE_F_BAD_IHL)
			counter_inc(COUNTER_BAD_IPV4_IHL);
		if (p->flags & PARSE_F_VLAN_DEPTH)
			counter_inc(COUNTER_VLAN_DEPTH);
		if (p->flags & PARSE_F_EXT_DEPTH)
			counter_inc(COUNTER_IPV6_EXT_DEPTH);
		if (p->flags & PARSE_F_FRAGMENT)
			counter_inc(COUNTER_FRAGMENTS);
	}
}

/* pkt_len_of works out the lengths of the buffer skb, parsed into p, at the
 * hook of p's direction.
 *
 * A GSO buffer (a TCP super-packet before the NIC or the stack segments it, or
 * segments GRO merged on receive) counts as gso_segs segments, each with the
 * headers up to p->off.payload: bytes + (gso_segs - 1) * headers, the sum of
 * the segments' lengths whatever the last one's size.
 *
 * A tag in the skb's metadata is counted on ingress only: there the stack
 * stripped it from the frame the interface received and counted. On egress it
 * is not in the frame yet; a veth with transmit VLAN offload (the default)
 * sends it in metadata and counts the frame without it (see README, "What the
 * hook sees"). */
static __always_inline void pkt_len_of(struct __sk_buff *skb, struct pkt *p)
{
	__u32 tag = p->key->direction == DIRECTION_INGRESS && p->vlan_meta ? VLAN_HLEN : 0;
	__u32 len = skb->len;
	__u32 segs = skb->gso_segs;

	if (segs == 0) {
		/* A GSO buffer from an untrusted source (SKB_GSO_DODGY: a tap
		 * or virtio device with a vnet header) carries only gso_size
		 * until the stack segments it; count what it will become. */
		__u32 size = skb->gso_size;

		segs = 1;
		if (size && len > p->off.payload)
			segs = (len - p->off.payload + size - 1) / size;
	}
	p->len.bytes = len + tag;
	p->len.segments = segs;
	p->len.wire_bytes = p->len.bytes + (__u64)(segs - 1) * (p->off.payload + tag);
}

/* pkt_parse fills p, and key through it, from skb at the hook of the given
 * direction: the one parse of the packet, whatever the capabilities.
 * Whatever p->result says, p holds what could be read, and the packet's
 * anomalies are counted. */
static __always_inline void pkt_parse(struct __sk_buff *skb, __u8 direction, struct flow_key *key,
				      struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;

	pkt_init(skb, key, p);
	p->result = parse_packet(data, end, p);
	if (p->result != PARSE_OK && skb->len > (__u32)(end - data)) {
		/* The headers run past the linear area: pull them in and parse
		 * again. Rare (drivers put headers in the linear part), and it
		 * may unclone the skb, so only done when needed. */
		__u32 want = skb->len < PULL_LEN ? skb->len : PULL_LEN;

		counter_inc(COUNTER_PULLED);
		if (bpf_skb_pull_data(skb, want) == 0) {
			pkt_init(skb, key, p);
			data = (void *)(long)skb->data;
			end = (void *)(long)skb->data_end;
			p->result = parse_packet(data, end, p);
		}
	}
	count_anomalies(p);
	p->key->ifindex = skb->ifindex;
	p->key->direction = direction;
	pkt_len_of(skb, p);
}

/* pkt_payload_len returns the bytes of transport payload: up to the end of
 * the IP packet, not of the frame. A frame under Ethernet's 60 bytes was
 * padded by its sender, and at TC ingress the padding is still there (ip_rcv
 * trims it later): a pure ACK would seem to carry 6 bytes of payload (the
 * capture would scan and keep it, the handshake would not know it for the
 * handshake's last ACK). An IP length of 0 (BIG TCP) or past the frame
 * leaves the frame's end. eth_type comes apart from p: in a global function
 * p->key is a number to the verifier, not a pointer. */
static __always_inline __u32 pkt_payload_len(const struct __sk_buff *skb, const struct pkt *p, __u16 eth_type)
{
	__u32 end = skb->len, ip = 0;

	if (eth_type == ETH_P_IP)
		ip = p->off.l3 + (__u32)p->off.ip_len; /* tot_len: the header included */
	else if (eth_type == ETH_P_IPV6)
		ip = p->off.l3 + 40 + (__u32)p->off.ip_len; /* payload_len: after the fixed header */
	if (p->off.ip_len && ip < end)
		end = ip;
	return end > p->off.payload ? end - p->off.payload : 0;
}

#endif
