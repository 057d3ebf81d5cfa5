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

/* The filter programs: key 0 for ingress, 1 for egress (enum direction).
 * userspace puts them in and takes them out; they return TCX_NEXT. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
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

/* capture_filter hands the packet to the filter of its direction, if a
 * filtered capture runs; it returns when none does. */
static __always_inline void capture_filter(struct __sk_buff *skb, const __u32 direction)
{
	bpf_tail_call(skb, &capture_filter_progs, direction);
}

#endif
