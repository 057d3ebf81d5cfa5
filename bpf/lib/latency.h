/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Latency histograms kept in the kernel: the HTTP metrics' (capture/
 * httpstats.h), DNS latency (dns/dns.h) and the TCP handshake's RTT
 * (handshake/handshake.h), all with the same buckets, so that userspace
 * reads them alike (datapath.LatencyHist).
 */
#ifndef LOUPE_LATENCY_H
#define LOUPE_LATENCY_H

#include "vmlinux.h"

/* Latency buckets: 0 holds under 1 us, i (1..22) holds [2^(i-1), 2^i) us,
 * 23 everything from 2^22 us (4.2 s) on. */
#define LAT_BUCKETS 24

/* latency_bucket is the histogram bucket of ns nanoseconds. */
static __always_inline __u32 latency_bucket(__u64 ns)
{
	__u64 v = ns / 1000;
	__u32 r = 0;

	if (!v)
		return 0;
	if (v >= 1ULL << 16) {
		v >>= 16;
		r += 16;
	}
	if (v >= 1 << 8) {
		v >>= 8;
		r += 8;
	}
	if (v >= 1 << 4) {
		v >>= 4;
		r += 4;
	}
	if (v >= 1 << 2) {
		v >>= 2;
		r += 2;
	}
	if (v >= 2)
		r += 1;
	r += 1;
	return r < LAT_BUCKETS ? r : LAT_BUCKETS - 1;
}

#endif
