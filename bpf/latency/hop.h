/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The latency capability: stamps of TCP segments at every hook, for
 * per-hop latency, and the trace context of the HTTP requests they carry.
 *
 * At each hook, a TCP segment whose payload starts with an HTTP/1.x
 * request method and a space is a request's start: it is stamped
 * (LATENCY_KIND_REQUEST: the time, the hook's flow key, the sequence
 * number of its first payload byte and its payload bytes) and its header
 * block scanned for a trace context (trace.h), across the segments that
 * follow. The stamp waits for the scan's end: it goes out with the context
 * found, in one record; without one (or with one that says its trace is not
 * sampled), only for the requests the untraced sampling keeps
 * (latency_untraced_threshold, decided alike at every hook from the 5-tuple
 * and the first sequence number), since such a request links to no
 * recorded trace and every stamp costs the ring, the matcher and the
 * latency log. The trace id carried in TCP option 25 (OpenTelemetry eBPF
 * Instrumentation, formerly Beyla) or IPv4 option 136 (Cilium) is read
 * from the request's first segment. At latency_sample_threshold, any TCP
 * segment with payload is stamped too (LATENCY_KIND_SAMPLED).
 *
 * Userspace (internal/hop) matches the stamps of one segment across hooks
 * by the inner 5-tuple and the sequence range, so the flow key's MACs,
 * interface and direction (which differ per hook) never decide anything
 * here: the sampling decision hashes the 5-tuple and the sequence number
 * only, so that every hook keeps the same segments.
 *
 * GSO and GRO: a hook before segmentation (a pod's veth, the overlay
 * device) sees a super-packet [seq, seq + 64 KiB), the NIC the segments
 * cut from it. A request's first segment has the super-packet's sequence
 * number at every hook, so requests match whatever the offloads do. A
 * sampled super-packet is kept by its first sequence number: its first
 * wire segment, which has the same number, is kept at every other hook;
 * its later segments are decided on their own numbers at hooks that see
 * them apart, and match the super-packet's stamp only by falling within its
 * range [Seq, Seq + Len) (the matcher's call).
 *
 * Delivery: one ring buffer record per stamp or context, reserved and
 * submitted in place; a request's stamp and its context go in one record,
 * which halves what a traced request costs the ring and its reader: the
 * stamp waits for the scan, with the time taken before it (in the scan's
 * state when the scan goes on past the first segment). A per-CPU array staged before the ring would only
 * add a copy: every record has to reach userspace anyway, and the ring
 * keeps each CPU's records in order with one reservation. A full ring is
 * counted per kind of record.
 *
 * Scan state per request and hook lives in an LRU hash (latency_scans,
 * keyed by the flow key, which holds the hook): a flood of requests
 * forgets the oldest scans rather than refusing new ones. Looking that
 * table up for every TCP segment with payload would cost each a hash of
 * a 60-byte key; instead a slot array indexed by a hash of the connection
 * and the hook holds a tag of the connection and the sequence number its
 * scan awaits, and only a segment whose connection holds the slot looks
 * the table up. A scan the LRU forgot, or whose slot another
 * connection's scan took, is counted (LATENCY_SCAN_EVICTED); a scan still
 * waiting when its connection's next request starts is given up and
 * counted (LATENCY_SCAN_ABANDONED).
 */
#ifndef LOUPE_LATENCY_HOP_H
#define LOUPE_LATENCY_HOP_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "flow.h"
#include "parse.h"
#include "pkt.h"
#include "trace.h"

enum latency_counter {
	LATENCY_REQUESTS = 0,       /* request starts seen: stamped and their headers scanned */
	LATENCY_FOUND_TRACEPARENT,  /* contexts found, per source */
	LATENCY_FOUND_B3,
	LATENCY_FOUND_B3_SINGLE,
	LATENCY_FOUND_TCP_OPTION,
	LATENCY_FOUND_IP_OPTION,
	LATENCY_NOT_FOUND,          /* the header block ended without a context */
	LATENCY_SCAN_LIMIT,         /* not fully scanned: latency_scan_limit bytes reached */
	LATENCY_SCAN_EVICTED,       /* not fully scanned: the scan's state was forgotten (LRU, slot taken) */
	LATENCY_SCAN_OUT_OF_ORDER,  /* not fully scanned: a segment came after a gap */
	LATENCY_SCAN_LOAD_ERROR,    /* not fully scanned: the payload could not be read */
	LATENCY_SCAN_ABANDONED,     /* not fully scanned: the connection's next request came first (latency_scan_abandon) */
	LATENCY_MALFORMED,          /* trace headers with a bad or oversized value: no context from them */
	LATENCY_NOT_HTTP,           /* a scan met bytes no header block holds: ended */
	LATENCY_SCAN_TABLE_FULL,    /* a scan's state could not be stored: not continued */
	LATENCY_SAMPLED,            /* segments stamped by the sampling rate */
	LATENCY_RING_FULL_REQUEST,  /* records lost, the ring full: request stamps */
	LATENCY_RING_FULL_SAMPLED,  /* ...sampled stamps */
	LATENCY_RING_FULL_CONTEXT,  /* ...contexts */
	LATENCY_SCAN_REUSED,        /* request starts judged as at the hook before on this CPU: not scanned again */
	LATENCY_UNTRACED_SKIPPED,   /* requests without a context, not stamped (the untraced sampling) */
	LATENCY_UNSAMPLED_SKIPPED,  /* requests whose context says not sampled, not stamped (likewise) */
	LATENCY_COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATENCY_COUNTER_MAX);
	__type(key, __u32);   /* Key: enum latency_counter */
	__type(value, __u64); /* Value: on this CPU */
} latency_counters SEC(".maps");

/* hop.Kind. */
enum latency_kind {
	LATENCY_KIND_REQUEST = 1,
	LATENCY_KIND_SAMPLED = 2,
};

enum latency_record {
	LATENCY_REC_STAMP = 1,
	LATENCY_REC_CONTEXT = 2,
	LATENCY_REC_STAMP_CONTEXT = 3, /* a request's stamp and the context of its first segment */
};

/* One record of the ring: a stamp or a context. 104 bytes. */
struct latency_event {
	__u64 time;           /* bpf_ktime_get_ns at the hook */
	struct flow_key key;  /* the hook's: the inner packet's when tunnelled */
	__u32 seq;            /* stamp: the first payload byte's; context: the request's first byte's */
	__u32 len;            /* stamp: payload bytes of the buffer */
	__u8 record;          /* enum latency_record */
	__u8 kind;            /* stamp: enum latency_kind; context: enum trace_source */
	__u8 tunneled;        /* seen inside a tunnel */
	__u8 source;          /* stamp and context: the context's enum trace_source */
	__u8 trace_id[16];
	__u8 span_id[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized from Go: latency.ring_size */
} latency_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* resized from Go: latency.table_size */
	__type(key, struct flow_key);
	__type(value, struct trace_scan);
} latency_scans SEC(".maps");

/* What the scan of a request's first segment found, kept for the hooks
 * after: a segment crosses a node's hooks one after the other on one CPU
 * (a pod's veth, the overlay device, the NIC, in one softirq), and the same
 * bytes give the same verdict at each, so only the first hook scans them.
 * Per CPU, a few entries by hash; only verdicts that end the scan (found,
 * ended, not HTTP) are kept: a scan that goes on has per-hook state in
 * latency_scans. */
#define LATENCY_SEEN 8

struct latency_seen {
	__u64 hash; /* trace_scratch.seg_hash; 0: empty */
	/* The segment itself, compared whole: a hash alone could be made to
	 * collide by a local user, and hand one connection's verdict (its
	 * trace id) to another's request. */
	__u8 addrs[32]; /* source and destination address, as in the flow key */
	__u16 sport;
	__u16 dport;
	__u32 seq;
	__u32 len;
	__u8 proto;
	__u8 outcome;
	__u8 malformed;
	__u8 source;
	__u8 flags;
	__u8 pad[3];
	__u8 trace_id[16];
	__u8 span_id[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATENCY_SEEN);
	__type(key, __u32);
	__type(value, struct latency_seen);
} latency_seen SEC(".maps");

/* A scan's slot: the tag of its connection and hook (high 32 bits) and the
 * sequence number it awaits; 0: none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 32768); /* resized from Go with latency_slot_mask */
	__type(key, __u32);
	__type(value, __u64);
} latency_slots SEC(".maps");

/* Set from Go before load. A segment is sampled when the hash of its
 * 5-tuple and sequence number is below the threshold: 2^32 / N for 1 in
 * N, 0 for none. */
volatile const __u64 latency_sample_threshold = 0;
/* Likewise for the requests without a trace context, by the hash of their
 * 5-tuple and first sequence number: 2^32 for all of them. A request with a
 * context is always stamped. */
volatile const __u64 latency_untraced_threshold = 1ULL << 32;
/* The ring's bytes not yet read past which a record wakes the reader (a
 * quarter of the ring, set from Go). Below it no record does: the reader
 * drains the ring on a period of its own (internal/capability/latency,
 * readPeriod). By default a record wakes the reader whenever the reader has
 * caught up, which at a few thousand records a second is nearly every
 * record: a wake-up each (an interrupt raised from the hook, the reader's
 * thread scheduled in); at 2 000 requests/s they took about half of the
 * agent's CPU (docs/architecture.md, "Reading the ring"). */
volatile const __u64 latency_wake_bytes = 1 << 18;
/* Bytes of a request scanned for its trace context, at most. */
volatile const __u32 latency_scan_limit = 16384;
volatile const __u32 latency_slot_mask = 32767;

static __always_inline void latency_count(enum latency_counter c)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&latency_counters, &key);

	if (v)
		*v += 1;
}

static __always_inline __u64 latency_mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

/* latency_conn_hash hashes the packet's 5-tuple, as it goes (not both
 * directions alike: a segment and its hops share a direction): the same
 * at every hook, whatever the MACs and the interface. */
static __always_inline __u64 latency_conn_hash(const struct flow_key *key)
{
	__u64 h = 0x9e3779b97f4a7c15ULL, w;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		/* memcpy: the key is only 4-byte aligned. */
		__builtin_memcpy(&w, &key->src_addr[i * 8], 8);
		h = latency_mix(h, w);
	}
	return latency_mix(h, (__u64)key->src_port << 32 | (__u64)key->dst_port << 16 | key->proto);
}

/* latency_is_request tells whether the payload's first bytes w (n of them,
 * little-endian) are an HTTP/1.x method and a space. */
static __always_inline int latency_is_request(__u64 w, __u32 n)
{
	__u64 w4 = w & 0xffffffffULL, w5 = w & 0xffffffffffULL, w6 = w & 0xffffffffffffULL;

	if (n >= 4 && (w4 == 0x20544547ULL || w4 == 0x20545550ULL)) /* "GET ", "PUT " */
		return 1;
	if (n >= 5 && (w5 == 0x2054534f50ULL || w5 == 0x2044414548ULL)) /* "POST ", "HEAD " */
		return 1;
	if (n >= 6 && (w6 == 0x204843544150ULL || w6 == 0x204543415254ULL)) /* "PATCH ", "TRACE " */
		return 1;
	if (n >= 7 && (w & 0xffffffffffffffULL) == 0x204554454c4544ULL) /* "DELETE " */
		return 1;
	return n >= 8 && (w == 0x20534e4f4954504fULL || w == 0x205443454e4e4f43ULL); /* "OPTIONS ", "CONNECT " */
}

/* latency_emit writes a record to the ring, of the time given; ids, when
 * given, are the scan's trace and span ids, and source their enum
 * trace_source in a stamp-and-context record. */
static __always_inline void latency_emit(const struct flow_key *key, __u8 record, __u8 kind, __u8 source, __u32 seq,
					 __u32 len, __u64 time, __u8 tunneled, const struct trace_scan *ids)
{
	struct latency_event *ev = bpf_ringbuf_reserve(&latency_events, sizeof(*ev), 0);

	if (!ev) {
		if (record != LATENCY_REC_STAMP)
			latency_count(LATENCY_RING_FULL_CONTEXT);
		if (record == LATENCY_REC_CONTEXT)
			return;
		latency_count(kind == LATENCY_KIND_REQUEST ? LATENCY_RING_FULL_REQUEST : LATENCY_RING_FULL_SAMPLED);
		return;
	}
	ev->time = time;
	ev->key = *key;
	ev->seq = seq;
	ev->len = len;
	ev->record = record;
	ev->kind = kind;
	ev->tunneled = tunneled;
	ev->source = source;
	if (ids) {
		__builtin_memcpy(ev->trace_id, ids->trace_id, sizeof(ev->trace_id));
		__builtin_memcpy(ev->span_id, ids->span_id, sizeof(ev->span_id));
	} else {
		__builtin_memset(ev->trace_id, 0, sizeof(ev->trace_id) + sizeof(ev->span_id));
	}
	bpf_ringbuf_submit(ev, bpf_ringbuf_query(&latency_events, BPF_RB_AVAIL_DATA) >= latency_wake_bytes
				       ? BPF_RB_FORCE_WAKEUP
				       : BPF_RB_NO_WAKEUP);
}

/* latency_stamp_hold keeps the stamp that waits in the scan, which goes on
 * past the request's first segment: the stamp goes out when the scan ends,
 * with the context or without. */
static __always_inline void latency_stamp_hold(struct trace_scratch *s)
{
	if (!s->stamp_pending)
		return;
	s->stamp_pending = 0;
	s->scan.stamp_time = s->stamp_time;
	s->scan.stamp_len = s->seg_len;
	s->scan.stamp |= TRACE_STAMP_HELD | (s->tunneled ? TRACE_STAMP_TUNNELED : 0);
}

/* latency_stamp_untraced ends the scan of a request without a context (or
 * with one of a trace not sampled): its stamp (waiting, or held since its
 * first segment) goes out alone if the untraced sampling keeps the request,
 * and is dropped and counted (skipped: LATENCY_UNTRACED_SKIPPED or
 * LATENCY_UNSAMPLED_SKIPPED) otherwise. This and latency_context are global
 * functions: inline, the records they write took stack in latency_scan's
 * frame, which the scan's chain of calls shares. */
__noinline int latency_stamp_untraced(const struct flow_key *key, struct trace_scratch *s, enum latency_counter skipped)
{
	__u8 held;

	if (!key || !s)
		return 0;
	held = s->scan.stamp & TRACE_STAMP_HELD;
	if (!s->stamp_pending && !held)
		return 0;
	s->scan.stamp &= ~TRACE_STAMP_HELD;
	if (!(s->scan.stamp & TRACE_STAMP_KEEP)) {
		s->stamp_pending = 0;
		latency_count(skipped);
		return 0;
	}
	if (s->stamp_pending) {
		s->stamp_pending = 0;
		latency_emit(key, LATENCY_REC_STAMP, LATENCY_KIND_REQUEST, 0, s->seq, s->seg_len, s->stamp_time,
			     s->tunneled, NULL);
		return 0;
	}
	latency_emit(key, LATENCY_REC_STAMP, LATENCY_KIND_REQUEST, 0, s->scan.start_seq, s->scan.stamp_len,
		     s->scan.stamp_time, !!(s->scan.stamp & TRACE_STAMP_TUNNELED), NULL);
	return 0;
}

/* latency_context reports the scan's context (source src), in one record
 * with the request's stamp: the stamp that waits (the context was in the
 * request's first segment) or the one held since it. A context with
 * neither (none is expected) goes alone.
 *
 * A context that says its trace is not sampled (traceparent's flags, b3's
 * sampling state 0) is treated as no context, and not reported: its trace
 * is not recorded, so hop spans would hang off no span, and under head
 * sampling most requests carry such a context. The untraced sampling
 * decides whether the request is stamped. */
__noinline int latency_context(const struct flow_key *key, struct trace_scratch *s, __u8 src)
{
	if (!key || !s)
		return 0;
	if (s->scan.flags & TRACE_F_UNSAMPLED)
		return latency_stamp_untraced(key, s, LATENCY_UNSAMPLED_SKIPPED);
	if (s->stamp_pending) {
		s->stamp_pending = 0;
		latency_emit(key, LATENCY_REC_STAMP_CONTEXT, LATENCY_KIND_REQUEST, src, s->seq, s->seg_len,
			     s->stamp_time, s->tunneled, &s->scan);
		return 0;
	}
	if (s->scan.stamp & TRACE_STAMP_HELD) {
		s->scan.stamp &= ~TRACE_STAMP_HELD;
		latency_emit(key, LATENCY_REC_STAMP_CONTEXT, LATENCY_KIND_REQUEST, src, s->scan.start_seq,
			     s->scan.stamp_len, s->scan.stamp_time, !!(s->scan.stamp & TRACE_STAMP_TUNNELED), &s->scan);
		return 0;
	}
	latency_emit(key, LATENCY_REC_CONTEXT, src, 0, s->scan.start_seq, 0, bpf_ktime_get_ns(), s->tunneled, &s->scan);
	return 0;
}

/* The TCP option OpenTelemetry eBPF Instrumentation (Beyla) writes: kind
 * 25, length 26, the trace id (16 bytes) and the span id (8 bytes). */
#define TCPOPT_TRACE 25
#define TCPOPT_TRACE_LEN 26
/* Cilium's IPv4 trace id option (IPOPT_SID's number): type 136, length 4,
 * 6 or 10, the id big-endian in 2, 4 or 8 bytes. */
#define IPOPT_TRACE 136
#define OPTIONS_MAX 40

/* latency_option_find walks the n option bytes in s->line, IPv4's (ip)
 * or TCP's, for a trace id: found, it is put in s->scan and its source
 * returned; 0 otherwise. A global function: the walk's offsets depend on
 * each option's length, and checked inline it multiplied the paths of its
 * caller. */
__noinline int latency_option_find(struct trace_scratch *s, __u32 n, __u32 ip)
{
	volatile __u32 *at;

	if (!s || n > OPTIONS_MAX)
		return 0;
	/* The walk's position lives in memory, not in a register: the
	 * verifier then knows nothing of it at each step and checks one
	 * state per step, where a register's exact value made it follow
	 * every sequence of option lengths. */
	at = &s->opt_at;
	*at = 0;
	for (int k = 0; k < OPTIONS_MAX; k++) {
		__u32 i = *at;
		__u8 type, len;

		if (i + 1 >= n)
			break;
		type = s->line[i & 63];
		if (type == 0) /* end of options */
			break;
		if (type == 1) { /* no-op */
			*at = i + 1;
			continue;
		}
		len = s->line[(i + 1) & 63];
		if (len < 2 || i + len > n)
			break;
		if (ip && type == IPOPT_TRACE && (len == 4 || len == 6 || len == 10)) {
			__builtin_memset(s->scan.trace_id, 0, sizeof(s->scan.trace_id) + sizeof(s->scan.span_id));
			for (__u32 b = 0; b < 8; b++) {
				if (b + 2 >= len)
					break;
				s->scan.trace_id[(16 - (len - 2) + b) & 15] = s->line[(i + 2 + b) & 63];
			}
			return TRACE_SRC_IP_OPTION;
		}
		if (!ip && type == TCPOPT_TRACE && len == TCPOPT_TRACE_LEN) {
			for (__u32 b = 0; b < 16; b++)
				s->scan.trace_id[b] = s->line[(i + 2 + b) & 63];
			for (__u32 b = 0; b < 8; b++)
				s->scan.span_id[b] = s->line[(i + 18 + b) & 63];
			return TRACE_SRC_TCP_OPTION;
		}
		*at = i + len;
	}
	return 0;
}

/* latency_options reports the trace id of the IPv4 option 136 and of the
 * TCP option 25 of the request whose first segment is skb, if it carries
 * them. */
static __always_inline void latency_options(struct __sk_buff *skb, const struct pkt *p, const struct flow_key *key,
					    struct trace_scratch *s)
{
	for (int pass = 0; pass < 2; pass++) {
		__u32 from, n;
		int src;

		if (pass == 0) {
			if (key->eth_type != ETH_P_IP || p->off.l4 < p->off.l3 + 24)
				continue;
			from = p->off.l3 + 20;
			n = p->off.l4 - from;
		} else {
			if (p->off.payload < p->off.l4 + 20 + TCPOPT_TRACE_LEN)
				continue;
			from = p->off.l4 + 20;
			n = p->off.payload - from;
		}
		asm volatile("" : "+r"(n));
		if (n == 0 || n > OPTIONS_MAX || bpf_skb_load_bytes(skb, from, s->line, n) < 0)
			continue;
		src = latency_option_find(s, n, pass == 0);
		if (!src)
			continue;
		latency_count(src == TRACE_SRC_IP_OPTION ? LATENCY_FOUND_IP_OPTION : LATENCY_FOUND_TCP_OPTION);
		s->keep = 1; /* traced: its stamp goes out */
		latency_emit(key, LATENCY_REC_CONTEXT, src, 0, s->seq, 0, bpf_ktime_get_ns(), s->tunneled, &s->scan);
	}
}

/* latency_slot_of finds the slot of the connection of hash h at the hook
 * of key, and the tag the connection writes there, into s. */
static __always_inline void latency_slot_of(struct trace_scratch *s, __u64 h, const struct flow_key *key)
{
	__u64 x = latency_mix(h, (__u64)key->ifindex << 1 | key->direction);

	s->slot = (__u32)x & latency_slot_mask;
	s->tag = (__u32)(x >> 32) | 1;
}

/* latency_scan_end forgets the scan of key: its entry, if stored, and its
 * slot, if still its. */
static __always_inline void latency_scan_end(const struct flow_key *key, __u64 *slot, __u32 tag, int stored)
{
	if (stored)
		bpf_map_delete_elem(&latency_scans, key);
	if (slot && (__u32)(*slot >> 32) == tag)
		*slot = 0;
}

/* latency_scan_abandon gives up the scan of an earlier request that the
 * connection of key still awaits at this hook, now that a request starts
 * at seq (s holds the connection's slot and tag): the segment it awaits
 * will not come here any more. So it goes when a request's first segment
 * is sent again after the rest already passed the hook: the scan started
 * again awaits bytes that are gone, and without a bound it would wait in
 * the table, uncounted, for as long as the LRU kept it. The new request's
 * scan replaces it. The same first segment sent again while its own scan
 * awaits the next one starts that scan again, and is not counted. */
static __always_inline void latency_scan_abandon(const struct flow_key *key, struct trace_scratch *s, __u32 seq)
{
	__u32 idx = s->slot;
	__u64 *slot = bpf_map_lookup_elem(&latency_slots, &idx);
	struct trace_scan *st;

	if (!slot || !*slot || (__u32)(*slot >> 32) != s->tag)
		return;
	st = bpf_map_lookup_elem(&latency_scans, key);
	if (!st) {
		latency_count(LATENCY_SCAN_EVICTED);
		*slot = 0;
		return;
	}
	if (st->start_seq != seq)
		latency_count(LATENCY_SCAN_ABANDONED);
	s->stored = 1;
}

/* latency_seen_same tells whether seen is the verdict on the segment s
 * and key describe: its 5-tuple, sequence number and length. */
static __always_inline int latency_seen_same(const struct latency_seen *seen, const struct trace_scratch *s,
					     const struct flow_key *key)
{
	__u64 diff = 0, a, b;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		/* memcpy: the key is only 4-byte aligned. */
		__builtin_memcpy(&a, &seen->addrs[i * 8], 8);
		__builtin_memcpy(&b, &key->src_addr[i * 8], 8);
		diff |= a ^ b;
	}
	return !diff && seen->sport == key->src_port && seen->dport == key->dst_port && seen->proto == key->proto &&
	       seen->seq == s->seq && seen->len == s->seg_len;
}

/* latency_seen_get takes the verdict on the request's first segment that
 * a hook before this one reached on this CPU, if any: returns 1 when it
 * did, and the scan is done. Global functions, these two: inline, their
 * lookups' stack went into latency_scan's frame, which the scan's chain of
 * calls shares. */
__noinline int latency_seen_get(struct trace_scratch *s, const struct flow_key *key)
{
	__u32 idx;
	struct latency_seen *seen;

	if (!s || !key || !s->seg_hash)
		return 0;
	idx = s->seg_hash & (LATENCY_SEEN - 1);
	seen = bpf_map_lookup_elem(&latency_seen, &idx);
	if (!seen || seen->hash != s->seg_hash || !latency_seen_same(seen, s, key))
		return 0;
	s->outcome = seen->outcome;
	s->malformed = seen->malformed;
	s->scan.source = seen->source;
	s->scan.flags = seen->flags;
	__builtin_memcpy(s->scan.trace_id, seen->trace_id, sizeof(seen->trace_id));
	__builtin_memcpy(s->scan.span_id, seen->span_id, sizeof(seen->span_id));
	latency_count(LATENCY_SCAN_REUSED);
	return 1;
}

/* latency_seen_put keeps the verdict on a request's first segment for the
 * hooks after this one, when it ends the scan. */
__noinline int latency_seen_put(const struct trace_scratch *s, const struct flow_key *key)
{
	__u32 idx;
	struct latency_seen *seen;

	if (!s || !key || !s->seg_hash ||
	    (s->outcome != TRACE_FOUND && s->outcome != TRACE_END && s->outcome != TRACE_NOT_HTTP))
		return 0;
	idx = s->seg_hash & (LATENCY_SEEN - 1);
	seen = bpf_map_lookup_elem(&latency_seen, &idx);
	if (!seen)
		return 0;
	seen->hash = s->seg_hash;
	__builtin_memcpy(seen->addrs, key->src_addr, sizeof(seen->addrs));
	seen->sport = key->src_port;
	seen->dport = key->dst_port;
	seen->proto = key->proto;
	seen->seq = s->seq;
	seen->len = s->seg_len;
	seen->outcome = s->outcome;
	seen->malformed = s->malformed;
	seen->source = s->scan.source;
	seen->flags = s->scan.flags;
	__builtin_memcpy(seen->trace_id, s->scan.trace_id, sizeof(seen->trace_id));
	__builtin_memcpy(seen->span_id, s->scan.span_id, sizeof(seen->span_id));
	return 0;
}

/* latency_scan scans the segment's part of the request in the scratch's
 * scan (latency_track prepared it) and ends or keeps the scan: the context
 * found is reported, a scan that goes on is stored and takes its slot.
 *
 * A global function called from the entry program, not from
 * latency_track: the scan's chain of calls (this, trace_window,
 * trace_line_at, trace_judge and the helpers it calls) then starts on the
 * entry program's frame alone, and fits the 512 bytes of stack the
 * chain shares. Its state is in the scratch, not on the stack, for the
 * same reason. */
__noinline int latency_scan(struct __sk_buff *skb, const struct flow_key *key)
{
	struct trace_scratch *s = trace_scratch_get();
	__u32 left, idx;
	__u64 *slot;

	if (!skb || !key || !s)
		return 0;
	left = latency_scan_limit > s->scan.scanned ? latency_scan_limit - s->scan.scanned : 0;
	s->limited = s->seg_len > left;
	s->len = s->limited ? left : s->seg_len;
	s->outcome = TRACE_GO_ON;
	s->malformed = 0;
	if (!latency_seen_get(s, key)) {
		trace_scan_buffer(skb, s);
		latency_seen_put(s, key);
	}
	s->scan.scanned += s->len;
	if (s->malformed)
		latency_count(LATENCY_MALFORMED);
	idx = s->slot;
	slot = bpf_map_lookup_elem(&latency_slots, &idx);
	switch (s->outcome) {
	case TRACE_FOUND:
		latency_count(s->scan.source == TRACE_SRC_TRACEPARENT ? LATENCY_FOUND_TRACEPARENT :
			      s->scan.source == TRACE_SRC_B3 ? LATENCY_FOUND_B3 : LATENCY_FOUND_B3_SINGLE);
		latency_context(key, s, s->scan.source);
		break;
	case TRACE_END:
		if (s->scan.flags & TRACE_F_B3_TRACE) {
			/* X-B3-TraceId without its span id: the trace all the
			 * same. */
			if (!(s->scan.flags & TRACE_F_B3_SPAN))
				__builtin_memset(s->scan.span_id, 0, sizeof(s->scan.span_id));
			latency_count(LATENCY_FOUND_B3);
			latency_context(key, s, TRACE_SRC_B3);
		} else {
			latency_count(LATENCY_NOT_FOUND);
		}
		break;
	case TRACE_NOT_HTTP:
		latency_count(LATENCY_NOT_HTTP);
		break;
	case TRACE_LOAD_ERROR:
		latency_count(LATENCY_SCAN_LOAD_ERROR);
		break;
	default:
		if (s->limited) {
			latency_count(LATENCY_SCAN_LIMIT);
			break;
		}
		/* The block goes on in the next segment. */
		s->scan.next_seq = s->seq + s->seg_len;
		latency_stamp_hold(s);
		if (bpf_map_update_elem(&latency_scans, key, &s->scan, BPF_ANY)) {
			latency_count(LATENCY_SCAN_TABLE_FULL);
			break;
		}
		if (slot) {
			__u64 old = *slot;

			if (old && (__u32)(old >> 32) != s->tag)
				latency_count(LATENCY_SCAN_EVICTED); /* another connection's scan loses its slot */
			*slot = (__u64)s->tag << 32 | s->scan.next_seq;
		}
		return 0;
	}
	latency_stamp_untraced(key, s, LATENCY_UNTRACED_SKIPPED);
	/* Most requests' header blocks end in their first segment: their
	 * scan was never stored, and deleting it would cost a locked hash
	 * lookup per request for nothing. */
	latency_scan_end(key, slot, s->tag, s->stored);
	return 0;
}

/* latency_track stamps and samples the TCP segment with payload of p, and
 * tells whether its header block is to be scanned (latency_scan): a
 * request's first segment, or the segment a scan awaits, whose scan it
 * puts in the scratch. A global function, as dns_track: verified once, on
 * its own, and only called for TCP segments with payload. */
__noinline int latency_track(struct __sk_buff *skb, const struct pkt *p, const struct flow_key *key)
{
	struct trace_scratch *s = trace_scratch_get();
	struct trace_scan *st;
	__u32 len, seq, n, idx;
	__u64 h, w, *slot;

	if (!skb || !p || !key || !s)
		return 0;
	s->stamp_pending = 0;
	s->seg_hash = 0;
	len = pkt_payload_len(skb, p, key->eth_type);
	if (len == 0)
		return 0;
	seq = p->tcp_seq;
	s->seq = seq;
	s->seg_len = len;
	s->tunneled = p->tunnel != 0;
	s->off = p->off.payload;
	n = len < 8 ? len : 8;
	asm volatile("" : "+r"(n));
	/* Through the scratch: the stack is the entry program's. */
	__builtin_memset(s->line, 0, 8);
	if (n == 0 || n > 8 || bpf_skb_load_bytes(skb, s->off, s->line, n) < 0)
		return 0;
	__builtin_memcpy(&w, s->line, 8);
	h = latency_conn_hash(key);
	latency_slot_of(s, h, key);

	if (latency_is_request(w, n)) {
		/* First, before any call: h kept across them would take stack
		 * the deepest chain of calls cannot spare. */
		s->seg_hash = latency_mix(h, (__u64)seq << 32 | len) | 1;
		/* Decided alike at every hook, as the segment sampling. */
		s->keep = (latency_mix(h, seq) >> 32) < latency_untraced_threshold;
		latency_count(LATENCY_REQUESTS);
		/* Its stamp waits for the scan (latency_scan writes it). */
		s->stamp_time = bpf_ktime_get_ns();
		s->stamp_pending = 1;
		latency_options(skb, p, key, s);
		s->stored = 0;
		latency_scan_abandon(key, s, seq);
		__builtin_memset(&s->scan, 0, sizeof(s->scan));
		s->scan.start_seq = seq;
		s->scan.flags = TRACE_F_SKIP_LINE; /* the request line */
		s->scan.stamp = s->keep ? TRACE_STAMP_KEEP : 0;
		return 1;
	}

	if (latency_sample_threshold && (latency_mix(h, seq) >> 32) < latency_sample_threshold) {
		latency_count(LATENCY_SAMPLED);
		latency_emit(key, LATENCY_REC_STAMP, LATENCY_KIND_SAMPLED, 0, seq, len, bpf_ktime_get_ns(), s->tunneled,
			     NULL);
	}

	/* Does a scan of this connection, at this hook, await it? */
	idx = s->slot;
	slot = bpf_map_lookup_elem(&latency_slots, &idx);
	if (!slot || (__u32)(*slot >> 32) != s->tag)
		return 0;
	if ((__u32)*slot != seq) {
		/* Sent again (before the number awaited): nothing new. After
		 * it: the bytes between were not seen here. */
		if ((__s32)(seq - (__u32)*slot) > 0) {
			latency_count(LATENCY_SCAN_OUT_OF_ORDER);
			latency_scan_end(key, slot, s->tag, 1);
		}
		return 0;
	}
	st = bpf_map_lookup_elem(&latency_scans, key);
	if (!st) {
		latency_count(LATENCY_SCAN_EVICTED);
		*slot = 0;
		return 0;
	}
	__builtin_memcpy(&s->scan, st, sizeof(s->scan));
	s->stored = 1;
	return 1;
}

/* latency_observe hands TCP segments with payload to latency_track, and
 * those it picks to latency_scan: every other packet pays the tests. */
static __always_inline void latency_observe(struct __sk_buff *skb, const struct pkt *p, const struct flow_key *key)
{
	if (key->proto == IPPROTO_TCP && p->result == PARSE_OK && p->off.l4 && skb->len > p->off.payload &&
	    latency_track(skb, p, key))
		latency_scan(skb, key);
}

#endif
