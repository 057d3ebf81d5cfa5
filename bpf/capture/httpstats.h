/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* HTTP metrics of the connections the capture follows: per server (address
 * and port), requests, responses by status class, and request-to-response
 * latency as a histogram, aggregated in the kernel (what the thesis's
 * reference tool, Metrofunnel, measured in userspace from a libpcap copy of
 * every packet).
 *
 * A request is a segment whose payload starts with a method ("GET ",
 * "POST", ...), a response one whose payload starts with a status line; the
 * latency runs from the first request a side sent with no answer yet to the
 * next response from the other side. Requests or responses that start in
 * the middle of a segment (pipelined behind another) are not counted here
 * (the trigger still finds them): the metrics stay exact for
 * one-request-at-a-time clients, and undercount pipelining.
 *
 * The table is a per-CPU hash capped at capture.http_max_series entries;
 * past it, a server's counts fold into the entries of address :: port 0
 * ("other"), which userspace creates at start so that they always exist,
 * and the fold is counted (CAPTURE_HTTP_FOLDED).
 */
#ifndef LOUPE_CAPTURE_HTTPSTATS_H
#define LOUPE_CAPTURE_HTTPSTATS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "conn.h"
#include "flow.h"
#include "http.h"
#include "latency.h"

/* Latency buckets: latency.h's. */
#define HTTP_LAT_BUCKETS LAT_BUCKETS

enum http_class {
	HTTP_CLASS_REQUEST = 0, /* requests to the server */
	/* 1..5: responses 1xx..5xx */
};

struct http_stats_key {
	__u8 addr[16]; /* the server, IPv4-mapped for IPv4; :: for "other" */
	__u16 port;    /* host order; 0 for "other" */
	__u8 class;    /* enum http_class, or the status's first digit */
	__u8 pad[5];
};

struct http_stats {
	__u64 count;
	__u64 latency_count; /* responses whose request was seen */
	__u64 latency_ns;    /* their latencies' sum */
	__u64 hist[HTTP_LAT_BUCKETS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096); /* resized from Go: capture.http_max_series */
	__type(key, struct http_stats_key);
	__type(value, struct http_stats);
} capture_http SEC(".maps");

const struct http_stats capture_http_zero = {};

/* http_is_request tells whether b starts with an HTTP/1.x method. */
static __always_inline int http_is_request(const __u8 *b)
{
	__u32 m = b[0] | b[1] << 8 | b[2] << 16 | (__u32)b[3] << 24;

#define M4(a, b, c, d) ((__u32)(a) | (__u32)(b) << 8 | (__u32)(c) << 16 | (__u32)(d) << 24)
	return m == M4('G', 'E', 'T', ' ') || m == M4('P', 'O', 'S', 'T') || m == M4('P', 'U', 'T', ' ') ||
	       m == M4('H', 'E', 'A', 'D') || m == M4('D', 'E', 'L', 'E') || m == M4('P', 'A', 'T', 'C') ||
	       m == M4('O', 'P', 'T', 'I') || m == M4('C', 'O', 'N', 'N') || m == M4('T', 'R', 'A', 'C');
#undef M4
}

#endif
