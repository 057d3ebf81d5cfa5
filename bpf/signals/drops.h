/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Drops with the kernel's reason: kfree_skb(struct sk_buff *skb, void
 * *location, enum skb_drop_reason reason, struct sock *rx_sk), attributed to
 * the 5-tuple of the dropped packet.
 *
 * The headers are read from the buffer (skb->head + network_header) with
 * bpf_probe_read_kernel: a tracepoint has no direct packet access, so the
 * TC parser (lib/parse.h) cannot run here. Only what a 5-tuple needs is
 * read: the IP header, IPv6 extension headers (as many as parse.h walks),
 * and the first four bytes of the transport header, most often in one read
 * (struct drop_win). The transport header is found from the IP header, not
 * from skb->transport_header, which the receive path sets only once IP has
 * looked at the packet.
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

/* The first bytes from the network header, read at once: the IP header
 * and the ports behind it in every IPv4 packet without options and every
 * IPv6 packet without extension headers. What lies further (options,
 * extension headers) is read where it is. */
#define DROP_WIN 64

struct drop_win {
	const __u8 *head; /* the buffer */
	__u32 nh;         /* the network header's offset in it */
	__u32 end;        /* the end of its linear data */
	__u32 n;          /* bytes copied into b */
	__u8 b[DROP_WIN];
};

/* win_open copies up to DROP_WIN bytes from the network header, as many as
 * the linear data holds. It returns 0, or -1 (counted) when not even an
 * IPv4 header is there or the read failed. */
static __always_inline int win_open(struct drop_win *w)
{
	__u32 n = w->end > w->nh ? w->end - w->nh : 0;

	if (n > DROP_WIN)
		n = DROP_WIN;
	if (n < sizeof(struct ipv4_wire)) {
		signal_count(SIGNAL_COUNTER_DROP_TRUNCATED);
		return -1;
	}
	if (bpf_probe_read_kernel(w->b, n, w->head + w->nh)) {
		signal_count(SIGNAL_COUNTER_READ_FAILED);
		return -1;
	}
	w->n = n;
	return 0;
}

/* win_read copies size bytes at rel from the network header into dst: from
 * the window when they are in it, else from the buffer, if they lie within
 * its linear data. It returns 0, or -1 (counted) when they do not or the
 * read failed. */
static __always_inline int win_read(void *dst, __u32 size, const struct drop_win *w, __u32 rel)
{
	if (rel <= DROP_WIN - size && rel + size <= w->n) {
		__builtin_memcpy(dst, w->b + rel, size);
		return 0;
	}
	if (w->nh + rel + size > w->end) {
		signal_count(SIGNAL_COUNTER_DROP_TRUNCATED);
		return -1;
	}
	if (bpf_probe_read_kernel(dst, size, w->head + w->nh + rel)) {
		signal_count(SIGNAL_COUNTER_READ_FAILED);
		return -1;
	}
	return 0;
}

/* drop_ports reads the transport header's first bytes at rel into k:
 * ports, or ICMP's type and code, as the flow key has them. */
static __always_inline void drop_ports(struct signal_key *k, const struct drop_win *w, __u32 rel, int v4)
{
	struct ports_wire ports;
	struct icmp_wire icmp;

	switch (k->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
	case IPPROTO_SCTP:
		if (win_read(&ports, sizeof(ports), w, rel))
			return;
		k->src_port = bpf_ntohs(ports.src);
		k->dst_port = bpf_ntohs(ports.dst);
		return;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		/* As the TC parser: ICMP only inside IPv4, ICMPv6 inside IPv6. */
		if ((k->proto == IPPROTO_ICMP) != v4)
			return;
		if (win_read(&icmp, sizeof(icmp), w, rel))
			return;
		k->src_port = icmp.type;
		k->dst_port = icmp.code;
	}
}

/* drop_ipv4 fills k from the IPv4 packet in w. */
static __always_inline void drop_ipv4(struct signal_key *k, const struct drop_win *w)
{
	struct ipv4_wire ip;
	__u32 ihl;

	__builtin_memcpy(&ip, w->b, sizeof(ip)); /* win_open made sure it is there */
	ipv4_mapped(k->src_addr, ip.saddr);
	ipv4_mapped(k->dst_addr, ip.daddr);
	k->proto = ip.protocol;
	ihl = ip.version_ihl & 0x0F;
	/* A bad header length or a later fragment: no transport header to
	 * read, the drop counts under the addresses and protocol. */
	if (ihl < 5 || (bpf_ntohs(ip.frag_off) & IPV4_OFFSET_MASK))
		return;
	drop_ports(k, w, ihl * 4, 1);
}

/* drop_ipv6 fills k from the IPv6 packet in w: its header, the extension
 * headers after it. It returns -1 when its fixed header is cut short. */
static __always_inline int drop_ipv6(struct signal_key *k, const struct drop_win *w)
{
	union {
		struct ipv6_ext_wire ext;
		struct ipv6_frag_wire frag; /* 8 bytes: every extension header has them */
	} h;
	struct ipv6_wire ip6;
	__u32 rel = sizeof(ip6);
	__u8 nexthdr;

	if (win_read(&ip6, sizeof(ip6), w, 0))
		return -1;
	__builtin_memcpy(k->src_addr, ip6.saddr, 16);
	__builtin_memcpy(k->dst_addr, ip6.daddr, 16);
	nexthdr = ip6.nexthdr;
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
			drop_ports(k, w, rel, 0);
			return 0;
		}
		if (win_read(&h, sizeof(h), w, rel))
			break;
		if (nexthdr == IPPROTO_FRAGMENT) {
			if (bpf_ntohs(h.frag.frag_off) & IPV6_FRAG_OFFSET_MASK) {
				/* A later fragment: no transport header. */
				k->proto = h.frag.nexthdr;
				return 0;
			}
			rel += sizeof(h.frag);
		} else if (nexthdr == IPPROTO_AH) {
			rel += ((__u32)h.ext.hdrlen + 2) * 4; /* AH: 4-octet units, minus 2 */
		} else {
			rel += ((__u32)h.ext.hdrlen + 1) * 8; /* the others: 8-octet units, minus 1 */
		}
		nexthdr = h.ext.nexthdr;
	}
	/* Still inside the extension chain, or cut short: the header we
	 * stopped at stands for the protocol, as in the TC parser. */
	k->proto = nexthdr;
	return 0;
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
	struct drop_win w = {};
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
	w.head = f.head;
	w.nh = f.nh;
	w.end = f.tail;
	if (win_open(&w))
		goto count;
	switch (w.b[0] >> 4) {
	case 4:
		drop_ipv4(&dk.key, &w);
		break;
	case 6:
		if (drop_ipv6(&dk.key, &w))
			__builtin_memset(&dk.key, 0, sizeof(dk.key));
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
