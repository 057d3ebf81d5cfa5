/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The handshake capability: the RTT of TCP handshakes seen at the TC hook.
 *
 * The tcp_probe tracepoint gives the RTT of the host's own sockets; traffic
 * that only passes through the host (forwarded, bridged, a container's)
 * has no socket here, but its handshake crosses the hooks: the SYN, the
 * SYN-ACK and the ACK. At the hook, SYN to SYN-ACK is the round trip to
 * the server and back, SYN-ACK to ACK the round trip to the client and
 * back; their sum is the connection's RTT as the path sees it, wherever
 * the host sits on it (at the client, the second part is the client's own
 * time to answer; at the server, the first).
 *
 * A SYN enters handshake_pending, keyed by the connection (both directions
 * alike) and the interface: a connection forwarded through the host crosses
 * two interfaces, and each times its own handshake. The SYN-ACK that
 * acknowledges the SYN's sequence number stamps the entry; the ACK that
 * acknowledges the SYN-ACK's ends it, and the result goes to the flow of
 * the ACK (the client's flow, which the SYN started), per interval, in a
 * table pair that swaps with the flow tables, as DNS results do (dns.h).
 *
 * Karn's rule: a SYN or SYN-ACK seen again makes the handshake ambiguous
 * (which one did the answer answer?), and it is not timed.
 *
 * The pending table is an LRU hash: a SYN flood or a port scan leaves
 * entries no SYN-ACK ever completes, and an LRU forgets the oldest of them
 * instead of refusing the next connection's SYN.
 *
 * The handshake's last packet is an ACK, and so is every later packet of
 * the connection: looking each up in the pending table cost a pure ACK 45
 * ns more (BPF_PROG_TEST_RUN, BenchmarkTCSignals). So a SYN-ACK also
 * writes the acknowledgement number it awaits (its sequence number + 1)
 * in a slot of handshake_synacks chosen by that number and the interface, and an
 * ACK is looked up only when its acknowledgement number is the one in its
 * slot: an array read for every other ACK. Two handshakes awaiting their
 * ACK whose numbers share a slot: the later overwrites the earlier, which
 * is not timed (with 16 384 slots and 100 handshakes in progress, 1 in
 * 160). The last ACK may carry data (a client that delays its ACK sends
 * it with its first request): any ACK is checked.
 */
#ifndef LOUPE_HANDSHAKE_H
#define LOUPE_HANDSHAKE_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "connkey.h"
#include "flow.h"
#include "latency.h"
#include "parse.h"
#include "../flows/flows.h"

enum handshake_counter {
	HANDSHAKE_SYNS = 0,          /* SYNs that started a handshake */
	HANDSHAKE_MEASURED,          /* handshakes timed */
	HANDSHAKE_RETRANSMITTED,     /* SYNs or SYN-ACKs seen again: the handshake is not timed (Karn) */
	HANDSHAKE_SYNACK_WITHOUT_SYN, /* SYN-ACKs whose SYN was not seen here (or was forgotten) */
	HANDSHAKE_SYNACK_MISMATCH,   /* SYN-ACKs that do not acknowledge the SYN's sequence number */
	HANDSHAKE_PENDING_FULL,      /* SYNs the pending table refused */
	HANDSHAKE_RESULTS_FULL,      /* results lost: the per-flow table is full */
	HANDSHAKE_COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HANDSHAKE_COUNTER_MAX);
	__type(key, __u32);   /* Key: enum handshake_counter */
	__type(value, __u64); /* Value: on this CPU */
} handshake_counters SEC(".maps");

/* The RTT of every handshake timed, as a histogram: exact per handshake,
 * where the per-flow table keeps one per flow. */
struct handshake_stats {
	__u64 rtt_ns; /* sum */
	__u64 hist[LAT_BUCKETS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);                    /* Key: 0 */
	__type(value, struct handshake_stats); /* Value: on this CPU */
} handshake_stats SEC(".maps");

/* 48 bytes. */
struct handshake_key {
	struct conn_key conn;
	__u32 ifindex;
	__u32 pad;
};

enum handshake_flag {
	HANDSHAKE_F_SYNACK = 1 << 0,  /* the SYN-ACK was seen */
	HANDSHAKE_F_AMBIGUOUS = 1 << 1, /* a SYN or SYN-ACK was seen again */
};

/* 32 bytes. */
struct handshake {
	__u64 syn_time;    /* bpf_ktime_get_ns at the hook */
	__u64 synack_time;
	__u32 syn_seq;     /* the client's initial sequence number */
	__u32 synack_seq;  /* the server's */
	__u8 client;       /* the side of conn that sent the SYN (conn_key_of's dir) */
	__u8 flags;        /* enum handshake_flag */
	__u8 pad[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192); /* resized from Go: dns.handshake_max_pending */
	__type(key, struct handshake_key);
	__type(value, struct handshake);
} handshake_pending SEC(".maps");

/* The acknowledgement number each SYN-ACK in progress awaits, in the slot
 * of that number and the interface (handshake_slot); 0: none. An array,
 * so that the lookup is inlined: this is what every ACK pays. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384); /* resized from Go with handshake_slot_mask */
	__type(key, __u32);
	__type(value, __u32);
} handshake_synacks SEC(".maps");

/* handshake_synacks' slots less 1 (a power of two less 1), set from Go. */
volatile const __u32 handshake_slot_mask = 16383;

/* handshake_slot is the slot of the acknowledgement number ack awaited on
 * interface ifindex. The interface is mixed in: a forwarded connection's
 * SYN-ACK crosses two interfaces, each awaiting the same number, and the
 * first to see the ACK must not clear the other's slot. */
static __always_inline __u32 handshake_slot(__u32 ack, __u32 ifindex)
{
	return (ack ^ (ifindex * 0x9e3779b1U)) & handshake_slot_mask;
}

/* A handshake timed: 24 bytes. */
struct handshake_result {
	__u64 rtt_ns;         /* syn_synack_ns + synack_ack_ns */
	__u64 syn_synack_ns;  /* SYN to SYN-ACK at the hook: towards the server and back */
	__u64 synack_ack_ns;  /* SYN-ACK to ACK: towards the client and back */
};

/* Allocated as it fills, as DNS results are (dns.h). */
struct handshake_flow_table {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); /* resized from Go: dns.max_flows */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct flow_key);           /* Key: the client's flow, as flows keys it */
	__type(value, struct handshake_result); /* Value: its last handshake this interval */
} handshake_flows_a SEC(".maps"), handshake_flows_b SEC(".maps");

static __always_inline void handshake_count(enum handshake_counter c)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&handshake_counters, &key);

	if (v)
		*v += 1;
}

/* handshake_done records a timed handshake on the flow of key. */
static __always_inline void handshake_done(const struct flow_key *key, const struct handshake *h, __u64 now)
{
	__u32 zero = 0;
	struct handshake_stats *st;
	struct handshake_result r;
	long err;

	r.syn_synack_ns = h->synack_time - h->syn_time;
	r.synack_ack_ns = now - h->synack_time;
	r.rtt_ns = r.syn_synack_ns + r.synack_ack_ns;
	if (flows_interval())
		err = bpf_map_update_elem(&handshake_flows_b, key, &r, BPF_ANY);
	else
		err = bpf_map_update_elem(&handshake_flows_a, key, &r, BPF_ANY);
	if (err)
		handshake_count(HANDSHAKE_RESULTS_FULL);
	handshake_count(HANDSHAKE_MEASURED);
	st = bpf_map_lookup_elem(&handshake_stats, &zero);
	if (st) {
		st->rtt_ns += r.rtt_ns;
		st->hist[latency_bucket(r.rtt_ns) & (LAT_BUCKETS - 1)]++;
	}
}

/* handshake_track follows the handshake of p's connection: p is a SYN, a
 * SYN-ACK or the ACK a SYN-ACK awaits. A global function, as dns_track: verified on its
 * own, and called only for those packets. */
__noinline int handshake_track(const struct pkt *p, const struct flow_key *key)
{
	struct handshake_key hk;
	struct handshake *h;
	__u32 flags, slot_idx, *slot;
	__u64 now;
	__u8 dir;

	if (!p || !key)
		return 0;
	flags = p->tcp_flags;
	conn_key_of(key, &hk.conn, &dir);
	hk.ifindex = key->ifindex;
	hk.pad = 0;
	h = bpf_map_lookup_elem(&handshake_pending, &hk);

	if (!(flags & TCP_FLAG_ACK)) {
		/* A SYN: a handshake starts, or its SYN comes again. */
		struct handshake fresh = {.syn_seq = p->tcp_seq, .client = dir};

		if (h && h->client == dir && h->syn_seq == p->tcp_seq) {
			if (!(h->flags & HANDSHAKE_F_AMBIGUOUS))
				handshake_count(HANDSHAKE_RETRANSMITTED);
			h->flags |= HANDSHAKE_F_AMBIGUOUS;
			return 0;
		}
		/* New, or a new connection on the same ports. */
		fresh.syn_time = bpf_ktime_get_ns();
		if (bpf_map_update_elem(&handshake_pending, &hk, &fresh, BPF_ANY))
			handshake_count(HANDSHAKE_PENDING_FULL);
		else
			handshake_count(HANDSHAKE_SYNS);
		return 0;
	}

	if (flags & TCP_FLAG_SYN) {
		/* A SYN-ACK: it must answer the SYN, from the other side. */
		if (!h || h->client == dir) {
			handshake_count(HANDSHAKE_SYNACK_WITHOUT_SYN);
			return 0;
		}
		if (p->tcp_ack != h->syn_seq + 1) {
			handshake_count(HANDSHAKE_SYNACK_MISMATCH);
			return 0;
		}
		if (h->flags & HANDSHAKE_F_SYNACK) {
			if (!(h->flags & HANDSHAKE_F_AMBIGUOUS))
				handshake_count(HANDSHAKE_RETRANSMITTED);
			h->flags |= HANDSHAKE_F_AMBIGUOUS;
			return 0;
		}
		h->synack_time = bpf_ktime_get_ns();
		h->synack_seq = p->tcp_seq;
		h->flags |= HANDSHAKE_F_SYNACK;
		slot_idx = handshake_slot(p->tcp_seq + 1, key->ifindex);
		slot = bpf_map_lookup_elem(&handshake_synacks, &slot_idx);
		if (slot)
			*slot = p->tcp_seq + 1;
		return 0;
	}

	/* An ACK whose number is in its slot: the handshake's last packet if
	 * it acknowledges the SYN-ACK, from the client. Any other leaves the
	 * entry as it is. */
	slot_idx = handshake_slot(p->tcp_ack, key->ifindex);
	slot = bpf_map_lookup_elem(&handshake_synacks, &slot_idx);
	if (!h || !(h->flags & HANDSHAKE_F_SYNACK) || h->client != dir || p->tcp_ack != h->synack_seq + 1) {
		/* The handshake this slot awaited was forgotten (the LRU), or
		 * this is another connection's ACK with the same number. */
		if (!h && slot && *slot == p->tcp_ack)
			*slot = 0;
		return 0;
	}
	if (slot && *slot == p->tcp_ack)
		*slot = 0;
	if (!(h->flags & HANDSHAKE_F_AMBIGUOUS)) {
		now = bpf_ktime_get_ns();
		handshake_done(key, h, now);
	}
	bpf_map_delete_elem(&handshake_pending, &hk);
	return 0;
}

/* handshake_observe hands TCP SYNs, SYN-ACKs and the ACKs whose number a
 * SYN-ACK awaits (handshake_synacks) to handshake_track. Every other
 * segment pays one array read. */
static __always_inline void handshake_observe(const struct pkt *p, const struct flow_key *key)
{
	__u32 flags = p->tcp_flags, idx;
	__u32 *slot;

	if (key->proto != IPPROTO_TCP || p->result != PARSE_OK || p->off.l4 == 0)
		return;
	if (flags & (TCP_FLAG_FIN | TCP_FLAG_RST))
		return;
	if (flags & TCP_FLAG_SYN) {
		handshake_track(p, key);
		return;
	}
	if (!(flags & TCP_FLAG_ACK))
		return;
	idx = handshake_slot(p->tcp_ack, key->ifindex);
	slot = bpf_map_lookup_elem(&handshake_synacks, &idx);
	if (slot && *slot == p->tcp_ack && p->tcp_ack)
		handshake_track(p, key);
}

#endif
