/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Reading several fields of a kernel struct with one bpf_probe_read_kernel.
 *
 * Every BPF_CORE_READ is a helper call, and on the 2-CPU EPYC machine the
 * benchmarks run on (SRSO's "Safe RET" mitigation on every return) each
 * costs over a hundred nanoseconds: with six reads tcp_probe cost about
 * 960 ns an event under iperf3, with two about 660, against about 170 for
 * an empty program at the same tracepoint (bench/signals.sh, one run
 * each; the current numbers: bench/RESULTS.md, section 10). The fields a
 * signal needs sit close
 * together (sock_common's addresses, ports and family in its first 18
 * bytes; sk_buff's len, headers, tail, head and data within 96 bytes), so
 * one read of the span and loads from the copy do the same work.
 *
 * The offsets stay CO-RE: each is the running kernel's, relocated at load
 * (bpf_core_field_offset). Whether a field lies inside the span is checked
 * with those offsets too; after relocation the check is a constant the
 * verifier folds, and a kernel whose layout does not fit takes the field by
 * field path instead.
 */
#ifndef LOUPE_SIGNALS_CORE_H
#define LOUPE_SIGNALS_CORE_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

/* CORE_IN_SPAN: whether field of struct type lies within len bytes from
 * offset base of the struct. */
#define CORE_IN_SPAN(type, field, base, len)                                                         \
	(bpf_core_field_offset(type, field) >= (base) &&                                             \
	 bpf_core_field_offset(type, field) - (base) + bpf_core_field_size(type, field) <= (len))

/* core_span_at is off - base, computed apart: folded into the pointer
 * arithmetic it would subtract a register from the stack pointer, which
 * the verifier refuses; barrier_var keeps it a number of its own. */
static __always_inline __u32 core_span_at(__u32 off, __u32 base)
{
	__u32 at = off - base;

	barrier_var(at);
	return at;
}

/* CORE_FROM_SPAN: the value of field of struct type, from span, a copy of
 * the struct's bytes from offset base (CORE_IN_SPAN must hold). */
#define CORE_FROM_SPAN(span, type, field, base)                                                      \
	(*(typeof(((type *)0)->field) *)((span) + core_span_at(bpf_core_field_offset(type, field), (base))))

#endif
