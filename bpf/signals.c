// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Kernel signals: RTT, retransmissions and drops with the kernel's reason,
 * from raw tracepoints (signals/signals.h says why raw tracepoints, and why
 * an object apart from the TC entry programs).
 *
 * One program per tracepoint, each a thin wrapper: userspace loads and
 * attaches each alone (BPF_RAW_TRACEPOINT_OPEN with the tracepoint's name),
 * so that a kernel refusing one turns off that signal only. The arguments
 * are the tracepoint's TP_PROTO, in order, as 64-bit words.
 */

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "signals/drops.h"
#include "signals/signals.h"
#include "signals/sock.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Visible to bpf2go -type (BTF describes only what something reaches). */
const enum signal_counter *unused_signal_counter __attribute__((unused));

/* tcp_probe(struct sock *sk, const struct sk_buff *skb) */
SEC("raw_tp")
int signals_tcp_probe(struct bpf_raw_tracepoint_args *ctx)
{
	rtt_observe((const struct sock *)ctx->args[0]);
	return 0;
}

/* tcp_retransmit_skb(const struct sock *sk, const struct sk_buff *skb[, int err]) */
SEC("raw_tp")
int signals_tcp_retransmit_skb(struct bpf_raw_tracepoint_args *ctx)
{
	long err = cfg_retransmit_err_arg ? (int)ctx->args[2] : 0;

	retransmit_observe((const struct sock *)ctx->args[0], (const struct sk_buff *)ctx->args[1], err);
	return 0;
}

/* kfree_skb(struct sk_buff *skb, void *location, enum skb_drop_reason reason, struct sock *rx_sk) */
SEC("raw_tp")
int signals_kfree_skb(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 reason = (__u32)ctx->args[2];

	if (!drop_noise(reason))
		drop_observe((const struct sk_buff *)ctx->args[0], reason);
	return 0;
}
