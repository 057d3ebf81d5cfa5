/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Drops with the kernel's reason: kfree_skb(struct sk_buff *skb, void
 * *location, enum skb_drop_reason reason, struct sock *rx_sk), attributed to
 * the 5-tuple of the dropped packet.
 *
 * The headers are read from the buffer (skb->head + network_header) with
 * bpf_probe_read_kernel: a tracepoint has no direct packet access, so the
 * TC parser (lib/parse.h) cannot run here. Only what a 5-tuple needs is
 * read: the IP header, IPv6 extension headers (as many as parse.h walks),
 * and the first four bytes of the transport header. The transport header
 * is found from the IP header, not from skb->transport_header, which the
 * receive path sets only once IP has looked at the packet.
 */
#ifndef LOUPE_SIGNALS_DROPS_H
#define LOUPE_SIGNALS_DROPS_H

#include "core.h"
#include "signals.h"

/* As lib/parse.h: enough for every order RFC 8200 recommends. */
#define DROP_MAX_IPV6_EXT_HDRS 8

/* drop_noise reports whether reason is no drop at all (a buffer consumed,
 * or freed before any drop) or the unspecified reason: plain kfree_skb()
 * calls, too many to attribute and saying nothing. Each value is the
 * running kernel's (CO-RE enum relocation); a kernel without one never
 * matches it. */
static __always_inline int drop_noise(__u32 reason)
{
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_DROP_REASON_NOT_SPECIFIED) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_NOT_SPECIFIED))
		return 1;
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_CONSUMED) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_CONSUMED))
		return 1;
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_NOT_DROPPED_YET) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_NOT_DROPPED_YET))
		return 1;
	return 0;
}

/* read_at copies n bytes at off from the buffer's head, if they lie
 * within its linear data (end: the tail's offset). It returns 0, 1 if they
 * do not (counted as truncated), or -1 if the read failed (counted). */
static __always_inline int read_at(void *dst, __u32 n, const __u8 *head, __u32 off, __u32 end)
{
	if (off + n > end) {
		signal_count(SIGNAL_COUNTER_DROP_TRUNCATED);
		return 1;
	}
	if (bpf_probe_read_kernel(dst, n, head + off)) {
		signal_count(SIGNAL_COUNTER_READ_FAILED);
		return -1;
	}
	return 0;
}

/* drop_ports reads the transport header's first bytes at off into k:
 * ports, or ICMP's type and code, as the flow key has them. */
static __always_inline void drop_ports(struct signal_key *k, const __u8 *head, __u32 off, __u32 end, int v4)
{
	struct ports_wire ports;
	struct icmp_wire icmp;

	switch (k->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
	case IPPROTO_SCTP:
		if (read_at(&ports, sizeof(ports), head, off, end))
			return;
		k->src_port = bpf_ntohs(ports.src);
		k->dst_port = bpf_ntohs(ports.dst);
		return;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		/* As the TC parser: ICMP only inside IPv4, ICMPv6 inside IPv6. */
		if ((k->proto == IPPROTO_ICMP) != v4)
			return;
		if (read_at(&icmp, sizeof(icmp), head, off, end))
			return;
		k->src_port = icmp.type;
		k->dst_port = icmp.code;
	}
}

/* drop_ipv4 fills k from the IPv4 header ip, at l3. */
static __always_inline void drop_ipv4(struct signal_key *k, const struct ipv4_wire *ip, const __u8 *head,
				      __u32 l3, __u32 end)
{
	__u32 ihl = ip->version_ihl & 0x0F;

	ipv4_mapped(k->src_addr, ip->saddr);
	ipv4_mapped(k->dst_addr, ip->daddr);
	k->proto = ip->protocol;
	/* A bad header length or a later fragment: no transport header to
	 * read, the drop counts under the addresses and protocol. */
	if (ihl < 5 || (bpf_ntohs(ip->frag_off) & IPV4_OFFSET_MASK))
		return;
	drop_ports(k, head, l3 + ihl * 4, end, 1);
}

/* drop_ipv6 fills k from the IPv6 header ip6, at l3, and the extension
 * headers after it. */
static __always_inline void drop_ipv6(struct signal_key *k, const struct ipv6_wire *ip6, const __u8 *head,
				      __u32 l3, __u32 end)
{
	union {
		struct ipv6_ext_wire ext;
		struct ipv6_frag_wire frag; /* 8 bytes: every extension header has them */
	} h;
	__u32 off = l3 + sizeof(*ip6);
	__u8 nexthdr = ip6->nexthdr;

	__builtin_memcpy(k->src_addr, ip6->saddr, 16);
	__builtin_memcpy(k->dst_addr, ip6->daddr, 16);
	for (int i = 0; i < DROP_MAX_IPV6_EXT_HDRS; i++) {
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
		case IPPROTO_MH:
		case IPPROTO_AH:
		case IPPROTO_FRAGMENT:
			break;
		default:
			k->proto = nexthdr;
			drop_ports(k, head, off, end, 0);
			return;
		}
		if (read_at(&h, sizeof(h), head, off, end))
			break;
		if (nexthdr == IPPROTO_FRAGMENT) {
			if (bpf_ntohs(h.frag.frag_off) & IPV6_FRAG_OFFSET_MASK) {
				/* A later fragment: no transport header. */
				k->proto = h.frag.nexthdr;
				return;
			}
			off += sizeof(h.frag);
		} else if (nexthdr == IPPROTO_AH) {
			off += ((__u32)h.ext.hdrlen + 2) * 4; /* AH: 4-octet units, minus 2 */
		} else {
			off += ((__u32)h.ext.hdrlen + 1) * 8; /* the others: 8-octet units, minus 1 */
		}
		nexthdr = h.ext.nexthdr;
	}
	/* Still inside the extension chain, or cut short: the header we
	 * stopped at stands for the protocol, as in the TC parser. */
	k->proto = nexthdr;
}

/* drop_add_in adds one dropped buffer of bytes to dk's entry in table. */
static __always_inline void drop_add_in(void *table, const struct drop_key *dk, __u64 bytes)
{
	struct drop_signals *d = bpf_map_lookup_elem(table, dk);
	long err;

	if (d) {
		__sync_fetch_and_add(&d->packets, 1);
		__sync_fetch_and_add(&d->bytes, bytes);
		return;
	}
	struct drop_signals fresh = {.packets = 1, .bytes = bytes};

	/* NOEXIST: another CPU may be dropping the same flow's packets. */
	err = bpf_map_update_elem(table, dk, &fresh, BPF_NOEXIST);
	if (err == 0)
		return;
	if (err == -EEXIST) {
		d = bpf_map_lookup_elem(table, dk);
		if (d) {
			__sync_fetch_and_add(&d->packets, 1);
			__sync_fetch_and_add(&d->bytes, bytes);
			return;
		}
	}
	map_failed(err, SIGNAL_COUNTER_DROP_MAP_FULL, SIGNAL_COUNTER_DROP_MAP_BUSY);
}

/* What drop_observe needs of a struct sk_buff. */
struct skb_fields {
	const __u8 *head;
	const __u8 *data;
	__u32 len;
	__u32 tail; /* an offset from head on 64-bit kernels */
	__u16 nh;   /* the network header's offset from head; ~0: never set */
};

/* The part of struct sk_buff read at once: from len to the end of data,
 * 96 bytes here; network_header, tail and head lie in between. */
#define SKB_SPAN_MAX 128

#define SKB_BASE bpf_core_field_offset(struct sk_buff, len)
#define SKB_SPAN_LEN (bpf_core_field_offset(struct sk_buff, data) + bpf_core_field_size(struct sk_buff, data) - SKB_BASE)
#define SKB_SPAN_HAS(field) CORE_IN_SPAN(struct sk_buff, field, SKB_BASE, SKB_SPAN_LEN)
#define SKB_SPAN_GET(span, field) CORE_FROM_SPAN(span, struct sk_buff, field, SKB_BASE)

static __always_inline int skb_fields(const struct sk_buff *skb, struct skb_fields *f)
{
	__u8 span[SKB_SPAN_MAX];

	if (SKB_SPAN_LEN <= SKB_SPAN_MAX && SKB_SPAN_HAS(network_header) && SKB_SPAN_HAS(tail) &&
	    SKB_SPAN_HAS(head)) {
		if (bpf_probe_read_kernel(span, SKB_SPAN_LEN, (const void *)skb + SKB_BASE)) {
			signal_count(SIGNAL_COUNTER_READ_FAILED);
			return -1;
		}
		f->len = SKB_SPAN_GET(span, len);
		f->nh = SKB_SPAN_GET(span, network_header);
		f->tail = SKB_SPAN_GET(span, tail);
		f->head = SKB_SPAN_GET(span, head);
		f->data = SKB_SPAN_GET(span, data);
		return 0;
	}
	f->len = BPF_CORE_READ(skb, len);
	f->nh = BPF_CORE_READ(skb, network_header);
	f->tail = BPF_CORE_READ(skb, tail);
	f->head = BPF_CORE_READ(skb, head);
	f->data = BPF_CORE_READ(skb, data);
	return 0;
}

/* drop_observe counts the buffer skb, dropped for reason, under its
 * 5-tuple. A buffer whose 5-tuple cannot be read (no network header, not
 * IP, its IP header cut short) counts under the zero key, so that the
 * totals by reason stay whole. */
static __always_inline void drop_observe(const struct sk_buff *skb, __u32 reason)
{
	struct drop_key dk = {.reason = reason};
	struct skb_fields f = {};
	union {
		struct ipv4_wire v4; /* read first: no IP header is shorter */
		struct ipv6_wire v6;
	} ip;
	__u64 bytes = 0;

	if (skb_fields(skb, &f))
		goto count;
	bytes = f.len;
	if (f.nh == (__u16)~0U) {
		/* Never set: freed before any layer looked for IP. */
		signal_count(SIGNAL_COUNTER_DROP_NO_HEADER);
		goto count;
	}
	/* skb->len counts from skb->data, which is before the IP header on
	 * the way out and past it once the receive path pulled it: counting
	 * from the network header gives every drop the same measure, the IP
	 * packet. */
	bytes += f.data - (f.head + f.nh);
	if (read_at(&ip.v4, sizeof(ip.v4), f.head, f.nh, f.tail))
		goto count;
	switch (ip.v4.version_ihl >> 4) {
	case 4:
		drop_ipv4(&dk.key, &ip.v4, f.head, f.nh, f.tail);
		break;
	case 6:
		if (read_at(&ip.v6, sizeof(ip.v6), f.head, f.nh, f.tail) == 0)
			drop_ipv6(&dk.key, &ip.v6, f.head, f.nh, f.tail);
		break;
	default:
		signal_count(SIGNAL_COUNTER_DROP_NOT_IP);
	}
count:
	if (signals_active_b())
		drop_add_in(&drops_b, &dk, bytes);
	else
		drop_add_in(&drops_a, &dk, bytes);
}

#endif
