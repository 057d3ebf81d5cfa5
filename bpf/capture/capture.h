/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The capture capability: find the connections that fail, in the kernel, and
 * capture and mirror exactly those.
 *
 * For every TCP connection a rule admits (conn.h: sampling by hash), each
 * segment with payload is scanned for HTTP/1.x status lines (http.h), and
 * its packets are kept in a ring (keep.h). When a status line matches a rule
 * (default 500-599), or a reset arrives and a rule asks for resets, the
 * trigger fires: an event goes to userspace (capture_events), the kept
 * packets are sent first (the request that failed), and from then on every
 * packet of the connection, both ways, is sent to userspace
 * (capture_packets) and cloned to the mirror interface, until one of the
 * rule's limits (packets, bytes, seconds) ends the trace.
 *
 * Rules change at runtime without reloading: userspace writes the config
 * slot the programs do not read, then flips capture_config_sel (one aligned
 * 32-bit store), so a program sees either the old rules or the new ones,
 * never half of each.
 */
#ifndef LOUPE_CAPTURE_H
#define LOUPE_CAPTURE_H

#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "conn.h"
#include "filter.h"
#include "flow.h"
#include "http.h"
#include "httpstats.h"
#include "keep.h"
#include "parse.h"
#include "pkt.h"

/* What capture_observe returns: run the admission program (filter.h). */
#define CAPTURE_ADMIT 1

#define CAPTURE_MAX_RULES 8
/* A perf sample's size is 16 bits wide: the bytes of a packet sent with it
 * stay below that, headers included. Only GSO/GRO super-packets are longer;
 * they are cut, with their length kept (CAPTURE_PACKETS_CUT). */
#define CAPTURE_MAX_CAPLEN 65000

enum capture_counter {
	CAPTURE_SEGMENTS_SCANNED = 0, /* TCP segments with payload scanned */
	CAPTURE_BYTES_SCANNED,        /* their payload bytes */
	CAPTURE_STATUS_LINES,         /* HTTP status lines found */
	CAPTURE_SPLIT_STATUS_LINES,   /* ...of which split across two segments */
	CAPTURE_TRIGGERS,             /* traces started */
	CAPTURE_TRIGGERS_RATE_LIMITED, /* triggers over the global rate: no trace */
	CAPTURE_EVENTS_LOST,          /* trigger events the ring buffer refused */
	CAPTURE_NOT_SCANNED_PARSE,    /* TCP payload not located: headers cut short */
	CAPTURE_NOT_SCANNED_LOAD,     /* bpf_skb_load_bytes failed mid-payload */
	CAPTURE_NOT_SCANNED_TOO_LONG, /* payload beyond SCAN_MAX_BYTES */
	CAPTURE_NOT_SCANNED_OPAQUE,   /* segments of a side that sent neither requests nor status lines: only their start checked */
	CAPTURE_NOT_SCANNED_CLIENT,   /* segments of a client (it sent requests): status lines come from servers */
	CAPTURE_CONNS_NEW,            /* connections entered in the table */
	CAPTURE_CONNS_NOT_ADMITTED,   /* packets of connections no rule samples */
	CAPTURE_CONNS_TABLE_FULL,     /* a connection could not be entered */
	CAPTURE_CONNS_EXPIRED,        /* entries idle or older than their limit, started afresh */
	CAPTURE_KEPT,                 /* packets kept before a trigger */
	CAPTURE_KEPT_FAILED,          /* packets that could not be kept */
	CAPTURE_KEPT_SENT,            /* kept packets sent when their trigger fired */
	CAPTURE_KEPT_OVERWRITTEN,     /* kept packets whose slot was reused before the trigger */
	CAPTURE_PACKETS,              /* packets of traces sent to userspace */
	CAPTURE_BYTES,                /* ...their bytes at the hook */
	CAPTURE_PACKETS_LOST,         /* packets the perf buffer refused (reader too slow) */
	CAPTURE_PACKETS_CUT,          /* packets cut to CAPTURE_MAX_CAPLEN */
	CAPTURE_MIRRORED,             /* packets cloned to the mirror interface */
	CAPTURE_MIRROR_ERRORS,        /* clones that failed */
	CAPTURE_TRACES_LIMITED,       /* traces ended by a packet, byte or time limit */
	CAPTURE_HTTP_REQUESTS,        /* HTTP requests counted in the metrics */
	CAPTURE_HTTP_RESPONSES,       /* HTTP responses counted in the metrics */
	CAPTURE_HTTP_FOLDED,          /* of both, those folded into "other": the series cap */
	CAPTURE_COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CAPTURE_COUNTER_MAX);
	__type(key, __u32);   /* Key: enum capture_counter */
	__type(value, __u64); /* Value: on this CPU */
} capture_counters SEC(".maps");

static __always_inline void capture_count(enum capture_counter c, __u64 n)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&capture_counters, &key);

	if (v)
		*v += n;
}

enum capture_rule_kind {
	RULE_HTTP_STATUS = 1, /* a status line with a code from status_lo to status_hi */
	RULE_TCP_RST = 2,     /* a TCP reset */
};

/* One trigger rule. 24 bytes. */
struct capture_rule {
	__u16 status_lo;
	__u16 status_hi;
	__u8 kind; /* enum capture_rule_kind */
	__u8 pad[3];
	__u32 sample; /* 1 in sample connections is a candidate; 0 and 1: all */
	__u32 max_packets; /* per trace; 0: no limit */
	__u32 max_seconds;
	__u64 max_bytes;
};

/* The rules and what goes with them, as userspace last wrote them. */
struct capture_config {
	struct http_codes codes; /* the codes some rule fires on: bit (code - 100) */
	__u32 nrules;
	__u32 mirror_ifindex; /* 0: no mirror */
	__u32 max_triggers_per_sec; /* over every rule; 0: no limit */
	__u32 snaplen;        /* bytes captured of each packet; 0: all */
	__u32 output;         /* 1: packets go to userspace (files or a follower) */
	__u32 rst;            /* 1: a rule fires on resets */
	__u32 filters;        /* the rules with a pcap filter, a bit each (filter.h) */
	__u32 pad;
	__u64 idle_ns;        /* a connection idle this long starts afresh */
	__u64 max_age_ns;     /* and one followed this long */
	struct capture_rule rules[CAPTURE_MAX_RULES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct capture_config);
} capture_configs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); /* Value: the capture_config slot in force */
} capture_config_sel SEC(".maps");


/* A trace started. 88 bytes. */
struct capture_event {
	struct flow_key key; /* the packet that fired it, as flows would key it */
	__u32 trace_id;
	__u64 time;          /* bpf_ktime_get_ns */
	__u32 seq;           /* TCP sequence number of the status line's first byte */
	__u16 status;        /* 0: a reset */
	__u8 split;          /* 1: the status line started in the previous segment */
	__u8 rule;
	__u8 kept;           /* packets kept before the trigger that were sent */
	__u8 pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} capture_events SEC(".maps"); /* Record: struct capture_event */

/* Captured packets: struct capture_pkt, then the packet's bytes. A perf
 * buffer, not the ring buffer: bpf_perf_event_output copies the packet
 * straight from the skb, non-linear parts included, where a ring buffer
 * needs a fixed-size reservation and a second copy. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} capture_packets SEC(".maps");

/* A connection entry as it starts: zeroes (a map value is needed, and the
 * stack has no room for one). */
const struct conn_state capture_conn_zero = {};

static __always_inline const struct capture_config *capture_cfg(void)
{
	__u32 zero = 0, *sel = bpf_map_lookup_elem(&capture_config_sel, &zero);
	__u32 slot;

	if (!sel)
		return 0;
	slot = *sel & 1;
	return bpf_map_lookup_elem(&capture_configs, &slot);
}

/* capture_admit returns the rules that sample the connection, a bit each. */
static __always_inline __u8 capture_admit(const struct capture_config *cfg, const struct conn_key *ck)
{
	__u32 h = conn_hash(ck);
	__u8 admit = 0;

	for (__u32 r = 0; r < CAPTURE_MAX_RULES; r++) {
		__u32 n;

		if (r >= cfg->nrules)
			break;
		n = cfg->rules[r].sample;
		if (n <= 1 || h % n == 0)
			admit |= 1 << r;
	}
	return admit;
}

/* capture_rule_for returns the first rule of kind that admitted the
 * connection and covers status, or -1. */
static __always_inline int capture_rule_for(const struct capture_config *cfg, __u8 admit, __u8 kind,
					    __u16 status)
{
	for (__u32 r = 0; r < CAPTURE_MAX_RULES; r++) {
		const struct capture_rule *rule = &cfg->rules[r];

		if (r >= cfg->nrules)
			break;
		if (!(admit & (1 << r)) || rule->kind != kind)
			continue;
		if (kind == RULE_TCP_RST || (status >= rule->status_lo && status <= rule->status_hi))
			return r;
	}
	return -1;
}

/* capture_rate_ok counts a trigger against the global rate. */
static __always_inline int capture_rate_ok(const struct capture_config *cfg, __u64 now)
{
	__u32 zero = 0;
	struct capture_shared *r;
	__u64 sec = now / 1000000000ULL;

	if (!cfg->max_triggers_per_sec)
		return 1;
	r = bpf_map_lookup_elem(&capture_shared, &zero);
	if (!r)
		return 1;
	if (r->second != sec) {
		/* A new second; two CPUs may both reset it: a trigger or two
		 * more at a second's start is the price of no lock. */
		r->second = sec;
		r->count = 0;
	}
	return __sync_fetch_and_add(&r->count, 1) < cfg->max_triggers_per_sec;
}

/* capture_send sends the packet to userspace and the mirror, within its
 * trace's limits.
 *
 * capture_send, capture_fire and http_split_status are global functions:
 * each is verified once, alone, and what it keeps on the stack is not added
 * to the capture function's frame (the entry program, the capture function
 * and the deepest call below it share 512 bytes). */
__noinline int capture_send(struct __sk_buff *skb, const struct flow_key *key, struct conn_state *cs,
			    const struct capture_config *cfg)
{
	const struct capture_rule *rule;
	__u32 len;

	if (!skb || !key || !cs || !cfg)
		return 0;
	rule = &cfg->rules[cs->rule & (CAPTURE_MAX_RULES - 1)];
	len = skb->len;
	if (cs->flags & CONN_DONE)
		return 0;
	/* The rule that started the trace was deleted: its limits are gone,
	 * and so is the trace. */
	if (cs->rule >= cfg->nrules || rule->kind == 0) {
		cs->flags |= CONN_DONE;
		capture_count(CAPTURE_TRACES_LIMITED, 1);
		return 0;
	}
	if ((rule->max_packets && cs->trace_packets >= rule->max_packets) ||
	    (rule->max_bytes && cs->trace_bytes + len > rule->max_bytes) ||
	    (rule->max_seconds && bpf_ktime_get_coarse_ns() - cs->traced_since >= rule->max_seconds * 1000000000ULL)) {
		cs->flags |= CONN_DONE;
		capture_count(CAPTURE_TRACES_LIMITED, 1);
		return 0;
	}
	cs->trace_packets++;
	cs->trace_bytes += len;

	if (cfg->output) {
		struct capture_pkt h = {
			.time = bpf_ktime_get_ns(),
			.ifindex = skb->ifindex,
			.len = len,
			.trace_id = cs->trace_id,
			.status = cs->status,
			.direction = key->direction,
			.kind = CAPTURE_PKT_LIVE,
			.rule = cs->rule,
		};
		VLAN_OF(&h, skb);
		__u64 caplen = len;

		if (cfg->snaplen && caplen > cfg->snaplen)
			caplen = cfg->snaplen;
		if (caplen > CAPTURE_MAX_CAPLEN) {
			caplen = CAPTURE_MAX_CAPLEN;
			capture_count(CAPTURE_PACKETS_CUT, 1);
		}
		h.caplen = caplen;
		if (bpf_perf_event_output(skb, &capture_packets, BPF_F_CURRENT_CPU | (caplen << 32), &h, sizeof(h)) == 0) {
			capture_count(CAPTURE_PACKETS, 1);
			capture_count(CAPTURE_BYTES, len);
		} else {
			capture_count(CAPTURE_PACKETS_LOST, 1);
		}
	}
	if (cfg->mirror_ifindex) {
		/* Last: the clone may move the packet's data. */
		if (bpf_clone_redirect(skb, cfg->mirror_ifindex, 0) == 0)
			capture_count(CAPTURE_MIRRORED, 1);
		else
			capture_count(CAPTURE_MIRROR_ERRORS, 1);
	}
	return 0;
}

/* capture_send_kept sends the packets one side of the connection kept
 * before its trigger, oldest first. Returns how many were sent. A global
 * function, like capture_send. */
__noinline int capture_send_kept(struct __sk_buff *skb, struct conn_state *cs, __u32 side)
{
	__u8 sent = 0, next;

	if (!skb || !cs)
		return 0;
	next = cs->keep_next[side & 1];

	for (__u32 j = 0; j < KEEP_MAX; j++) {
		struct keep_ref *ref;
		struct keep_slot *ks;
		__u32 caplen, slot;

		if (j >= keep_packets)
			break;
		ref = &cs->kept[side & 1][(next + j) % keep_packets & (KEEP_MAX - 1)];
		if (ref->gen == 0)
			continue;
		slot = ref->slot;
		ks = bpf_map_lookup_elem(&capture_keep, &slot);
		if (!ks || ks->gen != ref->gen) {
			capture_count(CAPTURE_KEPT_OVERWRITTEN, 1);
			ref->gen = 0;
			continue;
		}
		ref->gen = 0;
		ks->hdr.trace_id = cs->trace_id;
		ks->hdr.status = cs->status;
		ks->hdr.rule = cs->rule;
		caplen = ks->hdr.caplen;
		if (caplen > KEEP_SNAP)
			continue;
		if (bpf_perf_event_output(skb, &capture_packets, BPF_F_CURRENT_CPU, &ks->hdr,
					  sizeof(ks->hdr) + caplen) == 0) {
			capture_count(CAPTURE_KEPT_SENT, 1);
			sent++;
		} else {
			capture_count(CAPTURE_PACKETS_LOST, 1);
		}
	}
	return sent;
}

/* What fired a trace, in one word (a global function takes five
 * arguments): the TCP sequence number of the status line, its code, the
 * rule, whether it was split, and the side of the connection the packet
 * came from. */
#define FIRE(seq, status, rule, split, side)                                                       \
	((__u64)(__u32)(seq) | (__u64)(status) << 32 | (__u64)((rule) & 0xff) << 48 |                 \
	 (__u64)(split) << 56 | (__u64)((side) & 1) << 57)

/* capture_fire starts a trace of the connection at this packet. */
__noinline int capture_fire(struct __sk_buff *skb, const struct flow_key *key, struct conn_state *cs,
			    const struct capture_config *cfg, __u64 what)
{
	__u32 seq = what;
	__u16 status = what >> 32;
	__u8 rule = (what >> 48) & (CAPTURE_MAX_RULES - 1), split = (what >> 56) & 1, side = (what >> 57) & 1;
	__u64 now = bpf_ktime_get_ns();
	struct capture_event *ev;
	__u8 kept = 0;

	if (!skb || !key || !cs || !cfg)
		return 0;
	if (!capture_rate_ok(cfg, now)) {
		capture_count(CAPTURE_TRIGGERS_RATE_LIMITED, 1);
		return 0;
	}
	capture_count(CAPTURE_TRIGGERS, 1);
	cs->flags |= CONN_TRACED;
	/* The coarse clock, as capture_send's duration limit reads it (it
	 * lags the precise one by up to a tick). */
	cs->traced_since = bpf_ktime_get_coarse_ns();
	cs->rule = rule;
	cs->status = status;
	cs->trace_id = bpf_get_prandom_u32() | 1;
	/* The other side first: it sent the request this packet answers. */
	if (cfg->output) {
		kept = capture_send_kept(skb, cs, side ^ 1);
		kept += capture_send_kept(skb, cs, side);
	}

	ev = bpf_ringbuf_reserve(&capture_events, sizeof(*ev), 0);
	if (ev) {
		ev->key = *key;
		ev->trace_id = cs->trace_id;
		ev->time = now;
		ev->seq = seq;
		ev->status = status;
		ev->split = split;
		ev->rule = rule;
		ev->kept = kept;
		__builtin_memset(ev->pad, 0, sizeof(ev->pad));
		bpf_ringbuf_submit(ev, 0);
	} else {
		capture_count(CAPTURE_EVENTS_LOST, 1);
	}
	return capture_send(skb, key, cs, cfg);
}

/* capture_conn finds or enters the connection of p; NULL when no rule
 * admits it or the table refused it. */
static __always_inline struct conn_state *capture_conn(const struct capture_config *cfg, const struct conn_key *ck,
						       int *admission)
{
	__u64 now = bpf_ktime_get_coarse_ns();
	struct conn_state *cs = bpf_map_lookup_elem(&capture_conns, ck);
	__u8 admit;

	if (cs) {
		if ((cfg->idle_ns && now - cs->last_seen > cfg->idle_ns) ||
		    (cfg->max_age_ns && now - cs->first_seen > cfg->max_age_ns)) {
			/* Start afresh: a new connection on old ports, or one
			 * followed long enough. */
			admit = cs->admit;
			__builtin_memset(cs, 0, sizeof(*cs));
			cs->admit = admit;
			cs->first_seen = now;
			capture_count(CAPTURE_CONNS_EXPIRED, 1);
		}
		/* Written only when the coarse clock moved (a tick, 1-10 ms):
		 * the two directions of a connection run on two CPUs, and a
		 * store to the entry on every packet moved its line between
		 * them on every packet. */
		if (cs->last_seen != now)
			cs->last_seen = now;
		return cs;
	}
	admit = capture_admit(cfg, ck);
	if (!admit) {
		capture_count(CAPTURE_CONNS_NOT_ADMITTED, 1);
		return 0;
	}
	/* EEXIST: another CPU just entered it; the lookup finds it. */
	bpf_map_update_elem(&capture_conns, ck, &capture_conn_zero, BPF_NOEXIST);
	cs = bpf_map_lookup_elem(&capture_conns, ck);
	if (!cs) {
		capture_count(CAPTURE_CONNS_TABLE_FULL, 1);
		return 0;
	}
	if (!cs->first_seen) {
		__u32 zero = 0;
		struct capture_admission *ad;

		cs->first_seen = now;
		cs->admit = admit;
		capture_count(CAPTURE_CONNS_NEW, 1);
		/* Rules with a filter admit the connection once the admission
		 * program, which runs right after this packet, says so. */
		if (admit & cfg->filters) {
			ad = bpf_map_lookup_elem(&capture_admissions, &zero);
			if (ad) {
				ad->ck = *ck;
				ad->pending = admit & cfg->filters;
				cs->admit = admit & ~cfg->filters;
				cs->flags |= CONN_FILTER_PENDING;
				*admission = 1;
			}
		}
	}
	cs->last_seen = now;
	return cs;
}

/* capture_http_add counts one request or response of the server at addr,
 * port, the connection's end end, in the HTTP metrics, with its latency (0:
 * none). */
static __always_inline void capture_http_add(struct conn_state *cs, __u32 end, const __u8 *addr, __u16 port,
					     __u8 class, __u64 latency)
{
	struct http_stats *st;
	__u32 id, idx;

	end &= 1;
	id = cs->http_server[end];
	if (!id) {
		id = http_server_number(addr, port) + 1;
		cs->http_server[end] = id;
	}
	id--;
	if (id == 0)
		capture_count(CAPTURE_HTTP_FOLDED, 1);
	idx = id * HTTP_CLASSES + class;
	st = bpf_map_lookup_elem(&capture_http, &idx);
	if (!st)
		return;
	st->count++;
	if (latency) {
		st->latency_count++;
		st->latency_ns += latency;
		st->hist[latency_bucket(latency) & (HTTP_LAT_BUCKETS - 1)]++;
	}
}

/* What capture_http_head returns: the side's role after this segment,
 * whether to scan the segment whole, and the bytes of the payload it read
 * into capture_window (0: the read failed, or no payload). */
#define HEAD_ROLE(h) ((h) & 3)
#define HEAD_SCAN(h) (((h) >> 2) & 1)
#define HEAD_READ(h) ((__u32)(h) >> 3)

/* capture_http_head reads the first bytes of the payload (len bytes at off)
 * into capture_window, once for everything after it (the split status
 * line, the scan's first window), and looks there for a request or a status
 * line: for the HTTP metrics (httpstats.h) and for the role of the sender's
 * side (conn.h). where packs off (16 bits), len (32) and the sender's side
 * (bit 48). A global function, like capture_send. */
__noinline int capture_http_head(struct __sk_buff *skb, const struct flow_key *key, struct conn_state *cs, __u64 where)
{
	__u32 off = where & 0xffff, len = (where >> 16) & 0xffffffff, side = (where >> 48) & 1;
	__u32 zero = 0, n = len, scan;
	struct http_window *win;
	const __u8 *b;
	__u16 status;
	__u8 role, scans, roles;

	if (!skb || !key || !cs)
		return 0;
	role = conn_role(cs, side);
	scans = (cs->roles >> (4 + 2 * side)) & 3;
	win = bpf_map_lookup_elem(&capture_window, &zero);
	if (!win)
		return role;
	win->now = 0;
	if (n > SCAN_WINDOW)
		n = SCAN_WINDOW;
	/* Hide what the compiler knows of n, or it drops the test below,
	 * which the verifier needs for the read's size. */
	asm volatile("" : "+r"(n));
	if (n == 0 || n > SCAN_WINDOW)
		return role;
	if (bpf_skb_load_bytes(skb, off, win->w, n) < 0)
		return role;
	b = (const __u8 *)win->w;
	status = n >= HTTP_STATUS_LEN ? status_at(b, 0) : 0;
	if (status) {
		__u64 latency = 0, sent = cs->req_time[side ^ 1];

		role = ROLE_SERVER;
		if (sent) {
			win->now = bpf_ktime_get_ns();
			latency = win->now - sent;
			cs->req_time[side ^ 1] = 0;
		}
		capture_count(CAPTURE_HTTP_RESPONSES, 1);
		capture_http_add(cs, side, key->src_addr, key->src_port, status / 100, latency);
	} else if (n >= HTTP_STATUS_LEN && http_is_request(b)) {
		if (role != ROLE_SERVER)
			role = ROLE_CLIENT;
		/* Read for every request: the segment is kept (keep_packet),
		 * stamped with it. */
		win->now = bpf_ktime_get_ns();
		if (!cs->req_time[side])
			cs->req_time[side] = win->now;
		capture_count(CAPTURE_HTTP_REQUESTS, 1);
		capture_http_add(cs, side ^ 1, key->dst_addr, key->dst_port, HTTP_CLASS_REQUEST, 0);
	} else if (role == ROLE_UNKNOWN) {
		role = ROLE_OPAQUE;
	}
	scan = role == ROLE_SERVER || (role == ROLE_OPAQUE && scans < OPAQUE_SCANS);
	if (role == ROLE_OPAQUE && scans < OPAQUE_SCANS)
		scans++;
	roles = (cs->roles & ~(3 << (2 * side) | 3 << (4 + 2 * side))) | role << (2 * side) | scans << (4 + 2 * side);
	/* Stored only when it changed, as last_seen (capture_conn). */
	if (cs->roles != roles)
		cs->roles = roles;
	return role | scan << 2 | n << 3;
}

/* capture_observe runs the trigger and the capture on a packet whose flow
 * key is key.
 *
 * A global function, not inlined: the verifier checks it once, on its own,
 * instead of once for every state the entry program reaches it in, and the
 * flows code after it is checked from the one state its return leaves. Its
 * arguments are then plain memory: the key comes as an argument of its own,
 * since a pointer read from p would be a number to the verifier. */
__noinline int capture_observe(struct __sk_buff *skb, const struct pkt *p, const struct flow_key *key)
{
	const struct capture_config *cfg;
	struct conn_state *cs;
	struct conn_key ck;
	__u32 len, back = 0, head = 0, zero = 0;
	struct http_window *win;
	int rule, admission = 0, ret;
	__u16 status;
	__u8 dir;

	if (!p || !key || key->proto != IPPROTO_TCP)
		return 0;
	if (p->result != PARSE_OK || p->off.l4 == 0) {
		capture_count(CAPTURE_NOT_SCANNED_PARSE, 1);
		return 0;
	}
	cfg = capture_cfg();
	if (!cfg || cfg->nrules == 0)
		return 0;
	/* Our own clones, arriving on the mirror interface. */
	if (cfg->mirror_ifindex && skb->ifindex == cfg->mirror_ifindex)
		return 0;
	conn_key_of(key, &ck, &dir);
	cs = capture_conn(cfg, &ck, &admission);
	if (!cs)
		return 0;
	ret = admission ? CAPTURE_ADMIT : 0;
	len = pkt_payload_len(skb, p, key->eth_type);
	if (len)
		head = capture_http_head(skb, key, cs, (__u64)p->off.payload | (__u64)len << 16 | (__u64)(dir & 1) << 48);
	if (cs->flags & CONN_TRACED) {
		capture_send(skb, key, cs, cfg);
		return ret;
	}

	if ((p->tcp_flags & TCP_FLAG_RST) && cfg->rst) {
		rule = capture_rule_for(cfg, cs->admit, RULE_TCP_RST, 0);
		if (rule >= 0) {
			capture_fire(skb, key, cs, cfg, FIRE(p->tcp_seq, 0, rule, 0, dir));
			return ret;
		}
	}
	if (!len)
		return ret;
	if (HEAD_READ(head) == 0) {
		capture_count(CAPTURE_NOT_SCANNED_LOAD, 1);
		return ret;
	}
	/* A client's segment: kept for the trace its request may start, never
	 * scanned (status lines come from servers). */
	if (HEAD_ROLE(head) == ROLE_CLIENT) {
		capture_count(CAPTURE_NOT_SCANNED_CLIENT, 1);
		goto keep;
	}

	/* A status line that started in the previous segment. */
	if (cs->tail[dir & 1].len && cs->tail[dir & 1].next_seq == p->tcp_seq) {
		status = http_split_status(len, &cs->tail[dir & 1], &back);
		if (status) {
			capture_count(CAPTURE_STATUS_LINES, 1);
			capture_count(CAPTURE_SPLIT_STATUS_LINES, 1);
			rule = capture_rule_for(cfg, cs->admit, RULE_HTTP_STATUS, status);
			if (rule >= 0) {
				capture_fire(skb, key, cs, cfg, FIRE(p->tcp_seq - back, status, rule, 1, dir));
				return ret;
			}
		}
	}

	if (!HEAD_SCAN(head)) {
		/* A side that sent neither requests nor status lines, past its
		 * first segments: the segment's start was checked
		 * (capture_http_head), the rest is not scanned. */
		capture_count(CAPTURE_NOT_SCANNED_OPAQUE, 1);
	} else if (len > SCAN_MAX_BYTES) {
		capture_count(CAPTURE_SEGMENTS_SCANNED, 1);
		capture_count(CAPTURE_NOT_SCANNED_TOO_LONG, 1);
	} else if ((win = bpf_map_lookup_elem(&capture_window, &zero))) {
		win->found = (struct http_found){.off = p->off.payload, .len = len, .head = HEAD_READ(head)};
		capture_count(CAPTURE_SEGMENTS_SCANNED, 1);
		capture_count(CAPTURE_BYTES_SCANNED, len);
		http_scan_payload(skb, &cfg->codes, len);
		if (win->found.load_error)
			capture_count(CAPTURE_NOT_SCANNED_LOAD, 1);
		/* No test of lines: a branch on it would make the verifier
		 * tell apart every count the scan loop can reach. */
		capture_count(CAPTURE_STATUS_LINES, win->found.lines);
		status = win->found.status;
		if (status) {
			rule = capture_rule_for(cfg, cs->admit, RULE_HTTP_STATUS, status);
			if (rule >= 0) {
				capture_fire(skb, key, cs, cfg, FIRE(p->tcp_seq + win->found.at, status, rule, 0, dir));
				return ret;
			}
		}
	}

	/* Another side's segment is kept only when its end may start a status
	 * line that the next segment ends: the trace starts with it. */
	if (!http_keep_tail(skb, p->off.payload, len, p->tcp_seq, &cs->tail[dir & 1]))
		return ret;
keep:
	win = bpf_map_lookup_elem(&capture_window, &zero);
	if (keep_packet(skb, key->direction, dir, cfg->snaplen, cs, win ? win->now : 0))
		capture_count(CAPTURE_KEPT_FAILED, 1);
	else if (keep_slots_per_cpu && keep_packets)
		capture_count(CAPTURE_KEPT, 1);
	return ret;
}

#endif
