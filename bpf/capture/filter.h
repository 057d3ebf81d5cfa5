/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* On-demand filtered capture (`loupe capture --filter EXPR`): a pcap filter
 * compiled to eBPF in userspace (internal/pcapfilter) runs as a program of
 * its own, which the entry program tail-calls after its capabilities, one
 * slot per hook direction.
 *
 * Why a tail call: a filter typed at run time cannot be a load-time
 * constant, freplace is refused on this kernel (EPERM), and swapping the
 * entry program on every interface per capture would reload it. An empty
 * slot costs one patched-out jump: the verifier knows the key, so the JIT
 * emits a direct jump that is a no-op while the slot is empty. The filter
 * reads the frame as tcpdump's does; the entry program's parse is not done
 * twice by a capability.
 */
#ifndef LOUPE_CAPTURE_FILTER_H
#define LOUPE_CAPTURE_FILTER_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "conn.h"

/* The programs: keys 0 and 1, the on-demand filter for ingress and egress
 * (enum direction); keys 2 and 3, the admission program of each direction,
 * which runs the trigger rules' pcap filters on a connection's first packet
 * (CAPTURE_ADMIT) and then tail-calls the on-demand filter. userspace puts
 * them in and takes them out; they return TCX_NEXT. */
#define CAPTURE_ADMIT_SLOT 2
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} capture_filter_progs SEC(".maps");

/* The packets the filter matched: struct capture_pkt (kind 2), then the
 * packet's bytes. A buffer apart from capture_packets: the triggered
 * capture's reader never sees them. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} capture_filtered SEC(".maps");

/* A connection waiting for its rules' filters: what the admission program
 * needs, written by capture_observe just before the tail call, on the same
 * CPU. */
struct capture_admission {
	struct conn_key ck;
	__u8 pending; /* the rules whose filters decide */
	__u8 pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct capture_admission);
} capture_admissions SEC(".maps");

/* capture_filter hands the packet to the admission program when admit is
 * set (it then goes on to the on-demand filter itself), else to the
 * on-demand filter of its direction, if a filtered capture runs; it returns
 * when the slot is empty. */
static __always_inline void capture_filter(struct __sk_buff *skb, const __u32 direction, int admit)
{
	if (admit)
		bpf_tail_call(skb, &capture_filter_progs, CAPTURE_ADMIT_SLOT + direction);
	bpf_tail_call(skb, &capture_filter_progs, direction);
}

#endif
