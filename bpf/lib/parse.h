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
 * It fills one struct pkt: the flow key's fields, where each header starts
 * (struct pkt_offsets), TCP sequence numbers and flags, so that what needs
 * the header length (a GSO packet's wire bytes) or the payload (a capability
 * scanning HTTP) never walks the headers a second time.
 *
 * A tunnel's transport (UDP to a VXLAN or Geneve port, GRE, IP in IP) is
 * only recognised here (PARSE_ENCAP); lib/tunnel.h reads the tunnel's header
 * and the packet inside it with the same functions, one level deep.
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
	/* A tunnel's header, or the inner packet's Ethernet or IP header, cut
	 * short: the packet is keyed by its outer headers (lib/tunnel.h). */
	PARSE_TRUNCATED_TUNNEL,
	/* PARSE_ENCAP + enum tunnel_type: the transport the parse read whole
	 * is a tunnel's, whose header starts at off.payload; the tunnel step
	 * (lib/tunnel.h) replaces it with a final result. A result rather than
	 * a field of pkt: the test the parse's caller makes of the result
	 * anyway (is it PARSE_OK) is then the only one a packet that is not
	 * tunnelled pays, and no byte of pkt is stored to mark it. */
	PARSE_ENCAP = 8,
};

/* Anomalies seen on the way, counted by the caller once the parse is final. */
enum parse_flag {
	PARSE_F_BAD_IHL = 1 << 0,
	PARSE_F_VLAN_DEPTH = 1 << 1,
	PARSE_F_EXT_DEPTH = 1 << 2,
	PARSE_F_FRAGMENT = 1 << 3,     /* non-first fragment: no transport header */
	PARSE_F_TUNNEL_BAD = 1 << 4,   /* a tunnel header that breaks its RFC: keyed by the outer headers */
	PARSE_F_TUNNEL_DEPTH = 1 << 5, /* a tunnel inside the tunnel: keyed by the first inner packet */
};

/* The encapsulations the parser takes apart (lib/tunnel.h). */
enum tunnel_type {
	TUNNEL_NONE = 0,
	TUNNEL_VXLAN = 1,  /* UDP to 4789 (IANA) or 8472 (Linux's default, flannel) */
	TUNNEL_GENEVE = 2, /* UDP to 6081 */
	TUNNEL_GRE = 3,    /* IP protocol 47, version 0 */
	TUNNEL_IPIP = 4,   /* IP protocol 4 (IPv4 inside) or 41 (IPv6 inside), in IPv4 or IPv6 */
};

/* The UDP ports tunnels are sent to. All three lie in 4789..8472, so a UDP
 * packet to a port outside that range, most of them, costs one compare. */
#define VXLAN_PORT 4789
#define VXLAN_LINUX_PORT 8472
#define GENEVE_PORT 6081
#define TUNNEL_PORT_LOW VXLAN_PORT
#define TUNNEL_PORT_HIGH VXLAN_LINUX_PORT

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
	/* The IP header's length field, host order: IPv4's total length
	 * (header included), IPv6's payload length (after the fixed header).
	 * Where the payload ends: a frame under Ethernet's minimum still has
	 * its padding at TC ingress. 0: unknown or a jumbogram. */
	__u16 ip_len;
};

/* What one buffer at the hook counts for (filled by pkt_parse, pkt.h). */
struct pkt_len {
	__u64 bytes;      /* the buffer's L2 length, with a tag stripped on ingress */
	__u64 segments;   /* the wire packets it stands for */
	__u64 wire_bytes; /* their length on the wire: every segment has the headers */
};

/* A packet as every capability sees it: parsed once per hook, then handed
 * to each enabled capability, which never walks the headers again.
 *
 * key holds the packet's addresses, ports, protocol, MACs and VLAN in the
 * flow key's own layout, so the flows capability hashes it as it is and
 * another capability derives its own key (a prefix, an inner 5-tuple) from
 * the same fields. off says where each header and the payload start, for
 * capabilities that read payload (bpf_skb_load_bytes from off.payload, which
 * covers data beyond the linear area too). */
struct pkt {
	/* All but ifindex and direction from the parser; those from the hook.
	 * A pointer, not a member: the key is handed to map helpers, and a
	 * struct whose member escapes to a helper lives on the stack whole,
	 * where the rest of pkt can live in registers (measured: the flows
	 * path got 7 % slower per packet with the key inside). */
	struct flow_key *key;
	struct pkt_offsets off;
	struct pkt_len len;
	__u32 tcp_seq;          /* host order; TCP only */
	__u32 tcp_ack;
	__u32 tcp_flags;        /* the flags byte, AE/NS in bit 8 */
	__u8 dscp;
	__u8 flags;             /* enum parse_flag */
	/* VLAN tags of the frame: those still in it, plus the outermost one when
	 * the kernel holds it in the skb's metadata (vlan_meta; set by
	 * pkt_init before parsing). */
	__u8 vlan_tags;
	__u8 vlan_meta;
	__s32 result;           /* enum parse_result */
	/* enum tunnel_type: what the packet was taken out of (lib/tunnel.h);
	 * key, off, the TCP fields and dscp are then the inner packet's, and
	 * the outer side is in the tunnel scratch (struct tunnel_info). Only
	 * the tunnel step writes these: where pkt lives on the stack, the
	 * verifier tracks result per 8-byte slot, and a byte stored beside it
	 * on every packet would make result unknown to it. */
	__u8 tunnel;
	__u8 pad;
	__u16 inner; /* where the inner packet (its Ethernet or IP header) starts; with tunnel */
};

/* Transport header lengths the parser does not read from the header. */
#define UDP_HLEN 8
#define SCTP_COMMON_HLEN 12
#define ICMP_HLEN 8 /* type, code, checksum and the 4 bytes every message has next */

/* udp_tunnel is the parse's result for a UDP packet whole up to its
 * payload, to a port in TUNNEL_PORT_LOW..TUNNEL_PORT_HIGH. */
static __always_inline int udp_tunnel(__u16 port)
{
	if (port == VXLAN_PORT || port == VXLAN_LINUX_PORT)
		return PARSE_ENCAP + TUNNEL_VXLAN;
	if (port == GENEVE_PORT)
		return PARSE_ENCAP + TUNNEL_GENEVE;
	return PARSE_OK;
}

/* parse_l4 reads the transport header at pos, offset l4 into the frame. */
static __always_inline int parse_l4(void *pos, void *end, __u16 l4, __u8 proto,
				    struct pkt *p)
{
	p->off.l4 = l4;
	p->off.payload = l4;
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcp_wire *tcp = pos;
		__u16 doff;

		if ((void *)(tcp + 1) > end)
			return PARSE_TRUNCATED_L4;
		p->key->src_port = bpf_ntohs(tcp->src);
		p->key->dst_port = bpf_ntohs(tcp->dst);
		p->tcp_flags = tcp->flags | ((__u32)(tcp->doff_ae & 1) << 8);
		p->tcp_seq = bpf_ntohl(tcp->seq);
		p->tcp_ack = bpf_ntohl(tcp->ack_seq);
		/* Options included; a data offset below the fixed header is
		 * bogus, and only the fixed header was read. */
		doff = (tcp->doff_ae >> 4) * 4;
		p->off.payload = l4 + (doff > sizeof(*tcp) ? doff : sizeof(*tcp));
		return PARSE_OK;
	}
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
	case IPPROTO_SCTP: {
		struct ports_wire *ports = pos;

		if ((void *)(ports + 1) > end)
			return PARSE_TRUNCATED_L4;
		p->key->src_port = bpf_ntohs(ports->src);
		p->key->dst_port = bpf_ntohs(ports->dst);
		p->off.payload = l4 + (proto == IPPROTO_SCTP ? SCTP_COMMON_HLEN : UDP_HLEN);
		if ((__u16)(p->key->dst_port - TUNNEL_PORT_LOW) <= TUNNEL_PORT_HIGH - TUNNEL_PORT_LOW &&
		    proto == IPPROTO_UDP)
			return udp_tunnel(p->key->dst_port);
		return PARSE_OK;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		struct icmp_wire *icmp = pos;

		/* ICMP inside IPv6 or ICMPv6 inside IPv4 is not what it claims:
		 * leave the ports zero rather than read a type from garbage. */
		if ((proto == IPPROTO_ICMP) != (p->key->eth_type == ETH_P_IP))
			return PARSE_OK;
		if ((void *)(icmp + 1) > end)
			return PARSE_TRUNCATED_L4;
		p->key->src_port = icmp->type;
		p->key->dst_port = icmp->code;
		p->off.payload = l4 + ICMP_HLEN;
		return PARSE_OK;
	}
	/* The inner packet, or GRE's header, starts at l4: off.payload. */
	case IPPROTO_IPIP:
	case IPPROTO_IPV6:
		return PARSE_ENCAP + TUNNEL_IPIP;
	case IPPROTO_GRE:
		return PARSE_ENCAP + TUNNEL_GRE;
	}
	return PARSE_OK;
}

static __always_inline int parse_ipv4(void *pos, void *end, struct pkt *p)
{
	struct ipv4_wire *ip = pos;
	__u32 ihl;

	if ((void *)(ip + 1) > end)
		return PARSE_TRUNCATED_L3;

	/* ::ffff:a.b.c.d */
	p->key->src_addr[10] = 0xff;
	p->key->src_addr[11] = 0xff;
	p->key->dst_addr[10] = 0xff;
	p->key->dst_addr[11] = 0xff;
	__builtin_memcpy(&p->key->src_addr[12], &ip->saddr, 4);
	__builtin_memcpy(&p->key->dst_addr[12], &ip->daddr, 4);
	p->key->proto = ip->protocol;
	p->dscp = ip->tos >> 2;
	p->off.ip_len = bpf_ntohs(ip->tot_len);

	ihl = ip->version_ihl & 0x0F;
	if (ihl < 5) {
		p->flags |= PARSE_F_BAD_IHL;
		p->off.payload = p->off.l3 + sizeof(*ip);
		return PARSE_OK;
	}
	if (bpf_ntohs(ip->frag_off) & IPV4_OFFSET_MASK) {
		/* A later fragment carries no transport header: its first bytes
		 * are payload, and reading ports there would misattribute it. */
		p->flags |= PARSE_F_FRAGMENT;
		p->off.payload = p->off.l3 + ihl * 4;
		return PARSE_OK;
	}
	return parse_l4(pos + ihl * 4, end, p->off.l3 + ihl * 4, ip->protocol, p);
}

static __always_inline int parse_ipv6(void *pos, void *end, struct pkt *p)
{
	struct ipv6_wire *ip6 = pos;
	__u32 off, len;
	__u8 nexthdr;

	if ((void *)(ip6 + 1) > end)
		return PARSE_TRUNCATED_L3;

	__builtin_memcpy(p->key->src_addr, ip6->saddr, 16);
	__builtin_memcpy(p->key->dst_addr, ip6->daddr, 16);
	/* Traffic class straddles the first two bytes; DSCP is its top 6 bits. */
	p->dscp = ((ip6->vtc_flow[0] & 0x0F) << 2) | (ip6->vtc_flow[1] >> 6);
	p->off.ip_len = bpf_ntohs(ip6->payload_len);
	nexthdr = ip6->nexthdr;
	pos = ip6 + 1;
	/* The offset is kept apart from pos: the verifier refuses the 32-bit
	 * pointer arithmetic the compiler makes of pos - data. */
	off = p->off.l3 + sizeof(*ip6);
	p->off.payload = off;

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
			p->off.payload = off;
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
			p->off.payload = off;
			continue;
		}
		case IPPROTO_FRAGMENT: {
			struct ipv6_frag_wire *frag = pos;

			if ((void *)(frag + 1) > end)
				goto truncated;
			nexthdr = frag->nexthdr;
			pos = frag + 1;
			off += sizeof(*frag);
			p->off.payload = off;
			if (bpf_ntohs(frag->frag_off) & IPV6_FRAG_OFFSET_MASK) {
				p->key->proto = nexthdr;
				p->flags |= PARSE_F_FRAGMENT;
				return PARSE_OK;
			}
			continue;
		}
		}
		p->key->proto = nexthdr;
		return parse_l4(pos, end, p->off.payload, nexthdr, p);
	}
	/* Still inside the extension chain: count the flow under its L3 key,
	 * with the header we stopped at as protocol. */
	p->key->proto = nexthdr;
	p->flags |= PARSE_F_EXT_DEPTH;
	return PARSE_OK;

truncated:
	p->key->proto = nexthdr;
	return PARSE_TRUNCATED_L3;
}

/* parse_l2 reads the Ethernet header at pos, start bytes into the frame,
 * and the VLAN tags after it: the key's MACs, VLAN and EtherType, and
 * off.l3. It returns where the network header starts and puts its EtherType
 * in *proto; NULL when the frame ends first. */
static __always_inline void *parse_l2(void *pos, void *end, __u16 start, __be16 *proto, struct pkt *p)
{
	struct eth_wire *eth = pos;
	__u16 l2 = start + sizeof(*eth);

	if ((void *)(eth + 1) > end)
		return NULL;
	__builtin_memcpy(p->key->src_mac, eth->src, ETH_ALEN);
	__builtin_memcpy(p->key->dst_mac, eth->dst, ETH_ALEN);
	*proto = eth->proto;
	pos = eth + 1;

	/* Tags still in the frame. The stack moves the outer one into the
	 * skb's metadata before TC ingress (and a VLAN device may leave it
	 * there on egress); that one counts towards the depth too, so that a
	 * frame gets the same key at both ends of a link. */
#pragma unroll
	for (int i = 0; i < MAX_VLAN_TAGS; i++) {
		struct vlan_wire *vlan = pos;

		if (*proto != bpf_htons(ETH_P_8021Q) && *proto != bpf_htons(ETH_P_8021AD))
			break;
		if (p->vlan_tags >= MAX_VLAN_TAGS)
			break;
		if ((void *)(vlan + 1) > end) {
			p->off.payload = l2;
			return NULL;
		}
		if (p->vlan_tags == 0)
			p->key->vlan_id = bpf_ntohs(vlan->tci) & VLAN_VID_MASK;
		p->vlan_tags++;
		*proto = vlan->proto;
		pos = vlan + 1;
		l2 += sizeof(*vlan);
	}
	p->key->eth_type = bpf_ntohs(*proto);
	p->off.l3 = l2;
	p->off.payload = l2;
	return pos;
}

/* parse_l3 reads the network header at pos (offset p->off.l3), of
 * EtherType proto, and what follows it. */
static __always_inline int parse_l3(void *pos, void *end, __be16 proto, struct pkt *p)
{
	switch (proto) {
	case bpf_htons(ETH_P_IP):
		return parse_ipv4(pos, end, p);
	case bpf_htons(ETH_P_IPV6):
		return parse_ipv6(pos, end, p);
	case bpf_htons(ETH_P_8021Q):
	case bpf_htons(ETH_P_8021AD):
		p->flags |= PARSE_F_VLAN_DEPTH;
		return PARSE_OK;
	}
	return PARSE_OK;
}

/* parse_packet fills p (but key.ifindex, key.direction, len and result)
 * from the frame at data..end. p must be zeroed by the caller, but for what
 * it knows of a VLAN tag held in the skb's metadata (p->key->vlan_id,
 * p->vlan_tags and p->vlan_meta, see pkt_init). For a tunnel's transport
 * it returns PARSE_ENCAP + its type: lib/tunnel.h takes the packet out. */
static __always_inline int parse_packet(void *data, void *end, struct pkt *p)
{
	__be16 proto;
	void *pos = parse_l2(data, end, 0, &proto, p);

	if (!pos)
		return PARSE_TRUNCATED_L2;
	return parse_l3(pos, end, proto, p);
}

#endif
