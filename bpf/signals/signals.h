/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Kernel signals: what the TCP stack and the packet-freeing path say about a
 * flow, read at raw tracepoints (signals.c).
 *
 * Why raw tracepoints: kprobes, fentry/fexit and tp_btf are refused on the
 * kernels Loupe must run on, and classic tracepoints need tracefs, which
 * mounting takes CAP_SYS_ADMIN. A raw tracepoint (BPF_RAW_TRACEPOINT_OPEN)
 * needs neither; its arguments are the tracepoint's TP_PROTO, raw pointers
 * whose fields are read CO-RE style (bpf_probe_read_kernel with relocated
 * offsets), so one object runs on every kernel with BTF.
 *
 * Why an object of its own: these programs never run at the TC hooks, so
 * the entry programs (loupe.c) stay as they are, and each tracepoint is
 * loaded and attached alone: a kernel that refuses one turns off that
 * signal only (internal/datapath/signals.go).
 *
 * Keys are 5-tuples in the flow key's conventions (lib/flow.h): 16-byte
 * addresses in network byte order, IPv4 stored IPv4-mapped, ports in host
 * order, so that userspace joins them with flow records.
 *
 * Why two tables of each kind: as for the flow tables (flows/flows.h),
 * userspace flips signals_state, waits for an RCU grace period, then reads
 * and empties the table no program writes any more; every event lands in
 * exactly one interval. The tables are shared hashes, not per-CPU: the
 * socket signals of one connection are serialised by the socket's lock
 * (tcp_rcv_established and the retransmit paths run with it held), and the
 * drop counters are added atomically, so one copy per entry is enough and
 * the memory does not grow with the number of CPUs.
 */
#ifndef LOUPE_SIGNALS_H
#define LOUPE_SIGNALS_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "wire.h"

#define E2BIG 7
#define EEXIST 17
#define ENOMEM 12

/* One 5-tuple: 40 bytes, explicit padding (zeroed: it is hashed). For a
 * socket, src is the local end and dst the remote one, as on the egress
 * record of the connection; for a dropped packet, as in its headers. */
struct signal_key {
	__u8 src_addr[16];
	__u8 dst_addr[16];
	__u16 src_port;
	__u16 dst_port;
	__u8 proto;
	__u8 pad[3];
};

/* What the socket of one 5-tuple said in one interval: 32 bytes. */
struct sock_signals {
	__u64 retrans_segs; /* segments retransmitted: tcp_skb_pcount of each retransmitted buffer */
	__u64 rtt_samples;  /* tcp_probe events that carried a smoothed RTT */
	__u32 rtt_min_us;   /* smoothed RTT (srtt_us >> 3), smallest of the interval */
	__u32 rtt_max_us;
	__u32 rtt_last_us;
	__u32 pad;
};

/* Drops of one 5-tuple for one reason: 48 bytes. */
struct drop_key {
	struct signal_key key;
	__u32 reason; /* enum skb_drop_reason as the running kernel numbers it */
	__u32 pad;
};

struct drop_signals {
	__u64 packets; /* buffers freed: a GSO buffer counts once */
	__u64 bytes;   /* their length from the network header on (IP header included) */
};

/* Every path that loses or cannot attribute an event counts here. */
enum signal_counter {
	SIGNAL_COUNTER_SOCK_MAP_FULL = 0, /* socket table full: the event is lost */
	SIGNAL_COUNTER_SOCK_MAP_BUSY,     /* socket table insert failed otherwise: lost */
	SIGNAL_COUNTER_DROP_MAP_FULL,     /* drop table full: the drop is lost */
	SIGNAL_COUNTER_DROP_MAP_BUSY,     /* drop table insert failed otherwise: lost */
	SIGNAL_COUNTER_SOCK_FAMILY,       /* socket neither IPv4 nor IPv6: ignored */
	SIGNAL_COUNTER_DROP_NO_HEADER,    /* dropped buffer without a network header: unattributed */
	SIGNAL_COUNTER_DROP_NOT_IP,       /* network header neither IPv4 nor IPv6: unattributed */
	SIGNAL_COUNTER_DROP_TRUNCATED,    /* a header past the buffer's linear data: fewer fields */
	SIGNAL_COUNTER_READ_FAILED,       /* a kernel read failed: a socket's event is lost, a drop has fewer fields */
	SIGNAL_COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SIGNAL_COUNTER_MAX);
	__type(key, __u32);   /* Key: enum signal_counter */
	__type(value, __u64); /* Value: events on this CPU */
} signal_counters SEC(".maps");

static __always_inline void signal_count(enum signal_counter c)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&signal_counters, &key);

	if (v)
		*v += 1;
}

/* Which table of each kind the programs write: 0 the _a tables, 1 the _b
 * tables. Userspace is its only writer. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);   /* Key: 0 */
	__type(value, __u32); /* Value: the active table */
} signals_state SEC(".maps");

/* max_entries: signals.table_size, set from Go before load. */
struct sock_table {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct signal_key);     /* Key: the socket's 5-tuple */
	__type(value, struct sock_signals); /* Value: its RTT and retransmits this interval */
} sock_a SEC(".maps"), sock_b SEC(".maps");

struct drop_table {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct drop_key);       /* Key: the dropped packet's 5-tuple and reason */
	__type(value, struct drop_signals); /* Value: its drops this interval */
} drops_a SEC(".maps"), drops_b SEC(".maps");

/* signals_active_b reports whether the _b tables are the ones to write. */
static __always_inline int signals_active_b(void)
{
	__u32 zero = 0;
	__u32 *active = bpf_map_lookup_elem(&signals_state, &zero);

	return active && (*(volatile __u32 *)active & 1);
}

/* map_failed counts a refused insert as full or busy. */
static __always_inline void map_failed(long err, enum signal_counter full, enum signal_counter busy)
{
	signal_count(err == -E2BIG || err == -ENOMEM ? full : busy);
}

/* ipv4_mapped stores an IPv4 address (network order) as ::ffff:a.b.c.d. */
static __always_inline void ipv4_mapped(__u8 *dst, __be32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(&dst[12], &addr, 4);
}

#endif
