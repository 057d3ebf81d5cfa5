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

#include "capture/capture.h"
#include "capture/filter.h"
#include "dns/dns.h"
#include "flows/flows.h"
#include "handshake/handshake.h"
#include "latency/hop.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TCX_NEXT_ACTION -1 /* TCX_NEXT, and TC_ACT_UNSPEC for cls_bpf: let the next program decide */

/* Which capabilities run, set from Go before load (volatile const: folded by
 * the verifier, so what is off is not even in the loaded program). */
volatile const __u8 cfg_cap_flows = 1;
volatile const __u8 cfg_cap_capture = 0;
/* Rules (rules/rules.h) decide what flows measures; a part of flows, in the
 * build with every capability only. */
volatile const __u8 cfg_cap_rules = 0;
/* DNS exchanges (dns/dns.h) and TCP handshake RTT (handshake/handshake.h):
 * results per flow, in tables that swap with the flow tables, so they need
 * flows. In the build with every capability only. */
volatile const __u8 cfg_cap_dns = 0;
volatile const __u8 cfg_cap_handshake = 0;
/* Per-hop latency (latency/hop.h): stamps of request and sampled TCP
 * segments and the requests' trace context. In the build with every
 * capability only. */
volatile const __u8 cfg_cap_latency = 0;

/* BTF only describes types that globals, maps and function signatures
 * reach; this pointer (in .bss, never used) makes the counter enum visible
 * to bpf2go -type. */
const enum counter *unused_counter __attribute__((unused));
const enum capture_counter *unused_capture_counter __attribute__((unused));
const struct capture_event *unused_capture_event __attribute__((unused));
const struct capture_pkt *unused_capture_pkt __attribute__((unused));
const struct rule_stats *unused_rule_stats __attribute__((unused));
const enum tunnel_type *unused_tunnel_type __attribute__((unused));
const enum tunnel_flag *unused_tunnel_flag __attribute__((unused));
const enum dns_counter *unused_dns_counter __attribute__((unused));
const enum dns_flag *unused_dns_flag __attribute__((unused));
const enum handshake_counter *unused_handshake_counter __attribute__((unused));
const enum latency_counter *unused_latency_counter __attribute__((unused));
const struct latency_event *unused_latency_event __attribute__((unused));

/* The capabilities a build of the entry program contains (compile time). */
#define CAP_FLOWS (1 << 0)
#define CAP_CAPTURE (1 << 1)
#define CAP_RULES (1 << 2)
#define CAP_DNS (1 << 3)
#define CAP_HANDSHAKE (1 << 4)
#define CAP_LATENCY (1 << 5)
#define CAP_ALL (CAP_FLOWS | CAP_CAPTURE | CAP_RULES | CAP_DNS | CAP_HANDSHAKE | CAP_LATENCY)

/* The switches of DNS and the handshake are read where they are tested
 * (volatile: every use is a load) rather than kept in a variable from the
 * start: kept, they took three more stack slots across the flows code, and
 * the entry program's frame no longer left room for the capture's chain of
 * calls (512 bytes in all). Switched off, what is left of them is their
 * two loads (the verifier removes the branches, not the loads). */
#define DNS_ON(build) (((build) & CAP_DNS) && cfg_cap_dns)
#define HANDSHAKE_ON(build) (((build) & CAP_HANDSHAKE) && cfg_cap_handshake)
#define LATENCY_ON(build) (((build) & CAP_LATENCY) && cfg_cap_latency)

/* hook runs the capabilities of build that are switched on. */
static __always_inline int hook(struct __sk_buff *skb, __u8 direction, const __u32 build)
{
	const int flows = (build & CAP_FLOWS) && cfg_cap_flows;
	const int capture = (build & CAP_CAPTURE) && cfg_cap_capture;
	/* 8-byte aligned: the slot tables hash and compare it by words. */
	struct flow_key key __attribute__((aligned(8)));
	struct pkt p;

	/* DNS, the handshake and latency need flows (datapath.Load refuses them
	 * alone): with flows and capture off, nothing is on. */
	if (!(flows | capture))
		return TCX_NEXT_ACTION;
	pkt_parse(skb, direction, &key, &p);
	if (flows && (build & CAP_RULES) && cfg_cap_rules)
		flows_observe_ruled(&p, &key);
	else if (flows)
		flows_observe(&p);
	/* Each an inline test of the packet, then, for the packets it
	 * concerns, a global function (dns_track, handshake_track). */
	if (DNS_ON(build))
		dns_observe(skb, &p, &key);
	if (HANDSHAKE_ON(build))
		handshake_observe(&p, &key);
	if (LATENCY_ON(build))
		latency_observe(skb, &p, &key);
	/* Capture last: it is a function of its own (capture.h), and after a
	 * call the verifier takes the memory handed to it for clobbered, p
	 * included. */
	if (capture) {
		int admit = capture_observe(skb, &p, &key) == CAPTURE_ADMIT;

		/* Last of all: a tail call does not come back. */
		capture_filter(skb, direction, admit);
	}
	return TCX_NEXT_ACTION;
}

/* Two builds of the same entry program. The verifier removes a switched-off
 * capability's code, but the compiler, which cannot know the switches,
 * shapes the code that stays around the code that goes: with the capture
 * code present, the shared parse keeps what capture would need across
 * helper calls on the stack, and flows alone paid for it (docs/
 * architecture.md). So flows alone, what most hosts run, is a build of its
 * own; every other combination runs the build with every capability, each
 * switched at load. userspace attaches one of the two (datapath.Load). */

SEC("tc")
int loupe_ingress(struct __sk_buff *skb)
{
	return hook(skb, DIRECTION_INGRESS, CAP_ALL);
}

SEC("tc")
int loupe_egress(struct __sk_buff *skb)
{
	return hook(skb, DIRECTION_EGRESS, CAP_ALL);
}

SEC("tc")
int loupe_flows_ingress(struct __sk_buff *skb)
{
	return hook(skb, DIRECTION_INGRESS, CAP_FLOWS);
}

SEC("tc")
int loupe_flows_egress(struct __sk_buff *skb)
{
	return hook(skb, DIRECTION_EGRESS, CAP_FLOWS);
}
