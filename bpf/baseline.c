// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* A TC program that does nothing: the baseline the benchmarks subtract, so
 * that the cost of the hook and of bpf_stats itself is not charged to the
 * flow program. */

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("tc")
int baseline(struct __sk_buff *skb)
{
	return -1; /* TCX_NEXT / TC_ACT_UNSPEC */
}
