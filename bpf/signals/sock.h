/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Socket signals: the smoothed RTT (tcp_probe) and the retransmitted
 * segments (tcp_retransmit_skb) of a TCP socket, by its 5-tuple. */
#ifndef LOUPE_SIGNALS_SOCK_H
#define LOUPE_SIGNALS_SOCK_H

#include "core.h"
#include "signals.h"

#define AF_INET 2
#define AF_INET6 10

/* 1 when tcp_retransmit_skb carries the transmit's result as a third
 * argument (a 2025 change, which this 6.18 kernel has) and fires for
 * failed attempts too; set from Go from the kernel's BTF before load.
 * Without it the tracepoint fires for retransmits that left only, and
 * reading a third argument would make the kernel refuse the attachment. */
volatile const __u8 cfg_retransmit_err_arg = 0;

/* What a socket's key is made of, in struct sock_common. */
struct sock_ends {
	__be32 daddr;
	__be32 saddr;
	__be16 dport;
	__u16 num; /* the local port, host order */
	__u16 family;
};

/* The head of struct sock_common read at once: the IPv4 addresses, the
 * hash, the ports and the family (18 bytes here). */
#define SOCK_HEAD_LEN 24

#define SOCK_HEAD_HAS(field) CORE_IN_SPAN(struct sock_common, field, 0, SOCK_HEAD_LEN)
#define SOCK_HEAD_GET(head, field) CORE_FROM_SPAN(head, struct sock_common, field, 0)

/* sock_ends fills e; it returns 0, or -1 (counted) when the read failed. */
static __always_inline int sock_ends(const struct sock *sk, struct sock_ends *e)
{
	const struct sock_common *skc = &sk->__sk_common;
	__u8 head[SOCK_HEAD_LEN];

	if (SOCK_HEAD_HAS(skc_daddr) && SOCK_HEAD_HAS(skc_rcv_saddr) && SOCK_HEAD_HAS(skc_dport) &&
	    SOCK_HEAD_HAS(skc_num) && SOCK_HEAD_HAS(skc_family)) {
		if (bpf_probe_read_kernel(head, sizeof(head), skc)) {
			signal_count(SIGNAL_COUNTER_READ_FAILED);
			return -1;
		}
		e->daddr = SOCK_HEAD_GET(head, skc_daddr);
		e->saddr = SOCK_HEAD_GET(head, skc_rcv_saddr);
		e->dport = SOCK_HEAD_GET(head, skc_dport);
		e->num = SOCK_HEAD_GET(head, skc_num);
		e->family = SOCK_HEAD_GET(head, skc_family);
		return 0;
	}
	e->daddr = BPF_CORE_READ(skc, skc_daddr);
	e->saddr = BPF_CORE_READ(skc, skc_rcv_saddr);
	e->dport = BPF_CORE_READ(skc, skc_dport);
	e->num = BPF_CORE_READ(skc, skc_num);
	e->family = BPF_CORE_READ(skc, skc_family);
	return 0;
}

/* sock_v6 reads an IPv6 socket's addresses: one read where the remote one
 * is followed by the local one, as in every kernel so far. */
static __always_inline void sock_v6(const struct sock_common *skc, struct signal_key *k)
{
	__u8 both[32];

	if (bpf_core_field_offset(struct sock_common, skc_v6_rcv_saddr) ==
	    bpf_core_field_offset(struct sock_common, skc_v6_daddr) + 16) {
		if (bpf_probe_read_kernel(both, sizeof(both), &skc->skc_v6_daddr)) {
			signal_count(SIGNAL_COUNTER_READ_FAILED);
			return;
		}
		__builtin_memcpy(k->dst_addr, both, 16);
		__builtin_memcpy(k->src_addr, both + 16, 16);
		return;
	}
	BPF_CORE_READ_INTO(&k->src_addr, skc, skc_v6_rcv_saddr);
	BPF_CORE_READ_INTO(&k->dst_addr, skc, skc_v6_daddr);
}

/* sock_key fills k with the socket's 5-tuple, local end first. It returns
 * 0, or -1 for a socket of another family or one that could not be read. */
static __always_inline int sock_key(const struct sock *sk, struct signal_key *k)
{
	struct sock_ends e = {};

	if (sock_ends(sk, &e))
		return -1;
	k->proto = IPPROTO_TCP;
	k->src_port = e.num;
	k->dst_port = bpf_ntohs(e.dport);
	if (e.family == AF_INET) {
		ipv4_mapped(k->src_addr, e.saddr);
		ipv4_mapped(k->dst_addr, e.daddr);
		return 0;
	}
	/* An IPv6 socket talking to an IPv4 peer holds IPv4-mapped
	 * addresses already: the key is the one its packets get. */
	if (e.family == AF_INET6 && bpf_core_field_exists(sk->__sk_common.skc_v6_daddr)) {
		sock_v6(&sk->__sk_common, k);
		return 0;
	}
	signal_count(SIGNAL_COUNTER_SOCK_FAMILY);
	return -1;
}

/* sock_add adds one event to the socket's entry: an RTT sample (rtt_us
 * non-zero) or retransmitted segments. */
static __always_inline void sock_add(struct sock_signals *s, __u32 rtt_us, __u64 segs)
{
	if (segs)
		__sync_fetch_and_add(&s->retrans_segs, segs);
	if (!rtt_us)
		return;
	/* Plain stores: one socket's events are serialised by its lock. */
	if (s->rtt_samples == 0 || rtt_us < s->rtt_min_us)
		s->rtt_min_us = rtt_us;
	if (rtt_us > s->rtt_max_us)
		s->rtt_max_us = rtt_us;
	s->rtt_last_us = rtt_us;
	__sync_fetch_and_add(&s->rtt_samples, 1);
}

static __always_inline void sock_add_in(void *table, const struct signal_key *k, __u32 rtt_us, __u64 segs)
{
	struct sock_signals *s = bpf_map_lookup_elem(table, k);
	long err;

	if (s) {
		sock_add(s, rtt_us, segs);
		return;
	}
	struct sock_signals fresh = {
		.retrans_segs = segs,
		.rtt_samples = rtt_us ? 1 : 0,
		.rtt_min_us = rtt_us,
		.rtt_max_us = rtt_us,
		.rtt_last_us = rtt_us,
	};
	/* NOEXIST: another socket of the same 5-tuple (in another network
	 * namespace) may have inserted it an instant ago. */
	err = bpf_map_update_elem(table, k, &fresh, BPF_NOEXIST);
	if (err == 0)
		return;
	if (err == -EEXIST) {
		s = bpf_map_lookup_elem(table, k);
		if (s) {
			sock_add(s, rtt_us, segs);
			return;
		}
	}
	map_failed(err, SIGNAL_COUNTER_SOCK_MAP_FULL, SIGNAL_COUNTER_SOCK_MAP_BUSY);
}

/* sock_observe counts an event of socket sk into the active table. */
static __always_inline void sock_observe(const struct sock *sk, __u32 rtt_us, __u64 segs)
{
	struct signal_key k = {};

	if (sock_key(sk, &k))
		return;
	/* Two call sites, each with its map known to the verifier: direct
	 * calls instead of a lookup in an array of maps. */
	if (signals_active_b())
		sock_add_in(&sock_b, &k, rtt_us, segs);
	else
		sock_add_in(&sock_a, &k, rtt_us, segs);
}

/* rtt_observe: tcp_probe(struct sock *sk, const struct sk_buff *skb) fires
 * for every segment an established socket receives, before the segment's
 * ACK updates the estimate: srtt_us holds eight times the smoothed RTT in
 * microseconds (0 until the first sample). */
static __always_inline void rtt_observe(const struct sock *sk)
{
	__u32 srtt = BPF_CORE_READ((const struct tcp_sock *)sk, srtt_us) >> 3;

	if (srtt)
		sock_observe(sk, srtt, 0);
}

/* retransmit_observe: tcp_retransmit_skb(const struct sock *sk, const
 * struct sk_buff *skb[, int err]) fires once per retransmitted buffer,
 * which holds tcp_skb_pcount segments: the number the kernel adds to the
 * socket's total_retrans and to TcpRetransSegs. */
static __always_inline void retransmit_observe(const struct sock *sk, const struct sk_buff *skb, long err)
{
	const struct tcp_skb_cb *cb;
	__u16 segs;

	if (err)
		return;
	cb = (const void *)skb + bpf_core_field_offset(struct sk_buff, cb);
	segs = BPF_CORE_READ(cb, tcp_gso_segs);
	sock_observe(sk, 0, segs ? segs : 1);
}

#endif
