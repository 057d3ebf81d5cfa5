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
 * The counters are a per-CPU array of HTTP_CLASSES entries per server,
 * found by the server's number: capture_http_servers gives each server
 * (address and port) one the first time a connection to it counts, and
 * the connection keeps it (conn_state.http_server), so that a request or
 * response costs an array lookup, which the verifier inlines, and not a
 * hash of its server (a per-CPU hash of (server, class) cost 26 ns more a
 * request and 45 a response in BenchmarkCapturePath, the hash always
 * warm there). Number 0 is "other"
 * (address :: port 0): past cfg_http_servers servers, counts fold there,
 * and the fold is counted (CAPTURE_HTTP_FOLDED). Numbers are never given
 * back: the table holds the servers seen since the agent started, up to
 * the cap.
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

/* Request (0) and responses 1xx to 5xx: the classes of a server. */
#define HTTP_CLASSES 6

/* Servers numbered, "other" (0) included: set from Go before load
 * (capture.http_max_series / HTTP_CLASSES). */
volatile const __u32 cfg_http_servers = 1;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HTTP_CLASSES); /* resized from Go: cfg_http_servers * HTTP_CLASSES */
	__type(key, __u32);                /* Key: server number * HTTP_CLASSES + class */
	__type(value, struct http_stats);
} capture_http SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* resized from Go: cfg_http_servers */
	__type(key, struct http_stats_key); /* Key: the server; class and pad 0 */
	__type(value, __u32);               /* Value: its number, 1 to cfg_http_servers - 1 */
} capture_http_servers SEC(".maps");

/* The words every CPU writes, with atomics, but rarely: the global trigger
 * rate (triggers in the current second, touched only when a trigger fires:
 * capture_rate_ok), and the HTTP metrics' last server number handed out
 * (written once per new server). One map for both: a program may use 64
 * maps, and the entry program uses nearly that many. */
struct capture_shared {
	__u64 second;
	__u64 count;
	__u32 http_servers; /* the next number is this plus one */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct capture_shared);
} capture_shared SEC(".maps");

/* http_server_number returns the number of the server at addr, port,
 * numbering it if it has none; 0 ("other") past the cap. Two CPUs that
 * number one server at once both take a number; the insert keeps one, and
 * the other is never used. */
static __always_inline __u32 http_server_number(const __u8 *addr, __u16 port)
{
	struct http_stats_key k = {.port = port};
	struct capture_shared *sh;
	__u32 zero = 0, *n, id;

	__builtin_memcpy(k.addr, addr, 16);
	n = bpf_map_lookup_elem(&capture_http_servers, &k);
	if (n)
		return *n;
	sh = bpf_map_lookup_elem(&capture_shared, &zero);
	/* Read before the add: past the cap, no CPU writes the shared word. */
	if (!sh || sh->http_servers + 1 >= cfg_http_servers)
		return 0;
	id = __sync_fetch_and_add(&sh->http_servers, 1) + 1;
	if (id >= cfg_http_servers)
		return 0;
	if (bpf_map_update_elem(&capture_http_servers, &k, &id, BPF_NOEXIST) == 0)
		return id;
	n = bpf_map_lookup_elem(&capture_http_servers, &k);
	return n ? *n : 0;
}

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
