// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Loupe's datapath: one entry program per hook.
 *
 * Each hook (TC/TCX ingress and egress of every monitored interface) runs one
 * program. It parses the packet once into a struct pkt (lib/pkt.h) and hands
 * it to every capability that is switched on. A capability is a directory
 * under bpf/ (flows/, later capture/, ...) holding its maps and one
 * `<name>_observe` function; it is switched on by a `cfg_cap_<name>`
 * constant that userspace sets before load. The verifier folds a constant
 * that is 0 and removes the capability's code: a capability switched off
 * costs nothing per packet, and with every capability off the program does
 * not even parse ("hooks only").
 *
 * Why one program and not one per capability chained on TCX: every program
 * in a chain pays the hook's dispatch, the program's call and return (which
 * the SRSO mitigation makes dearer on AMD), and its own parse; measured and
 * argued in docs/architecture.md.
 *
 * Adding a capability: its maps and function in bpf/<name>/<name>.h, a
 * cfg_cap_<name> constant and one gated call below, and its Go unit under
 * internal/capability/<name>.
 */

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "counters.h"
#include "pkt.h"

#include "flows/flows.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TCX_NEXT_ACTION -1 /* TCX_NEXT, and TC_ACT_UNSPEC for cls_bpf: let the next program decide */

/* Which capabilities run, set from Go before load (volatile const: folded by
 * the verifier, so what is off is not even in the loaded program). */
volatile const __u8 cfg_cap_flows = 1;

/* BTF only describes types that globals, maps and function signatures
 * reach; this pointer (in .bss, never used) makes the counter enum visible
 * to bpf2go -type. */
const enum counter *unused_counter __attribute__((unused));

static __always_inline int hook(struct __sk_buff *skb, __u8 direction)
{
	struct flow_key key;
	struct pkt p;

	if (!cfg_cap_flows)
		return TCX_NEXT_ACTION;
	pkt_parse(skb, direction, &key, &p);
	if (cfg_cap_flows)
		flows_observe(&p);
	return TCX_NEXT_ACTION;
}

SEC("tc")
int loupe_ingress(struct __sk_buff *skb)
{
	return hook(skb, DIRECTION_INGRESS);
}

SEC("tc")
int loupe_egress(struct __sk_buff *skb)
{
	return hook(skb, DIRECTION_EGRESS);
}
