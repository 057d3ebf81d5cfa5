/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packets kept before a trigger, so that a triggered capture starts with the
 * request that failed, not with the error response.
 *
 * Why a ring and not a buffer per connection: the packets live in one array
 * of fixed-size slots, each CPU writing its own range in turn, and a
 * connection remembers only which slots hold its last packets (struct
 * keep_ref). Memory is then the ring's, whatever the number of connections
 * followed (a buffer per connection would cost the tracking table's size
 * times the bytes kept: 16 384 connections x 8 KB = 128 MB). The price: a
 * slot is reused once its CPU has written as many kept packets as it owns
 * slots since, so under heavy traffic a request may be gone before its
 * response fails; the slot's generation tells, and it is counted
 * (CAPTURE_KEPT_OVERWRITTEN).
 *
 * Only packets with payload are kept: pure ACKs would take the slots of the
 * request they acknowledge.
 */
#ifndef LOUPE_CAPTURE_KEEP_H
#define LOUPE_CAPTURE_KEEP_H

#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "conn.h"

/* The most bytes of one kept packet (a full 1500-byte frame fits). */
#define KEEP_SNAP 2048

/* Kept packets per connection and direction (at most KEEP_MAX), ring slots per CPU (a
 * power of two; 0: nothing is kept) and bytes kept of each packet (at most
 * KEEP_SNAP). Load-time constants: they size the ring. */
volatile const __u32 keep_packets = 4;
volatile const __u32 keep_slots_per_cpu = 0;
volatile const __u32 keep_snap = KEEP_SNAP;

enum capture_pkt_kind {
	CAPTURE_PKT_LIVE = 0, /* captured as it crossed the hook */
	CAPTURE_PKT_KEPT = 1, /* kept before the trigger, sent when it fired */
};

/* The header of every packet sent to userspace; caplen bytes of the packet
 * follow it. 32 bytes. */
struct capture_pkt {
	__u64 time;      /* bpf_ktime_get_ns when the packet crossed the hook */
	__u32 ifindex;
	__u32 len;       /* the packet's length at the hook */
	__u32 caplen;    /* bytes of it that follow */
	__u32 trace_id;  /* the trace it belongs to */
	__u16 status;    /* what fired the trace (0: a reset) */
	__u8 direction;  /* enum direction */
	__u8 kind;       /* enum capture_pkt_kind */
	__u8 rule;
	/* The tag the kernel holds in the skb's metadata (it left the frame
	 * before TC ingress, or a device inserts it on transmit): 0 none,
	 * 1 802.1Q, 2 802.1ad. userspace puts it back into the frame, as
	 * libpcap does for tcpdump. */
	__u8 vlan;
	__u16 vlan_tci;
};

/* VLAN_OF fills h's tag from the skb's metadata. */
#define VLAN_OF(h, skb)                                                                            \
	do {                                                                                       \
		(h)->vlan = (skb)->vlan_present ? ((skb)->vlan_proto == bpf_htons(0x88a8) ? 2 : 1) : 0; \
		(h)->vlan_tci = (skb)->vlan_tci;                                                   \
	} while (0)

struct keep_slot {
	__u32 gen; /* bumped at every write; 0: never written */
	__u32 pad;
	struct capture_pkt hdr;
	__u8 data[KEEP_SNAP];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* resized from Go: CPUs x keep_slots_per_cpu */
	__type(key, __u32);
	__type(value, struct keep_slot);
} capture_keep SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); /* Value: this CPU's next slot, before the modulo */
} capture_keep_cursor SEC(".maps");

/* keep_packet copies the packet into this CPU's next slot and makes it the
 * newest kept packet of the connection's side: keep_snap bytes of it, or
 * snaplen when less (the snap length in force, as for every captured
 * packet; 0: no limit), stamped now (0: read the clock). Returns 0, or 1
 * when it could not. */
static __always_inline int keep_packet(struct __sk_buff *skb, __u8 direction, __u8 side, __u32 snaplen,
				       struct conn_state *cs, __u64 now)
{
	__u8 *next = &cs->keep_next[side & 1];

	__u32 zero = 0, slot, n, *cur, gen;
	struct keep_slot *ks;
	struct keep_ref *ref;

	if (keep_slots_per_cpu == 0 || keep_packets == 0 || keep_packets > KEEP_MAX)
		return 0;
	cur = bpf_map_lookup_elem(&capture_keep_cursor, &zero);
	if (!cur)
		return 1;
	slot = bpf_get_smp_processor_id() * keep_slots_per_cpu + (*cur & (keep_slots_per_cpu - 1));
	*cur += 1;
	ks = bpf_map_lookup_elem(&capture_keep, &slot);
	if (!ks)
		return 1;
	n = skb->len;
	if (n > keep_snap)
		n = keep_snap;
	if (snaplen && n > snaplen)
		n = snaplen;
	if (n > KEEP_SNAP)
		n = KEEP_SNAP;
	if (n == 0 || bpf_skb_load_bytes(skb, 0, ks->data, n) < 0)
		return 1;
	gen = ks->gen + 1;
	if (gen == 0)
		gen = 1;
	ks->gen = gen;
	ks->hdr.time = now ? now : bpf_ktime_get_ns();
	ks->hdr.ifindex = skb->ifindex;
	ks->hdr.len = skb->len;
	ks->hdr.caplen = n;
	ks->hdr.direction = direction;
	ks->hdr.kind = CAPTURE_PKT_KEPT;
	VLAN_OF(&ks->hdr, skb);

	ref = &cs->kept[side & 1][*next & (KEEP_MAX - 1)];
	ref->slot = slot;
	ref->gen = gen;
	*next = (*next + 1) % keep_packets;
	return 0;
}

#endif
