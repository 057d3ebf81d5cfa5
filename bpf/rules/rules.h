/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Rules: what the flows capability measures, changed at runtime.
 *
 * A rule matches on a source, destination or either CIDR (IPv4 or IPv6),
 * protocol, port or port range, direction, interface and TCP flags, and says
 * what to do with the packets it matches: measure them (the default), skip
 * them (counted per rule, no flow), sample 1 in N of them (the flow record
 * says N), or aggregate them at prefix granularity.
 *
 * Which rule decides: the one with the longest matching prefix; among equal
 * prefixes, the first in the rule file (its slot). A rule without a CIDR has
 * prefix length 0. Userspace (internal/rules) compiles the rules into:
 *  - rules_N: the rules by slot, slot = order in the file;
 *  - rules_src_N, rules_dst_N: LPM tries keyed by address. The entry of a
 *    prefix lists, longest prefix first, then by slot, every CIDR rule whose
 *    prefix covers it: its own and its ancestors', so that one lookup gives
 *    every CIDR rule that can match on that side. A rule on "either"
 *    address is in both tries;
 *  - rules_cfg[N]: the rules without a CIDR, by slot, tried when no CIDR
 *    rule matched, and what the set holds.
 * N is 0 or 1: userspace fills the set the programs do not read, then flips
 * rules_sel, so that a packet is judged by the old set or the new one,
 * never a mix (as capture_config_sel does for triggers).
 *
 * Judging costs two trie lookups, about 95 ns at 10 000 rules, where the
 * issue allows 20. So a flow is judged once and its verdict kept in
 * rules_cache, per CPU, tagged with the generation in rules_sel: the
 * generation changes at every replacement (and when an interface changes
 * groups), which makes every verdict of the old set stale at once, so
 * that a replacement stays atomic for cached verdicts too. A rule on TCP
 * flags decides packet by packet: a verdict holds the flags the set's
 * rules look at, and a packet with other flags is judged again.
 */
#ifndef LOUPE_RULES_H
#define LOUPE_RULES_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

/* Rule slots of one set. */
#define RULES_MAX 16384
/* Candidates one prefix entry lists (its rules and its ancestors'), and
 * rules without a CIDR: past either, userspace refuses the rule set. */
#define RULES_CANDIDATES 32

enum rule_action {
	RULE_MEASURE = 0,   /* a flow, as without rules */
	RULE_SKIP = 1,      /* no flow: counted in the rule's counters only */
	RULE_SAMPLE = 2,    /* 1 in sample_n packets measured, flows say sampling = N */
	RULE_AGGREGATE = 3, /* a flow per (source prefix, destination prefix, protocol) */
};

enum rule_port_side {
	RULE_PORT_EITHER = 0,
	RULE_PORT_SRC = 1,
	RULE_PORT_DST = 2,
};

/* One rule: 20 bytes. A zero field matches anything. */
struct rule {
	__u16 port_lo;         /* ports port_lo..port_hi, on port_side; 0..0: any port */
	__u16 port_hi;
	__u16 sample_n;        /* RULE_SAMPLE: 1 in sample_n (2..65535) */
	__u16 iface_group;     /* 0: any interface; else 1..64, a bit in rules_ifaces */
	__u8 proto;            /* IPPROTO_*; 0: any */
	__u8 port_side;        /* enum rule_port_side */
	__u8 direction;        /* 0: both; 1: ingress; 2: egress */
	__u8 action;           /* enum rule_action */
	__u8 tcp_flags_mask;   /* TCP packets whose flags & mask == value; 0: any */
	__u8 tcp_flags_value;
	__u8 agg_prefix;       /* RULE_AGGREGATE: prefix length, 1..128 (IPv4 packets: at most 32 of it) */
	__u8 used;             /* 1 in a slot that holds a rule */
	__u32 pad;
};

/* An LPM trie key: IPv4 addresses IPv4-mapped (::ffff:a.b.c.d/96+P), as
 * in the flow key. */
struct rule_lpm_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* The rules one prefix entry lists, best first: slots[i] with its prefix
 * length plen[i] (of the IPv4-mapped address: 96 + P for IPv4). */
struct rule_candidates {
	__u16 n;
	__u16 pad;
	__u16 slots[RULES_CANDIDATES];
	__u8 plen[RULES_CANDIDATES];
};

/* What a set holds. */
struct rules_config {
	__u32 nrules;    /* rules in the set; 0: no rule, every packet measured */
	__u8 has_src;    /* rules_src_N has entries */
	__u8 has_dst;    /* rules_dst_N has entries */
	__u8 has_iface;  /* some rule names interfaces: rules_ifaces is read */
	__u8 tcp_flags;  /* the TCP flags some rule looks at (their masks' union) */
	struct rule_candidates wild; /* the rules without a CIDR, plen 0 */
};

/* Per rule and CPU, of the set in force: what the rule matched, and where
 * its sampling is. */
struct rule_stats {
	__u64 packets;
	__u64 bytes;
	__u64 measured_packets; /* of those, counted in a flow (sampled: 1 in N) */
	__u64 measured_bytes;
	__u32 sample_next;      /* RULE_SAMPLE: packets until the next one measured */
	__u32 pad;
};

/* The two sets. Each agent creates its own (they are not pinned): it puts
 * its rules in force before it attaches, and programs an earlier agent
 * left attached keep that agent's sets until they are replaced. */
struct rules_array {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RULES_MAX);
	__type(key, __u32);         /* Key: the slot */
	__type(value, struct rule); /* Value: the rule */
} rules_0 SEC(".maps"), rules_1 SEC(".maps");

/* One entry more than rules: the IPv4 barrier (::ffff:0:0/96, listing only
 * IPv4 rules) that keeps an IPv4 address from an IPv6 rule's ::/0. */
struct rules_lpm {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RULES_MAX + 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rule_lpm_key);      /* Key: a rule's prefix */
	__type(value, struct rule_candidates); /* Value: the rules that may match under it */
} rules_src_0 SEC(".maps"), rules_src_1 SEC(".maps"), rules_dst_0 SEC(".maps"), rules_dst_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);                  /* Key: the set */
	__type(value, struct rules_config);  /* Value: what it holds */
} rules_cfg SEC(".maps");

/* The generation of the set in force: its low bit is the set (0 or 1).
 * Userspace adds one at a replacement and two when an interface changes
 * groups, starting from 0 (no rule) and skipping 0 when it wraps, so that
 * a set with rules is never in force at generation 0, which is what an
 * empty rules_cache entry holds. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); /* Value: the generation in force */
} rules_sel SEC(".maps");

/* Per CPU, the stats of set N's rule in slot s at N * RULES_MAX + s: a
 * replaced set's counters stay apart until userspace has read them. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * RULES_MAX);
	__type(key, __u32);
	__type(value, struct rule_stats);
} rules_stats SEC(".maps");

/* The interface groups (rule.iface_group, 1..64) each interface is in, a
 * bit each, one map per set (a set numbers its groups its own way);
 * maintained by userspace as interfaces come and go. */
struct rules_iface_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);   /* Key: ifindex */
	__type(value, __u64); /* Value: its groups */
} rules_ifaces_0 SEC(".maps"), rules_ifaces_1 SEC(".maps");

/* Per CPU scratch: the trie key of a lookup, off the stack, which the
 * entry program shares with the capture's calls. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rule_lpm_key);
} rules_scratch SEC(".maps");

/* Set from Go before load: 0 judges every packet (benchmarks and tests
 * that compare with the cache). */
volatile const __u8 cfg_rules_cache = 1;

/* Slots of the verdict cache, per CPU: 4096 of 72 bytes, 288 KiB a CPU,
 * against 1.5 MiB a CPU for rules_stats. */
#define RULES_CACHE_BITS 12
#define RULES_CACHE_SLOTS (1 << RULES_CACHE_BITS)

/* A flow's verdict: what rules_judge answered for it. */
struct rules_verdict {
	struct flow_key key;
	__u32 gen;       /* rules_sel when judged; 0: empty */
	__s32 judged;    /* rules_judge's answer */
	__u32 tcp_flags; /* the packet's flags, of those the set looks at */
};

/* The verdict cache: direct-mapped, indexed by a hash of the flow key,
 * the key kept in full and compared. A hash map would cost a second
 * lookup of the 60-byte key, as dear as the flow table's own; an array
 * entry is an address computed inline. Two flows that
 * share a slot take it in turn, each judged again when it comes back: a
 * collision costs time, never a wrong verdict. Per CPU, and written
 * without locks: a CPU runs one hook's program at a time (the hooks run
 * with bottom halves off), as the per-CPU flow table and rules_scratch
 * also rely on. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RULES_CACHE_SLOTS);
	__type(key, __u32);                  /* Key: hash of the flow key */
	__type(value, struct rules_verdict); /* Value: its flow and verdict */
} rules_cache SEC(".maps");

/* What rules_judge returns when no rule decides the packet. */
#define RULES_NONE (-1)
/* Its other answers: the set and the slot of the rule that decides. */
#define RULES_SET(v) (((__u32)(v) >> 16) & 1)
#define RULES_SLOT(v) ((__u32)(v) & 0xffff)

/* rule_matches tells whether r matches the packet of key, beyond its
 * prefix, which the trie already matched. */
static __always_inline int rule_matches(const struct rule *r, const struct flow_key *key, __u32 tcp_flags,
					__u64 groups)
{
	__u16 port;

	if (r->proto && r->proto != key->proto)
		return 0;
	if (r->direction && r->direction != key->direction + 1)
		return 0;
	if (r->tcp_flags_mask && (key->proto != IPPROTO_TCP || (tcp_flags & r->tcp_flags_mask) != r->tcp_flags_value))
		return 0;
	if (r->iface_group && !((groups >> ((r->iface_group - 1) & 63)) & 1))
		return 0;
	if (r->port_hi) {
		if (key->proto != IPPROTO_TCP && key->proto != IPPROTO_UDP && key->proto != IPPROTO_SCTP)
			return 0;
		if (r->port_side == RULE_PORT_SRC) {
			port = key->src_port;
			return port >= r->port_lo && port <= r->port_hi;
		}
		if (r->port_side == RULE_PORT_DST) {
			port = key->dst_port;
			return port >= r->port_lo && port <= r->port_hi;
		}
		return (key->src_port >= r->port_lo && key->src_port <= r->port_hi) ||
		       (key->dst_port >= r->port_lo && key->dst_port <= r->port_hi);
	}
	return 1;
}

/* rules_first returns the first candidate of c that matches, as
 * plen << 16 | slot, or -1. */
static __always_inline int rules_first(const struct rule_candidates *c, void *rules, const struct flow_key *key,
				       __u32 tcp_flags, __u64 groups)
{
	for (__u32 i = 0; i < RULES_CANDIDATES; i++) {
		const struct rule *r;
		__u32 slot;

		if (i >= c->n)
			break;
		slot = c->slots[i];
		r = bpf_map_lookup_elem(rules, &slot);
		if (r && r->used && rule_matches(r, key, tcp_flags, groups))
			return (__u32)c->plen[i] << 16 | (slot & 0xffff);
	}
	return -1;
}

/* better returns the better of two rules_first answers: the longer prefix,
 * then the lower slot. */
static __always_inline int rules_better(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	if ((a >> 16) != (b >> 16))
		return (a >> 16) > (b >> 16) ? a : b;
	return (a & 0xffff) <= (b & 0xffff) ? a : b;
}

/* rules_judge_in judges the packet of key by set n's rules. */
static __always_inline int rules_judge_in(__u32 n, void *rules, void *src, void *dst, void *ifaces,
					  const struct flow_key *key, __u32 tcp_flags)
{
	const struct rules_config *cfg;
	const struct rule_candidates *c;
	struct rule_lpm_key *lk;
	__u32 zero = 0;
	__u64 groups = 0, *g;
	int best = -1;

	cfg = bpf_map_lookup_elem(&rules_cfg, &n);
	if (!cfg || cfg->nrules == 0)
		return RULES_NONE;
	if (cfg->has_iface) {
		__u32 ifindex = key->ifindex;

		g = bpf_map_lookup_elem(ifaces, &ifindex);
		if (g)
			groups = *g;
	}
	lk = bpf_map_lookup_elem(&rules_scratch, &zero);
	if (!lk)
		return RULES_NONE;
	lk->prefixlen = 128;
	if (cfg->has_src) {
		__builtin_memcpy(lk->addr, key->src_addr, 16);
		c = bpf_map_lookup_elem(src, lk);
		if (c)
			best = rules_first(c, rules, key, tcp_flags, groups);
	}
	if (cfg->has_dst) {
		__builtin_memcpy(lk->addr, key->dst_addr, 16);
		c = bpf_map_lookup_elem(dst, lk);
		if (c)
			best = rules_better(best, rules_first(c, rules, key, tcp_flags, groups));
	}
	if (best < 0)
		best = rules_first(&cfg->wild, rules, key, tcp_flags, groups);
	if (best < 0)
		return RULES_NONE;
	return (int)(n << 16 | (best & 0xffff));
}

/* rules_judge returns which rule of set (0 or 1) decides the packet of
 * key (with its TCP flags): RULES_NONE, or the set and slot (RULES_SET,
 * RULES_SLOT).
 *
 * A global function: checked once, on its own, and its frame is not added
 * to the capture's chain of calls. */
__noinline int rules_judge(__u32 set, const struct flow_key *key, __u32 tcp_flags)
{
	if (!key)
		return RULES_NONE;
	if (set & 1)
		return rules_judge_in(1, &rules_1, &rules_src_1, &rules_dst_1, &rules_ifaces_1, key, tcp_flags);
	return rules_judge_in(0, &rules_0, &rules_src_0, &rules_dst_0, &rules_ifaces_0, key, tcp_flags);
}

/* rules_rule returns the rule in slot of set (0 or 1). Two lookups, each
 * on a map the verifier knows, which it inlines into an address
 * computation; the barrier keeps the compiler from merging them into one
 * lookup on a map chosen at run time, which the verifier leaves as a call
 * to the generic helper and an indirect call (about 8 ns a packet more
 * in BenchmarkRules). */
static __always_inline const struct rule *rules_rule(__u32 set, __u32 slot)
{
	const struct rule *r;

	if (set) {
		r = bpf_map_lookup_elem(&rules_1, &slot);
		barrier_var(r);
		return r;
	}
	return bpf_map_lookup_elem(&rules_0, &slot);
}

/* A 32-bit word of a flow key, read as such: may_alias tells the compiler
 * that it reads the key's byte arrays too. */
typedef __u32 __attribute__((may_alias)) rules_key_word;

/* rules_cache_slot hashes a flow key to a slot of rules_cache: the
 * addresses folded, with the ports, interface, protocol and direction,
 * into two words, each multiplied by a 64-bit odd constant (Fibonacci
 * hashing: the top bits of the product depend on every bit of the word).
 * Source and destination sit in different halves of a word, so that the
 * two directions of a connection do not collide. */
static __always_inline __u32 rules_cache_slot(const struct flow_key *key)
{
	const rules_key_word *w = (const rules_key_word *)key;
	/* Words of struct flow_key: 0-3 src_addr, 4-7 dst_addr, 8-10 the
	 * MACs (left out: they rarely tell flows apart), 11 ifindex, 12
	 * eth_type and src_port, 13 dst_port and vlan_id, 14 proto,
	 * direction and agg_prefix. */
	__u64 addrs = (__u64)(w[0] ^ w[1] ^ w[2] ^ w[3]) << 32 | (w[4] ^ w[5] ^ w[6] ^ w[7]);
	__u64 rest = (__u64)(w[12] ^ w[13]) << 32 | (w[11] ^ w[14]);

	return ((addrs * 0x9e3779b97f4a7c15ULL) ^ (rest * 0xc2b2ae3d27d4eb4fULL)) >> (64 - RULES_CACHE_BITS);
}

/* rules_same_flow tells whether two flow keys are equal, a 32-bit word
 * at a time (the key is 4-byte aligned). */
static __always_inline int rules_same_flow(const struct flow_key *a, const struct flow_key *b)
{
	const rules_key_word *x = (const rules_key_word *)a, *y = (const rules_key_word *)b;
	__u32 diff = 0;

#pragma unroll
	for (__u32 i = 0; i < sizeof(*a) / 4; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

/* rules_decide returns which rule decides the packet of key (with its TCP
 * flags), as rules_judge does: from the verdict cache when it holds the
 * flow's verdict under the set in force, else judged and kept there.
 *
 * The generation is read once, and both the cache's tag and the judging
 * use it: a packet is judged by one set, and its verdict is tagged with
 * that set's generation, whatever replacement happens meanwhile. */
static __always_inline int rules_decide(const struct flow_key *key, __u32 tcp_flags)
{
	const struct rules_config *cfg;
	struct rules_verdict *v;
	__u32 zero = 0, gen, set, flags, slot, *sel;
	int judged;

	sel = bpf_map_lookup_elem(&rules_sel, &zero);
	if (!sel)
		return RULES_NONE;
	gen = *(volatile __u32 *)sel;
	set = gen & 1;
	cfg = bpf_map_lookup_elem(&rules_cfg, &set);
	if (!cfg || cfg->nrules == 0)
		return RULES_NONE;
	if (!cfg_rules_cache)
		return rules_judge(set, key, tcp_flags);
	flags = tcp_flags & cfg->tcp_flags;
	slot = rules_cache_slot(key);
	v = bpf_map_lookup_elem(&rules_cache, &slot);
	if (!v)
		return rules_judge(set, key, tcp_flags);
	if (v->gen == gen && v->tcp_flags == flags && rules_same_flow(&v->key, key))
		return v->judged;
	judged = rules_judge(set, key, tcp_flags);
	v->key = *key;
	v->judged = judged;
	v->tcp_flags = flags;
	v->gen = gen;
	return judged;
}

#endif
