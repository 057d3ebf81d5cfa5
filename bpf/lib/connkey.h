/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A TCP or UDP connection as one key for both directions: the capture's
 * connections (capture/conn.h) and the handshakes the handshake capability
 * times (handshake/handshake.h) are keyed by it, so that a packet and its
 * answer find the same entry.
 */
#ifndef LOUPE_CONNKEY_H
#define LOUPE_CONNKEY_H

#include "vmlinux.h"

#include "flow.h"

/* A connection: the lower (address, port) first, so that both directions
 * find the same entry. 40 bytes. */
struct conn_key {
	__u8 addr_lo[16];
	__u8 addr_hi[16];
	__u16 port_lo;
	__u16 port_hi;
	__u8 proto;
	__u8 pad[3];
} __attribute__((aligned(8)));

/* conn_key_of makes k's connection key; *dir is 0 when the packet goes from
 * the lower end, 1 otherwise. Addresses compare as big-endian numbers. */
static __always_inline void conn_key_of(const struct flow_key *k, struct conn_key *ck, __u8 *dir)
{
	__u64 s0, d0, s1, d1;
	int lower;

	/* memcpy: the key is only 4-byte aligned, and stack accesses must be
	 * aligned. */
	__builtin_memcpy(&s0, &k->src_addr[0], 8);
	__builtin_memcpy(&s1, &k->src_addr[8], 8);
	__builtin_memcpy(&d0, &k->dst_addr[0], 8);
	__builtin_memcpy(&d1, &k->dst_addr[8], 8);
	s0 = __builtin_bswap64(s0);
	s1 = __builtin_bswap64(s1);
	d0 = __builtin_bswap64(d0);
	d1 = __builtin_bswap64(d1);
	if (s0 != d0)
		lower = s0 < d0;
	else if (s1 != d1)
		lower = s1 < d1;
	else
		lower = k->src_port <= k->dst_port;

	__builtin_memset(ck, 0, sizeof(*ck));
	ck->proto = k->proto;
	if (lower) {
		__builtin_memcpy(ck->addr_lo, k->src_addr, 16);
		__builtin_memcpy(ck->addr_hi, k->dst_addr, 16);
		ck->port_lo = k->src_port;
		ck->port_hi = k->dst_port;
		*dir = 0;
	} else {
		__builtin_memcpy(ck->addr_lo, k->dst_addr, 16);
		__builtin_memcpy(ck->addr_hi, k->src_addr, 16);
		ck->port_lo = k->dst_port;
		ck->port_hi = k->src_port;
		*dir = 1;
	}
}

/* conn_hash is a hash of the connection (both directions alike), for
 * "1 in N connections": sampling by hash needs no state, so a connection
 * that is not sampled costs no table entry, and both directions and every
 * CPU decide alike. A multiply-xorshift mix of the key's words. */
static __always_inline __u32 conn_hash(const struct conn_key *ck)
{
	const __u64 *w = (const __u64 *)ck;
	__u64 h = 0x9e3779b97f4a7c15ULL;

#pragma unroll
	for (int i = 0; i < sizeof(*ck) / 8; i++) {
		h ^= w[i];
		h *= 0xff51afd7ed558ccdULL;
		h ^= h >> 33;
	}
	return h >> 32;
}

#endif
