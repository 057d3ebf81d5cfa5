/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The one packet parser: Ethernet (+ up to two VLAN tags), IPv4 (options),
 * IPv6 (extension headers, bounded), TCP, UDP, UDP-Lite, SCTP, ICMP, ICMPv6.
 *
 * It reads the packet through direct packet access (skb->data..data_end),
 * which is the cheapest way to read headers at TC. When a header lies past
 * the linear area the parser reports which layer was cut short; the caller
 * decides whether pulling more data in is worth a second pass.
 *
 * The parser only fills what it could read: a frame cut short in its TCP
 * header still yields its addresses, so the packet is counted under the best
 * key available instead of being dropped from the totals.
 */
#ifndef LOUPE_PARSE_H
#define LOUPE_PARSE_H

#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "flow.h"
#include "wire.h"

/* 802.1Q plus 802.1ad is QinQ; more tags than that are not walked. */
#define MAX_VLAN_TAGS 2
/* Extension headers walked before giving up. RFC 8200 recommends an order
 * with at most 6 kinds (destination options twice); 8 leaves room while
 * bounding the verifier's work. */
#define MAX_IPV6_EXT_HDRS 8

enum parse_result {
	PARSE_OK = 0,
	PARSE_TRUNCATED_L2,
	PARSE_TRUNCATED_L3,
	PARSE_TRUNCATED_L4,
};

/* Anomalies seen on the way, counted by the caller once the parse is final. */
enum parse_flag {
	PARSE_F_BAD_IHL = 1 << 0,
	PARSE_F_VLAN_DEPTH = 1 << 1,
	PARSE_F_EXT_DEPTH = 1 << 2,
	PARSE_F_FRAGMENT = 1 << 3, /* non-first fragment: no transport header */
};

/* Per-packet facts that are not part of the flow key. */
struct pkt_meta {
	__u32 tcp_flags;
	__u8 dscp;
	__u8 flags; /* enum parse_flag */
};

static __always_inline int parse_l4(void *pos, void *end, __u8 proto, struct flow_key *key,
				    struct pkt_meta *meta)
{
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcp_wire *tcp = pos;

		if ((void *)(tcp + 1) > end)
			return PARSE_TRUNCATED_L4;
		key->src_port = bpf_ntohs(tcp->src);
		key->dst_port = bpf_ntohs(tcp->dst);
		meta->tcp_flags = tcp->flags | ((__u32)(tcp->doff_ae & 1) << 8);
		return PARSE_OK;
	}
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
	case IPPROTO_SCTP: {
		struct ports_wire *ports = pos;

		if ((void *)(ports + 1) > end)
			return PARSE_TRUNCATED_L4;
		key->src_port = bpf_ntohs(ports->src);
		key->dst_port = bpf_ntohs(ports->dst);
		return PARSE_OK;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		struct icmp_wire *icmp = pos;

		/* ICMP inside IPv6 or ICMPv6 inside IPv4 is not what it claims:
		 * leave the ports zero rather than read a type from garbage. */
		if ((proto == IPPROTO_ICMP) != (key->eth_type == ETH_P_IP))
			return PARSE_OK;
		if ((void *)(icmp + 1) > end)
			return PARSE_TRUNCATED_L4;
		key->src_port = icmp->type;
		key->dst_port = icmp->code;
		return PARSE_OK;
	}
	}
	return PARSE_OK;
}

static __always_inline int parse_ipv4(void *pos, void *end, struct flow_key *key,
				      struct pkt_meta *meta)
{
	struct ipv4_wire *ip = pos;
	__u32 ihl;

	if ((void *)(ip + 1) > end)
		return PARSE_TRUNCATED_L3;

	/* ::ffff:a.b.c.d */
	key->src_addr[10] = 0xff;
	key->src_addr[11] = 0xff;
	key->dst_addr[10] = 0xff;
	key->dst_addr[11] = 0xff;
	__builtin_memcpy(&key->src_addr[12], &ip->saddr, 4);
	__builtin_memcpy(&key->dst_addr[12], &ip->daddr, 4);
	key->proto = ip->protocol;
	meta->dscp = ip->tos >> 2;

	ihl = ip->version_ihl & 0x0F;
	if (ihl < 5) {
		meta->flags |= PARSE_F_BAD_IHL;
		return PARSE_OK;
	}
	if (bpf_ntohs(ip->frag_off) & IPV4_OFFSET_MASK) {
		/* A later fragment carries no transport header: its first bytes
		 * are payload, and reading ports there would misattribute it. */
		meta->flags |= PARSE_F_FRAGMENT;
		return PARSE_OK;
	}
	return parse_l4(pos + ihl * 4, end, ip->protocol, key, meta);
}

static __always_inline int parse_ipv6(void *pos, void *end, struct flow_key *key,
				      struct pkt_meta *meta)
{
	struct ipv6_wire *ip6 = pos;
	__u8 nexthdr;

	if ((void *)(ip6 + 1) > end)
		return PARSE_TRUNCATED_L3;

	__builtin_memcpy(key->src_addr, ip6->saddr, 16);
	__builtin_memcpy(key->dst_addr, ip6->daddr, 16);
	/* Traffic class straddles the first two bytes; DSCP is its top 6 bits. */
	meta->dscp = ((ip6->vtc_flow[0] & 0x0F) << 2) | (ip6->vtc_flow[1] >> 6);
	nexthdr = ip6->nexthdr;
	pos = ip6 + 1;

#pragma unroll
	for (int i = 0; i < MAX_IPV6_EXT_HDRS; i++) {
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
		case IPPROTO_MH: {
			struct ipv6_ext_wire *ext = pos;

			if ((void *)(ext + 1) > end)
				goto truncated;
			nexthdr = ext->nexthdr;
			pos += ((__u32)ext->hdrlen + 1) * 8;
			continue;
		}
		case IPPROTO_AH: {
			struct ipv6_ext_wire *ext = pos;

			if ((void *)(ext + 1) > end)
				goto truncated;
			nexthdr = ext->nexthdr;
			pos += ((__u32)ext->hdrlen + 2) * 4;
			continue;
		}
		case IPPROTO_FRAGMENT: {
			struct ipv6_frag_wire *frag = pos;

			if ((void *)(frag + 1) > end)
				goto truncated;
			nexthdr = frag->nexthdr;
			if (bpf_ntohs(frag->frag_off) & IPV6_FRAG_OFFSET_MASK) {
				key->proto = nexthdr;
				meta->flags |= PARSE_F_FRAGMENT;
				return PARSE_OK;
			}
			pos = frag + 1;
			continue;
		}
		}
		key->proto = nexthdr;
		return parse_l4(pos, end, nexthdr, key, meta);
	}
	/* Still inside the extension chain: count the flow under its L3 key,
	 * with the header we stopped at as protocol. */
	key->proto = nexthdr;
	meta->flags |= PARSE_F_EXT_DEPTH;
	return PARSE_OK;

truncated:
	key->proto = nexthdr;
	return PARSE_TRUNCATED_L3;
}

/* parse_packet fills key (but ifindex and direction) and meta from the frame
 * at data..end. key and meta must be zeroed by the caller. */
static __always_inline int parse_packet(void *data, void *end, struct flow_key *key,
					struct pkt_meta *meta)
{
	struct eth_wire *eth = data;
	void *pos;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return PARSE_TRUNCATED_L2;
	__builtin_memcpy(key->src_mac, eth->src, ETH_ALEN);
	__builtin_memcpy(key->dst_mac, eth->dst, ETH_ALEN);
	proto = eth->proto;
	pos = eth + 1;

	/* Tags still in the frame (the stack usually moves the outer one into
	 * skb->vlan_tci before TC, but not always, and never in test runs). */
#pragma unroll
	for (int i = 0; i < MAX_VLAN_TAGS; i++) {
		struct vlan_wire *vlan = pos;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(vlan + 1) > end)
			return PARSE_TRUNCATED_L2;
		proto = vlan->proto;
		pos = vlan + 1;
	}
	key->eth_type = bpf_ntohs(proto);

	switch (proto) {
	case bpf_htons(ETH_P_IP):
		return parse_ipv4(pos, end, key, meta);
	case bpf_htons(ETH_P_IPV6):
		return parse_ipv6(pos, end, key, meta);
	case bpf_htons(ETH_P_8021Q):
	case bpf_htons(ETH_P_8021AD):
		meta->flags |= PARSE_F_VLAN_DEPTH;
		return PARSE_OK;
	}
	return PARSE_OK;
}

#endif
