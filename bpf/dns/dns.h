/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The DNS capability: queries and responses over UDP and TCP port 53, seen
 * at the TC hook, matched by DNS id and 5-tuple.
 *
 * A query (QR 0, one question) enters dns_queries, keyed by its 5-tuple,
 * its id and the interface, with the time it crossed the hook and its name.
 * The response (QR 1) looks its query up under the reversed 5-tuple: the
 * latency is the response's time less the query's, both from the same
 * clock (bpf_ktime_get_ns) on this host, and its response code is the
 * header's. The interface is part of the key: a query forwarded through
 * the host crosses two interfaces, and each pair of hooks times its own
 * exchange (the first hop's latency includes the host's forwarding).
 *
 * Results go to userspace through a table keyed by the flow key, the
 * packet's own (dns_flows_a|b): per flow and interval, the last exchange
 * (a query's flow: its id and name; a response's flow: its id, name,
 * response code and latency). Why a table and not a ring buffer of
 * exchanges: a flow record carries one value per interval, so a table
 * keeps exactly what the records need, bounded by the flows with DNS
 * traffic, costs one update per message and no wake-up of the agent, and
 * under a flood of queries it keeps the last per flow where a ring buffer
 * would lose the newest. The table pair swaps with the flow tables
 * (flows_interval), so that the results drained after a swap are those of
 * the flow records drained with it.
 *
 * Queries without a response are found by userspace: entries of
 * dns_queries older than dns.timeout are deleted and reported as timeouts
 * on the query's flow (the entry keeps its flow key for that). So the
 * table is a plain hash, not an LRU: a query the table cannot hold is
 * counted (DNS_PENDING_FULL), where an LRU would drop the oldest pending
 * query without a trace.
 *
 * Bounds: the name is kept in wire format, at most DNS_NAME_MAX bytes of
 * it (userspace makes it dotted, and marks a name cut short); the labels
 * are walked in a loop of at most DNS_NAME_MAX / 2 + 1 steps (a label takes
 * at least two bytes). Over TCP, the first message of a segment's payload
 * is read (after its 2-byte length); what follows it in the segment is
 * counted as not parsed, and a segment that continues a message is taken
 * for one that starts a message and, failing the header's checks, counted
 * as malformed.
 */
#ifndef LOUPE_DNS_H
#define LOUPE_DNS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "flow.h"
#include "latency.h"
#include "parse.h"
#include "pkt.h"
#include "../flows/flows.h"

#define DNS_PORT 53
#define DNS_HLEN 12       /* the header: id, flags, four counts */
#define DNS_NAME_MAX 64   /* bytes of a name kept, wire format; a power of two */
#define DNS_READ (DNS_HLEN + DNS_NAME_MAX)
#define DNS_TCP_PREFIX 2  /* over TCP, each message follows its length */
#define DNS_RCODES 16     /* the header's response code: 4 bits */

enum dns_counter {
	DNS_QUERIES = 0,          /* queries read */
	DNS_RESPONSES,            /* responses read */
	DNS_MATCHED,              /* responses matched to their query: a latency */
	DNS_UNMATCHED,            /* responses whose query was not seen (before the agent, elsewhere, or timed out) */
	DNS_REPEATED,             /* queries of an id already pending on their 5-tuple: the first one's time kept */
	DNS_PENDING_FULL,         /* queries not tracked: dns_queries is full */
	DNS_RESULTS_FULL,         /* results lost: the per-flow table is full */
	DNS_NAME_TRUNCATED,       /* names longer than DNS_NAME_MAX: kept cut */
	DNS_NAME_BAD,             /* question names that do not parse: a compression pointer, past the message */
	DNS_NOT_PARSED_SHORT,     /* payload shorter than a DNS header (a TCP length and a header) */
	DNS_NOT_PARSED_MALFORMED, /* not a DNS message: a query without one question, a TCP length under a header */
	DNS_NOT_PARSED_LOAD,      /* the payload could not be read */
	DNS_NOT_PARSED_HEADERS,   /* port 53, but the transport header was not located */
	DNS_TCP_REST_NOT_PARSED,  /* TCP segments with more after their first message: the rest not read */
	DNS_COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DNS_COUNTER_MAX);
	__type(key, __u32);   /* Key: enum dns_counter */
	__type(value, __u64); /* Value: on this CPU */
} dns_counters SEC(".maps");

/* Responses by response code, and the latency of matched ones: exact per
 * message, where the per-flow table keeps one exchange per flow. */
struct dns_stats {
	__u64 rcodes[DNS_RCODES];
	__u64 latency_ns; /* sum */
	__u64 hist[LAT_BUCKETS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);              /* Key: 0 */
	__type(value, struct dns_stats); /* Value: on this CPU */
} dns_stats SEC(".maps");

/* A query awaiting its response: 48 bytes. Addresses in the flow key's
 * form (IPv4-mapped), ports in host order. */
struct dns_query_key {
	__u8 client[16];
	__u8 server[16];
	__u32 ifindex;
	__u16 client_port;
	__u16 server_port;
	__u16 id;
	__u8 proto;
	__u8 pad[5];
};

enum dns_flag {
	DNS_F_RESPONSE = 1 << 0,       /* a response: rcode holds its code */
	DNS_F_MATCHED = 1 << 1,        /* matched to its query: latency_ns holds the latency */
	DNS_F_NAME_TRUNCATED = 1 << 2, /* the name is longer than DNS_NAME_MAX: name holds its start */
	DNS_F_NAME_BAD = 1 << 3,       /* no name: the question did not parse, or there is none */
	DNS_F_TCP = 1 << 4,            /* over TCP */
};

/* 136 bytes. */
struct dns_query {
	__u64 time;            /* bpf_ktime_get_ns at the hook */
	struct flow_key flow;  /* the query's flow: where userspace reports a timeout */
	__u8 name_len;         /* bytes of name: the name's, terminating 0 included, or DNS_NAME_MAX */
	__u8 flags;            /* DNS_F_NAME_*, DNS_F_TCP */
	__u8 pad[2];
	__u8 name[DNS_NAME_MAX]; /* wire format: length-prefixed labels */
};

/* The pending queries and the per-flow results are allocated as they fill
 * (BPF_F_NO_PREALLOC): DNS is a small part of a host's traffic, and the
 * tables then cost memory in proportion to it rather than to their bound.
 * The kernel allocates in the program (bpf_mem_alloc), which the update of
 * a rare DNS packet can afford: measured, about 60 ns a message (a query
 * 460 ns against 400 preallocated, a response 386 against 330, in
 * BenchmarkTCSignals on a busy 2-CPU VM), for tables that take 5 MiB
 * preallocated at the default sizes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* resized from Go: dns.max_pending */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dns_query_key);
	__type(value, struct dns_query);
} dns_queries SEC(".maps");

/* The last exchange of a flow in an interval: 80 bytes. */
struct dns_result {
	__u64 latency_ns; /* DNS_F_MATCHED: the response's time less its query's */
	__u16 id;
	__u8 rcode;       /* DNS_F_RESPONSE: the header's RCODE */
	__u8 flags;       /* enum dns_flag */
	__u8 name_len;
	__u8 pad[3];
	__u8 name[DNS_NAME_MAX];
};

struct dns_flow_table {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); /* resized from Go: dns.max_flows */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct flow_key);     /* Key: the flow, as flows keys it */
	__type(value, struct dns_result); /* Value: its last exchange this interval */
} dns_flows_a SEC(".maps"), dns_flows_b SEC(".maps");

/* Per-CPU room for what does not fit the stack beside the entry program's
 * frame. lenbuf puts msg's name at an 8-byte boundary, so that copying it
 * takes 8-byte moves. */
struct dns_scratch {
	struct dns_query_key qk;
	struct dns_query q;
	struct dns_result r;
	__u8 lenbuf[4];     /* a TCP message's length */
	__u8 msg[DNS_READ]; /* the header and the start of the question */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dns_scratch);
} dns_scratch SEC(".maps");

static __always_inline void dns_count(enum dns_counter c)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&dns_counters, &key);

	if (v)
		*v += 1;
}

/* dns_name_len walks the labels of the question's name at name, of which
 * the message holds avail bytes, and returns the bytes to keep: the name's
 * (its terminating zero included), DNS_NAME_MAX for a longer name (flagged
 * truncated), 0 for a name that does not parse (flagged bad). A question's
 * name cannot be compressed: nothing it could point to comes before it. */
static __always_inline __u32 dns_name_len(const __u8 *name, __u32 avail, __u8 *flags)
{
	__u32 pos = 0;

	for (int i = 0; i < DNS_NAME_MAX / 2 + 1; i++) {
		__u8 l;

		if (pos >= avail)
			break;
		if (pos >= DNS_NAME_MAX) {
			*flags |= DNS_F_NAME_TRUNCATED;
			return DNS_NAME_MAX;
		}
		l = name[pos & (DNS_NAME_MAX - 1)];
		if (l == 0)
			return pos + 1;
		if (l > 63) /* a compression pointer (0xC0), or a reserved label type */
			break;
		pos += l + 1;
	}
	*flags |= DNS_F_NAME_BAD;
	return 0;
}

/* dns_record writes r as the flow's last exchange of this interval. */
static __always_inline void dns_record(const struct flow_key *key, const struct dns_result *r)
{
	long err;

	if (flows_interval())
		err = bpf_map_update_elem(&dns_flows_b, key, r, BPF_ANY);
	else
		err = bpf_map_update_elem(&dns_flows_a, key, r, BPF_ANY);
	if (err)
		dns_count(DNS_RESULTS_FULL);
}

/* dns_query_key_of makes the key of the exchange of the packet of key:
 * from the client to the server for a query, the reverse for a response. */
static __always_inline void dns_query_key_of(struct dns_query_key *qk, const struct flow_key *key, __u16 id,
					     int response)
{
	__builtin_memset(qk, 0, sizeof(*qk));
	if (response) {
		__builtin_memcpy(qk->client, key->dst_addr, 16);
		__builtin_memcpy(qk->server, key->src_addr, 16);
		qk->client_port = key->dst_port;
		qk->server_port = key->src_port;
	} else {
		__builtin_memcpy(qk->client, key->src_addr, 16);
		__builtin_memcpy(qk->server, key->dst_addr, 16);
		qk->client_port = key->src_port;
		qk->server_port = key->dst_port;
	}
	qk->ifindex = key->ifindex;
	qk->id = id;
	qk->proto = key->proto;
}

/* dns_stats_add counts a response of code rcode, and its latency (0: not
 * matched). */
static __always_inline void dns_stats_add(__u8 rcode, __u64 latency)
{
	__u32 zero = 0;
	struct dns_stats *st = bpf_map_lookup_elem(&dns_stats, &zero);

	if (!st)
		return;
	st->rcodes[rcode & (DNS_RCODES - 1)]++;
	if (latency) {
		st->latency_ns += latency;
		st->hist[latency_bucket(latency) & (LAT_BUCKETS - 1)]++;
	}
}

/* dns_track reads the DNS message at the start of p's payload and records
 * it: a query as pending, a response as its query's result.
 *
 * A global function, as capture_observe: verified once, on its own, and
 * called only for packets to or from port 53, so that every other packet
 * pays two comparisons for DNS. The key comes apart from p, for the same
 * reason. */
__noinline int dns_track(struct __sk_buff *skb, const struct pkt *p, const struct flow_key *key)
{
	__u32 zero = 0, off, len, avail, n, name_len;
	struct dns_scratch *s;
	struct dns_query *q;
	__u8 qr, rcode, flags = 0;
	__u16 id, qdcount;
	long err;

	if (!skb || !p || !key)
		return 0;
	if (p->result != PARSE_OK || p->off.l4 == 0) {
		dns_count(DNS_NOT_PARSED_HEADERS);
		return 0;
	}
	s = bpf_map_lookup_elem(&dns_scratch, &zero);
	if (!s)
		return 0;
	off = p->off.payload;
	len = pkt_payload_len(skb, p, key->eth_type);
	avail = len;
	if (key->proto == IPPROTO_TCP) {
		/* Handshakes, acknowledgements: no message. */
		if (len == 0)
			return 0;
		flags |= DNS_F_TCP;
		if (len < DNS_TCP_PREFIX + DNS_HLEN) {
			dns_count(DNS_NOT_PARSED_SHORT);
			return 0;
		}
		if (bpf_skb_load_bytes(skb, off, s->lenbuf, DNS_TCP_PREFIX) < 0) {
			dns_count(DNS_NOT_PARSED_LOAD);
			return 0;
		}
		avail = (__u32)s->lenbuf[0] << 8 | s->lenbuf[1];
		if (avail < DNS_HLEN) {
			dns_count(DNS_NOT_PARSED_MALFORMED);
			return 0;
		}
		off += DNS_TCP_PREFIX;
		len -= DNS_TCP_PREFIX;
		if (len > avail)
			dns_count(DNS_TCP_REST_NOT_PARSED);
		else
			avail = len; /* the message goes on in the next segments */
	} else if (len < DNS_HLEN) {
		dns_count(DNS_NOT_PARSED_SHORT);
		return 0;
	}

	n = avail < DNS_READ ? avail : DNS_READ;
	/* Hide what the compiler knows of n, or it drops the test below,
	 * which the verifier needs for the read's size. */
	asm volatile("" : "+r"(n));
	if (n < DNS_HLEN || n > DNS_READ)
		return 0;
	if (bpf_skb_load_bytes(skb, off, s->msg, n) < 0) {
		dns_count(DNS_NOT_PARSED_LOAD);
		return 0;
	}
	id = (__u16)s->msg[0] << 8 | s->msg[1];
	qr = s->msg[2] >> 7;
	rcode = s->msg[3] & (DNS_RCODES - 1);
	qdcount = (__u16)s->msg[4] << 8 | s->msg[5];
	if (!qr && qdcount != 1) {
		dns_count(DNS_NOT_PARSED_MALFORMED);
		return 0;
	}
	name_len = 0;
	if (qdcount == 1) {
		name_len = dns_name_len(&s->msg[DNS_HLEN], avail - DNS_HLEN, &flags);
		if (flags & DNS_F_NAME_TRUNCATED)
			dns_count(DNS_NAME_TRUNCATED);
		if (flags & DNS_F_NAME_BAD)
			dns_count(DNS_NAME_BAD);
	} else {
		/* A response without its question (a FORMERR may have none):
		 * no name of its own. */
		flags |= DNS_F_NAME_BAD;
	}
	dns_query_key_of(&s->qk, key, id, qr);

	if (!qr) {
		dns_count(DNS_QUERIES);
		s->q.time = bpf_ktime_get_ns();
		s->q.flow = *key;
		s->q.name_len = name_len;
		s->q.flags = flags;
		__builtin_memcpy(s->q.name, &s->msg[DNS_HLEN], DNS_NAME_MAX);
		/* NOEXIST: a query sent again keeps the first one's time, the
		 * time its client has been waiting since. */
		err = bpf_map_update_elem(&dns_queries, &s->qk, &s->q, BPF_NOEXIST);
		if (err == -EEXIST)
			dns_count(DNS_REPEATED);
		else if (err)
			dns_count(DNS_PENDING_FULL);
		s->r.latency_ns = 0;
		s->r.id = id;
		s->r.rcode = 0;
		s->r.flags = flags;
		s->r.name_len = name_len;
		__builtin_memcpy(s->r.name, &s->msg[DNS_HLEN], DNS_NAME_MAX);
		dns_record(key, &s->r);
		return 0;
	}

	dns_count(DNS_RESPONSES);
	s->r.id = id;
	s->r.rcode = rcode;
	s->r.latency_ns = 0;
	q = bpf_map_lookup_elem(&dns_queries, &s->qk);
	if (q) {
		__u64 now = bpf_ktime_get_ns();

		/* The name the client asked, whatever the response's
		 * question says. */
		s->r.latency_ns = now > q->time ? now - q->time : 1;
		s->r.flags = DNS_F_RESPONSE | DNS_F_MATCHED | (q->flags & ~DNS_F_TCP) | (flags & DNS_F_TCP);
		s->r.name_len = q->name_len;
		__builtin_memcpy(s->r.name, q->name, DNS_NAME_MAX);
		bpf_map_delete_elem(&dns_queries, &s->qk);
		dns_count(DNS_MATCHED);
	} else {
		s->r.flags = DNS_F_RESPONSE | flags;
		s->r.name_len = name_len;
		__builtin_memcpy(s->r.name, &s->msg[DNS_HLEN], DNS_NAME_MAX);
		dns_count(DNS_UNMATCHED);
	}
	dns_stats_add(rcode, s->r.latency_ns);
	dns_record(key, &s->r);
	return 0;
}

/* dns_observe hands a packet to or from port 53, over UDP or TCP, to
 * dns_track. */
static __always_inline void dns_observe(struct __sk_buff *skb, const struct pkt *p, const struct flow_key *key)
{
	if ((key->proto == IPPROTO_UDP || key->proto == IPPROTO_TCP) &&
	    (key->src_port == DNS_PORT || key->dst_port == DNS_PORT))
		dns_track(skb, p, key);
}

#endif
