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
 *
 * Besides the flow key it records where each header starts (struct
 * pkt_offsets), so that what needs the header length (a GSO packet's wire
 * bytes) or the payload never walks the headers a second time.
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

/* Where the headers start, in bytes from the frame's first byte (the MAC
 * header, skb->data at TC). l3 is where the Ethernet and VLAN headers the
 * parser walked end. l4 is where the IP headers end, and 0 when the parser
 * did not get past them (not IP, a bad IHL, a later fragment, an extension
 * chain too long, a cut). payload is where the last header the parser read
 * ends: the transport payload for TCP (its data offset), UDP, UDP-Lite, SCTP
 * (common header), ICMP and ICMPv6 (8 bytes); l4 for other transports; the
 * end of the IP headers for later fragments and extension chains too long to
 * walk; l3 for frames that are not IP; as far as the parser got in a frame
 * cut short. Every segment of a GSO packet repeats the headers up to payload,
 * and a reader of the payload starts there without walking the headers again. */
struct pkt_offsets {
	__u16 l3;
	__u16 l4;
	__u16 payload;
	__u16 pad;
};

/* Per-packet facts that are not part of the flow key. */
struct pkt_meta {
	struct pkt_offsets off;
	__u32 tcp_flags;
	__u8 dscp;
	__u8 flags; /* enum parse_flag */
	/* VLAN tags of the frame: those still in it, plus the outermost one when
	 * the kernel holds it in the skb's metadata (vlan_meta; set by the
	 * caller before parsing, see parse_skb). */
	__u8 vlan_tags;
	__u8 vlan_meta;
};

/* Transport header lengths the parser does not read from the header. */
#define UDP_HLEN 8
#define SCTP_COMMON_HLEN 12
#define ICMP_HLEN 8 /* type, code, checksum and the 4 bytes every message has next */

/* parse_l4 reads the transport header at pos, offset l4 into the frame. */
static __always_inline int parse_l4(void *pos, void *end, __u16 l4, __u8 proto,
				    struct flow_key *key, struct pkt_meta *meta)
{
	meta->off.l4 = l4;
	meta->off.payload = l4;
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcp_wire *tcp = pos;
		__u16 doff;

		if ((void *)(tcp + 1) > end)
			return PARSE_TRUNCATED_L4;
		key->src_port = bpf_ntohs(tcp->src);
		key->dst_port = bpf_ntohs(tcp->dst);
		meta->tcp_flags = tcp->flags | ((__u32)(tcp->doff_ae & 1) << 8);
		/* Options included; a data offset below the fixed header is
		 * bogus, and only the fixed header was read. */
		doff = (tcp->doff_ae >> 4) * 4;
		meta->off.payload = l4 + (doff > sizeof(*tcp) ? doff : sizeof(*tcp));
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
		meta->off.payload = l4 + (proto == IPPROTO_SCTP ? SCTP_COMMON_HLEN : UDP_HLEN);
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
		meta->off.payload = l4 + ICMP_HLEN;
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
		meta->off.payload = meta->off.l3 + sizeof(*ip);
		return PARSE_OK;
	}
	if (bpf_ntohs(ip->frag_off) & IPV4_OFFSET_MASK) {
		/* A later fragment carries no transport header: its first bytes
		 * are payload, and reading ports there would misattribute it. */
		meta->flags |= PARSE_F_FRAGMENT;
		meta->off.payload = meta->off.l3 + ihl * 4;
		return PARSE_OK;
	}
	return parse_l4(pos + ihl * 4, end, meta->off.l3 + ihl * 4, ip->protocol, key, meta);
}

static __always_inline int parse_ipv6(void *pos, void *end, struct flow_key *key,
				      struct pkt_meta *meta)
{
	struct ipv6_wire *ip6 = pos;
	__u32 off, len;
	__u8 nexthdr;

	if ((void *)(ip6 + 1) > end)
		return PARSE_TRUNCATED_L3;

	__builtin_memcpy(key->src_addr, ip6->saddr, 16);
	__builtin_memcpy(key->dst_addr, ip6->daddr, 16);
	/* Traffic class straddles the first two bytes; DSCP is its top 6 bits. */
	meta->dscp = ((ip6->vtc_flow[0] & 0x0F) << 2) | (ip6->vtc_flow[1] >> 6);
	nexthdr = ip6->nexthdr;
	pos = ip6 + 1;
	/* The offset is kept apart from pos: the verifier refuses the 32-bit
	 * pointer arithmetic the compiler makes of pos - data. */
	off = meta->off.l3 + sizeof(*ip6);
	meta->off.payload = off;

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
			len = ((__u32)ext->hdrlen + 1) * 8;
			pos += len;
			off += len;
			meta->off.payload = off;
			continue;
		}
		case IPPROTO_AH: {
			struct ipv6_ext_wire *ext = pos;

			if ((void *)(ext + 1) > end)
				goto truncated;
			nexthdr = ext->nexthdr;
			len = ((__u32)ext->hdrlen + 2) * 4;
			pos += len;
			off += len;
			meta->off.payload = off;
			continue;
		}
		case IPPROTO_FRAGMENT: {
			struct ipv6_frag_wire *frag = pos;

			if ((void *)(frag + 1) > end)
				goto truncated;
			nexthdr = frag->nexthdr;
			pos = frag + 1;
			off += sizeof(*frag);
			meta->off.payload = off;
			if (bpf_ntohs(frag->frag_off) & IPV6_FRAG_OFFSET_MASK) {
				key->proto = nexthdr;
				meta->flags |= PARSE_F_FRAGMENT;
				return PARSE_OK;
			}
			continue;
		}
		}
		key->proto = nexthdr;
		return parse_l4(pos, end, meta->off.payload, nexthdr, key, meta);
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
 * at data..end. key and meta must be zeroed by the caller, but for what it
 * knows of a VLAN tag held in the skb's metadata (key->vlan_id,
 * meta->vlan_tags and meta->vlan_meta, see parse_skb). */
static __always_inline int parse_packet(void *data, void *end, struct flow_key *key,
					struct pkt_meta *meta)
{
	struct eth_wire *eth = data;
	__u16 l2 = sizeof(*eth);
	void *pos;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return PARSE_TRUNCATED_L2;
	__builtin_memcpy(key->src_mac, eth->src, ETH_ALEN);
	__builtin_memcpy(key->dst_mac, eth->dst, ETH_ALEN);
	proto = eth->proto;
	pos = eth + 1;

	/* Tags still in the frame. The stack moves the outer one into the
	 * skb's metadata before TC ingress (and a VLAN device may leave it
	 * there on egress); that one counts towards the depth too, so that a
	 * frame gets the same key at both ends of a link. */
#pragma unroll
	for (int i = 0; i < MAX_VLAN_TAGS; i++) {
		struct vlan_wire *vlan = pos;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if (meta->vlan_tags >= MAX_VLAN_TAGS)
			break;
		if ((void *)(vlan + 1) > end) {
			meta->off.payload = l2;
			return PARSE_TRUNCATED_L2;
		}
		if (meta->vlan_tags == 0)
			key->vlan_id = bpf_ntohs(vlan->tci) & VLAN_VID_MASK;
		meta->vlan_tags++;
		proto = vlan->proto;
		pos = vlan + 1;
		l2 += sizeof(*vlan);
	}
	key->eth_type = bpf_ntohs(proto);
	meta->off.l3 = l2;
	meta->off.payload = l2;

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
