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
#include "tunnel.h"

/* How much of a non-linear packet to pull in when headers cross the linear
 * area: Ethernet, two VLAN tags, IPv6 with extension headers, TCP; or the
 * same inside a tunnel (VXLAN over IPv6 and TCP over IPv6 inside take
 * 14 + 40 + 8 + 8 + 14 + 40 + 60 = 184 bytes). */
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
	case PARSE_TRUNCATED_TUNNEL:
		counter_inc(COUNTER_TUNNEL_TRUNCATED);
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
		if (p->flags & PARSE_F_TUNNEL_BAD)
			counter_inc(COUNTER_TUNNEL_BAD_HEADER);
		if (p->flags & PARSE_F_TUNNEL_DEPTH)
			counter_inc(COUNTER_TUNNEL_DEPTH);
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

/* pkt_pull pulls the first PULL_LEN bytes of skb (all of a shorter one)
 * into the linear area, so that direct packet access reaches headers that
 * lay beyond it. Rare (drivers put headers in the linear part), and it may
 * unclone the skb, so only done when a parse ran out of linear data. */
static __always_inline long pkt_pull(struct __sk_buff *skb)
{
	__u32 want = skb->len < PULL_LEN ? skb->len : PULL_LEN;

	counter_inc(COUNTER_PULLED);
	return bpf_skb_pull_data(skb, want);
}

/* tunnel_decap is the parse's tunnel step (lib/tunnel.h): it takes the
 * packet in skb out of the tunnel of type whose header starts at the
 * outer offsets' payload, pulling the headers into the linear area if the
 * inner ones run past it. outer and meta are the rest of what the parse
 * knows of the packet: its struct pkt_offsets as 8 bytes, and its tunnel
 * type, DSCP and flags (bits 0-7, 8-15, 16-23). It leaves key as the
 * packet's key (the inner packet's if it was taken out) and the rest of
 * struct pkt in the tunnel scratch, whatever the outcome, so that the
 * caller copies it without a branch per outcome: the verifier then walks
 * what follows the step once, not once for each of its outcomes. */
__noinline int tunnel_decap(struct __sk_buff *skb, struct flow_key *key, __u64 outer, __u32 meta)
{
	struct tunnel_scratch *s = tunnel_scratch_get();
	struct pkt_offsets off;
	__u32 type = meta & 0xff, linear;
	int res;

	if (!skb || !key || !s)
		return 0;
	__builtin_memcpy(&off, &outer, sizeof(off));
	res = tunnel_header(skb, key, off.payload, type, s);
	if (res == DECAP_TRUNCATED || res == PARSE_TRUNCATED_L4) {
		/* The inner headers may run past the linear area where the
		 * outer ones did not: pull, unless the parse did already, and
		 * read the tunnel again (key is still the outer packet's). */
		linear = skb->data_end - skb->data;
		if (skb->len > linear && linear < PULL_LEN && pkt_pull(skb) == 0)
			res = tunnel_header(skb, key, off.payload, type, s);
	}
	if (res >= 0) {
		*key = s->key;
		s->result = res;
		s->tunnel = type;
		s->flags |= (meta >> 16) & 0xff;
		return 0;
	}
	s->off = off;
	s->tcp_seq = 0; /* the outer transport is not TCP */
	s->tcp_ack = 0;
	s->tcp_flags = 0;
	s->result = res == DECAP_TRUNCATED ? PARSE_TRUNCATED_TUNNEL : PARSE_OK;
	s->inner = 0;
	s->dscp = (meta >> 8) & 0xff;
	s->flags = ((meta >> 16) & 0xff) | (res == DECAP_BAD ? PARSE_F_TUNNEL_BAD : 0);
	s->tunnel = TUNNEL_NONE;
	return 0;
}

/* pkt_decap runs the tunnel step on p, whose parse found a tunnel's
 * transport (p->result: PARSE_ENCAP + its type), and takes its outcome into
 * p: the inner packet's parse, or the outer packet's as it was, with the
 * tunnel's anomaly and a final result. */
static __always_inline void pkt_decap(struct __sk_buff *skb, struct pkt *p)
{
	const struct tunnel_scratch *s;
	__u64 outer;

	__builtin_memcpy(&outer, &p->off, sizeof(outer));
	tunnel_decap(skb, p->key, outer, (p->result - PARSE_ENCAP) | (__u32)p->dscp << 8 | (__u32)p->flags << 16);
	s = tunnel_scratch_get();
	if (!s) {
		p->result = PARSE_OK; /* never: a per-CPU array's one entry */
		return;
	}
	p->off = s->off;
	p->tcp_seq = s->tcp_seq;
	p->tcp_ack = s->tcp_ack;
	p->tcp_flags = s->tcp_flags;
	p->result = s->result;
	p->inner = s->inner;
	p->dscp = s->dscp;
	p->flags = s->flags;
	p->tunnel = s->tunnel;
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
	if (p->result != PARSE_OK) {
		/* Headers that run past the linear area: pull them in and
		 * parse again. */
		if (p->result < PARSE_ENCAP && skb->len > (__u32)(end - data) && pkt_pull(skb) == 0) {
			pkt_init(skb, key, p);
			data = (void *)(long)skb->data;
			end = (void *)(long)skb->data_end;
			p->result = parse_packet(data, end, p);
		}
		if (p->result >= PARSE_ENCAP)
			pkt_decap(skb, p);
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
