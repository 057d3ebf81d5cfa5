/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Connections the capture capability follows: one entry for both
 * directions, in an LRU hash so that a flood of connections evicts the
 * least recently used instead of refusing new ones.
 *
 * An entry holds what the trigger needs between packets: each direction's
 * last bytes (a status line split over two segments), the packets kept
 * before a trigger (keep.h), and, once the trigger fired, the trace's
 * progress against its limits.
 */
#ifndef LOUPE_CAPTURE_CONN_H
#define LOUPE_CAPTURE_CONN_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "connkey.h"
#include "flow.h"
#include "http.h"

/* Packets kept per connection and direction before a trigger, at most. */
#define KEEP_MAX 8

/* A kept packet: its slot in the keep ring and the slot's generation when it
 * was written (a slot overwritten since has another). */
struct keep_ref {
	__u32 slot;
	__u32 gen; /* 0: no packet */
};

enum conn_flag {
	CONN_TRACED = 1 << 0, /* the trigger fired: packets are captured and mirrored */
	CONN_DONE = 1 << 1,   /* the trace reached one of its limits */
	/* Rules with a pcap filter wait for the admission program (filter.h)
	 * to run their filters on the connection's first packet. */
	CONN_FILTER_PENDING = 1 << 2,
};

/* What a side of the connection sends, learnt from the first bytes of its
 * segments with payload (capture_http_head). It decides what the trigger
 * spends on the side's segments: a client's requests are kept and never
 * scanned for status lines (a client sends none); a server's segments are
 * scanned whole and not kept (the request is what a trace should start
 * with); a side that sends neither (TLS, a bulk transfer, a stream joined in
 * the middle of a body) has its first OPAQUE_SCANS segments scanned whole,
 * then only the start of each, which makes it a server as soon as one
 * starts with a status line. */
enum conn_role {
	ROLE_UNKNOWN = 0,
	ROLE_CLIENT = 1,
	ROLE_SERVER = 2,
	ROLE_OPAQUE = 3,
};

/* Segments of an opaque side scanned whole before only their starts are:
 * a keep-alive connection the agent met in the middle of a response still
 * has the next status lines found, when they come soon. At most 3 (two
 * bits). */
#define OPAQUE_SCANS 3

struct conn_state {
	__u64 first_seen;   /* bpf_ktime_get_ns */
	__u64 last_seen;    /* bpf_ktime_get_coarse_ns */
	__u64 traced_since; /* when the trigger fired */
	__u64 trace_bytes;  /* captured since */
	__u32 trace_packets;
	__u32 trace_id;     /* random: what userspace groups a trace's packets by */
	__u16 status;       /* the status that fired (0: a reset) */
	__u8 rule;          /* the rule that fired */
	__u8 admit;         /* the rules that admitted this connection, a bit each */
	__u8 flags;         /* enum conn_flag */
	__u8 keep_next[2];  /* next kept[side][] to write */
	/* enum conn_role of each side (bits 0-1: side 0, 2-3: side 1), and
	 * segments of an opaque side scanned whole (4-5, 6-7). */
	__u8 roles;
	/* [side]: 0 from the lower end, 1 from the higher. Each side keeps its
	 * own packets, so that a large response cannot push the request that
	 * caused it out. */
	struct http_tail tail[2];
	struct keep_ref kept[2][KEEP_MAX];
	__u64 req_time[2]; /* [side]: its oldest request with no response yet (HTTP metrics) */
	/* [side]: the HTTP metrics' number of the server at that end, plus
	 * one (0: not looked up yet). */
	__u32 http_server[2];
};

static __always_inline __u8 conn_role(const struct conn_state *cs, __u32 side)
{
	return (cs->roles >> (2 * (side & 1))) & 3;
}

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* resized from Go: capture.connections */
	__type(key, struct conn_key);
	__type(value, struct conn_state);
} capture_conns SEC(".maps");

#endif
