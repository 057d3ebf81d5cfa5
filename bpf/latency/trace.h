/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The trace context in an HTTP/1.x request's header block: W3C
 * `traceparent`, the single `b3` header and `X-B3-TraceId` with
 * `X-B3-SpanId`, anywhere in the block and across TCP segments.
 *
 * The seed's scanner read the first 800 bytes of a request byte by byte in
 * an unrolled loop (4 096 instructions) and found nothing past them. Here
 * the block is walked line by line: each buffer's payload is read with
 * bpf_skb_load_bytes in windows of TRACE_WINDOW bytes (so data beyond the
 * linear area is read too), each window searched eight bytes at a time for
 * '\n'; a line is looked at only when its first four bytes could start one
 * of the three names ("trac", "b3:", "x-b3" in either case) or end the
 * block ('\r', '\n').
 * Such a line's first TRACE_LINE_MAX bytes are read (one more load) and
 * judged: name, optional whitespace, a value checked digit by digit.
 *
 * Across segments: a request's scan state (struct trace_scan) keeps where
 * the next segment must start, the bytes scanned, and the start of a line
 * the segment cut (up to TRACE_LINE_MAX bytes: every header looked for,
 * with its value, is shorter), so that a header straddling two segments is
 * judged whole when the next one comes.
 *
 * Bounds: TRACE_WINDOWS windows per buffer (64 KiB, a GSO buffer's most),
 * latency_scan_limit bytes per request in all, TRACE_LINE_MAX bytes per
 * line; each loop has a constant bound, and the per-word and per-line work
 * is in global functions that the verifier checks once (capture/http.h
 * explains why).
 */
#ifndef LOUPE_LATENCY_TRACE_H
#define LOUPE_LATENCY_TRACE_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

/* Bytes of a line judged: "x-b3-traceid:" and 32 digits is the longest
 * header looked for without whitespace (45 bytes); traceparent's is 67
 * with its name, b3's at most 73. A power of two. */
#define TRACE_LINE_MAX 128
#define TRACE_WINDOW 512
#define TRACE_WORDS (TRACE_WINDOW / 8)
#define TRACE_WINDOWS 128 /* 64 KiB */
/* Whitespace skipped between a name's colon and its value. */
#define TRACE_OWS_MAX 16

#define TRACE_BYTES(b) (0x0101010101010101ULL * (b))
#define TRACE_HAS_ZERO(x) (((x) - TRACE_BYTES(0x01)) & ~(x) & TRACE_BYTES(0x80))

/* hop.Source. */
enum trace_source {
	TRACE_SRC_TRACEPARENT = 1,
	TRACE_SRC_B3 = 2,
	TRACE_SRC_B3_SINGLE = 3,
	TRACE_SRC_TCP_OPTION = 4,
	TRACE_SRC_IP_OPTION = 5,
};

enum trace_flag {
	TRACE_F_SKIP_LINE = 1 << 0, /* the current line goes on in the next segment and needs no look */
	TRACE_F_B3_TRACE = 1 << 1,  /* trace_id holds an X-B3-TraceId */
	TRACE_F_B3_SPAN = 1 << 2,   /* span_id holds an X-B3-SpanId */
	TRACE_F_UNSAMPLED = 1 << 3, /* the context found says its trace is not sampled (latency/hop.h) */
};

/* A request whose header block is being scanned, at one hook: 184 bytes. */
struct trace_scan {
	__u32 start_seq; /* the request's first byte */
	__u32 next_seq;  /* where the next segment must start */
	__u32 scanned;   /* bytes of the request scanned */
	__u8 carry_len;  /* bytes of the current line in carry */
	__u8 flags;      /* enum trace_flag */
	__u8 source;     /* enum trace_source, once found */
	__u8 stamp;      /* enum trace_stamp: the request's stamp (latency/hop.h) */
	__u8 trace_id[16];
	__u8 span_id[8];
	/* The request's stamp, held while the scan goes on past its first
	 * segment (TRACE_STAMP_HELD): it goes out with the context found,
	 * or alone when none is and the request is kept untraced. */
	__u64 stamp_time;
	__u32 stamp_len;
	__u32 pad;
	__u8 carry[TRACE_LINE_MAX];
};

/* trace_scan.stamp. */
enum trace_stamp {
	TRACE_STAMP_HELD = 1,     /* stamp_time and stamp_len hold the request's stamp */
	TRACE_STAMP_TUNNELED = 2, /* ...taken inside a tunnel */
	TRACE_STAMP_KEEP = 4,     /* without a context in its headers, the request is stamped all the same */
};

/* What the scan of a buffer ends with (trace_scratch.outcome). */
enum trace_outcome {
	TRACE_GO_ON = 0,   /* the block goes on in the next segment */
	TRACE_FOUND,       /* a context: trace_scan.source, trace_id, span_id */
	TRACE_END,         /* the block ended without one */
	TRACE_MALFORMED,   /* a trace header with a bad or oversized value: the scan goes on */
	TRACE_NOT_HTTP,    /* bytes that no header block holds */
	TRACE_LOAD_ERROR,
};

/* Per-CPU room for the scan: the window, the line judged, the request's
 * state while a buffer is scanned, and the buffer's bounds. */
struct trace_scratch {
	__u64 win[TRACE_WORDS];
	/* The line judged, then zeroes: judging reads past a short line. */
	__u8 line[2 * TRACE_LINE_MAX];
	struct trace_scan scan;
	__u32 off;      /* where the payload starts in the frame */
	__u32 len;      /* bytes of this buffer to scan */
	__u32 outcome;  /* enum trace_outcome */
	__u32 malformed; /* trace headers with a bad value in this buffer */
	/* The segment at hand, for the capability's global functions
	 * (latency/hop.h), which take few arguments. */
	__u32 seq;       /* its first payload byte's number */
	__u32 seg_len;   /* its payload bytes */
	__u32 slot;      /* its connection's slot at this hook */
	__u32 tag;       /* and the tag its connection writes there */
	__u32 opt_at;    /* where latency_option_find's walk is */
	__u32 win_len;   /* bytes in win */
	__u32 win_pos;   /* where win starts in the payload */
	__u32 limited;   /* the scan limit cut this buffer */
	__u8 tunneled;
	/* The scan's state is in latency_scans (it went on from an earlier
	 * segment, or an earlier request's scan of the connection was left
	 * there): only then does ending it delete an entry. */
	__u8 stored;
	/* The request's stamp waits for the scan of its first segment, to go
	 * in one record with the context found there, or to be held in the
	 * scan's state if the header block goes on (latency/hop.h). */
	__u8 stamp_pending;
	/* The request is stamped even without a context in its headers: the
	 * untraced sampling keeps it, or an IP or TCP option carried one. */
	__u8 keep;
	__u64 stamp_time; /* the waiting stamp's time */
	/* A request's first segment: a hash of its 5-tuple, sequence number
	 * and length (latency_seen's key; 0 for any other segment). */
	__u64 seg_hash;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct trace_scratch);
} trace_scratch SEC(".maps");

static __always_inline struct trace_scratch *trace_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&trace_scratch, &zero);
}

/* trace_word8 is the eight bytes of b at i as a little-endian word. */
static __always_inline __u64 trace_word8(const __u8 *b, __u32 i)
{
	__u64 w = 0;

#pragma unroll
	for (int k = 0; k < 8; k++)
		w |= (__u64)b[(i + k) & (2 * TRACE_LINE_MAX - 1)] << (8 * k);
	return w;
}

/* Header names with their colon, lower case, as little-endian words; a
 * name is compared with its bytes ORed with 0x20 (ASCII letters to lower
 * case; '-', ':' and digits already have the bit). */
#define NAME_TRACEPARENT_0 0x7261706563617274ULL /* "tracepar" */
#define NAME_TRACEPARENT_1 0x3a746e65ULL         /* "ent:" */
#define NAME_B3 0x3a3362ULL                      /* "b3:" */
#define NAME_XB3_0 0x6172742d33622d78ULL         /* "x-b3-tra" */
#define NAME_XB3_TRACE_1 0x3a64696563ULL         /* "ceid:" */
#define NAME_XB3_SPAN_0 0x6170732d33622d78ULL    /* "x-b3-spa" */
#define NAME_XB3_SPAN_1 0x3a64696eULL            /* "nid:" */

/* Hex digits by byte: 0-15 for 0-9 and a-f, 0x10 | value for A-F, 0xff
 * for anything else. A table, not compares: the verifier walks every
 * branch of every digit of an id. */
static const __u8 trace_hexval[256] = {
	[0 ... '0' - 1] = 0xff,
	['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7, ['8'] = 8, ['9'] = 9,
	[':' ... '@'] = 0xff,
	['A'] = 0x1a, ['B'] = 0x1b, ['C'] = 0x1c, ['D'] = 0x1d, ['E'] = 0x1e, ['F'] = 0x1f,
	['G' ... 'a' - 1] = 0xff,
	['a'] = 10, ['b'] = 11, ['c'] = 12, ['d'] = 13, ['e'] = 14, ['f'] = 15,
	['g' ... 255] = 0xff,
};

/* Where trace_hex_at puts the bytes it decodes (its where argument). */
enum trace_hex_dst {
	TRACE_HEX_TRACE = 0,  /* scan.trace_id, 16 bytes, right-aligned */
	TRACE_HEX_SPAN = 1,   /* scan.span_id, 8 bytes */
	TRACE_HEX_PARENT = 2, /* b3's parent span id: checked, not kept (line's last 8 bytes) */
	TRACE_HEX_UPPER = 4,  /* upper-case digits admitted (B3; traceparent is lower case) */
};

/* trace_load8 is the eight bytes of line at d as a little-endian word:
 * two aligned loads and shifts, where byte by byte it was eight loads. */
static __always_inline __u64 trace_load8(const __u8 *line, __u32 d)
{
	__u32 at = d & ~7U, r = (d & 7) * 8;
	__u64 lo = *(const __u64 *)(line + (at & (2 * TRACE_LINE_MAX - 8)));
	__u64 hi = *(const __u64 *)(line + ((at + 8) & (2 * TRACE_LINE_MAX - 8)));

	/* hi's part shifted in two steps: by 64 - r at once would be a shift
	 * by 64 when r is 0. */
	return lo >> r | (hi << (63 - r)) << 1;
}

/* trace_hex8 decodes the eight hex digits of w (its first digit in its
 * lowest byte) into four bytes, the first digit the high nibble of the
 * lowest, eight digits at once: a byte is a digit when it lies in '0'-'9'
 * or 'a'-'f' (or 'A'-'F' when upper), each range test an add per bound on
 * all eight bytes (no byte carries into the next once their top bits are
 * off), and its value is its low nibble, plus 9 for a letter (bit 6 set).
 * Bytes that are no digit set bits in *bad. */
static __always_inline __u32 trace_hex8(__u64 w, __u32 upper, __u64 *bad)
{
	__u64 x = w & TRACE_BYTES(0x7f), ok, nib, t;

#define TRACE_IN(lo, hi) ((x + TRACE_BYTES(0x80 - (lo))) & ~(x + TRACE_BYTES(0x80 - (hi) - 1)))
	ok = TRACE_IN('0', '9') | TRACE_IN('a', 'f');
	if (upper)
		ok |= TRACE_IN('A', 'F');
#undef TRACE_IN
	*bad |= (w | ~ok) & TRACE_BYTES(0x80);
	nib = (x & TRACE_BYTES(0x0f)) + 9 * ((x >> 6) & TRACE_BYTES(0x01));
	/* Each pair of digits into the low byte of its 16 bits, then the four
	 * bytes together. */
	t = (nib & 0x000f000f000f000fULL) << 4 | (nib >> 8 & 0x000f000f000f000fULL);
	t = (t | t >> 8) & 0x0000ffff0000ffffULL;
	return (__u32)(t | t >> 16);
}

/* trace_hex_at decodes n hex digits (16 or 32) of s->line from i into the
 * bytes where names, right-aligned (a 16-digit B3 trace id fills the low
 * half of a trace id). Returns 0, or -1 on a bad digit or an id of zeroes,
 * which no id may be. Eight digits at a time (trace_hex8): byte by byte,
 * through a table, this was the costliest function of a traced request's
 * scan. A global function: checked inline, the digits multiplied its
 * caller's paths. */
__noinline int trace_hex_at(struct trace_scratch *s, __u32 i, __u32 n, __u32 where)
{
	__u32 size = (where & 3) == TRACE_HEX_TRACE ? 16 : 8, skip, upper = where & TRACE_HEX_UPPER;
	__u64 bad = 0, nonzero = 0;
	__u8 *out;

	if (!s || (n != 16 && n != 32) || n > 2 * size)
		return -1;
	if ((where & 3) == TRACE_HEX_TRACE)
		out = s->scan.trace_id;
	else if ((where & 3) == TRACE_HEX_SPAN)
		out = s->scan.span_id;
	else
		out = s->line + 2 * TRACE_LINE_MAX - 8;
	skip = size - n / 2;
	for (__u32 k = 0; k < 8; k++) {
		if (k >= skip)
			break;
		out[k] = 0;
	}
#pragma unroll
	for (__u32 w = 0; w < 4; w++) {
		__u32 v, o;

		if (w * 8 >= n)
			break;
		v = trace_hex8(trace_load8(s->line, i + 8 * w), upper, &bad);
		nonzero |= v;
		o = (skip + 4 * w) & 12;
		out[o] = v;
		out[o + 1] = v >> 8;
		out[o + 2] = v >> 16;
		out[o + 3] = v >> 24;
	}
	return bad || !nonzero ? -1 : 0;
}

/* trace_ows returns where the whitespace (spaces, tabs) of s->line from i
 * ends, within the n bytes held and TRACE_OWS_MAX bytes. A global
 * function, as the two below: its result is one unknown number to the
 * verifier, where inline each count of spaces was a path of its own
 * through all that follows. */
__noinline __u32 trace_ows(const struct trace_scratch *s, __u32 i, __u32 n)
{
	if (!s)
		return i;
	for (__u32 k = 0; k < TRACE_OWS_MAX; k++) {
		__u8 c;

		if (i >= n)
			break;
		c = s->line[i & (2 * TRACE_LINE_MAX - 1)];
		if (c != ' ' && c != '\t')
			break;
		i++;
	}
	return i;
}

/* trace_value_end tells whether the value ending before s->line[i] ends
 * there: whitespace up to the end of the line, within the n bytes held. */
__noinline int trace_value_end(const struct trace_scratch *s, __u32 i, __u32 n)
{
	if (!s)
		return 0;
	for (__u32 k = 0; k < TRACE_OWS_MAX; k++) {
		__u8 c;

		if (i >= n)
			return 0;
		c = s->line[i & (2 * TRACE_LINE_MAX - 1)];
		if (c == '\r' || c == '\n')
			return 1;
		if (c != ' ' && c != '\t')
			return 0;
		i++;
	}
	return 0;
}

enum trace_judgement {
	TRACE_J_NONE = 0, /* not a header looked for */
	TRACE_J_FOUND,    /* a whole context: scan.source, trace_id, span_id */
	TRACE_J_PART,     /* an X-B3 header: the other one is awaited */
	TRACE_J_END,      /* the empty line ending the block */
	TRACE_J_BAD,      /* a header looked for, with a bad or oversized value */
	TRACE_J_BINARY,   /* not a header line at all */
};

/* trace_judge judges the line in s->line: its first n bytes (n up to
 * TRACE_LINE_MAX), the line's end among them or not. A global function:
 * checked once, whichever path reaches it. */
__noinline int trace_judge(struct trace_scratch *s, __u32 n)
{
	__u64 w0, w1;
	__u32 i, kind;
	__u8 *line, c;

	if (!s || n == 0 || n > TRACE_LINE_MAX)
		return TRACE_J_NONE;
	line = s->line;
	c = line[0];
	if (c == '\n' || (c == '\r' && n > 1 && line[1] == '\n'))
		return TRACE_J_END;
	if (c < 0x20 || c >= 0x7f)
		return TRACE_J_BINARY;
	w0 = trace_word8(line, 0) | TRACE_BYTES(0x20);
	w1 = trace_word8(line, 8) | TRACE_BYTES(0x20);
	if (w0 == NAME_TRACEPARENT_0 && (w1 & 0xffffffff) == NAME_TRACEPARENT_1 && n >= 12) {
		kind = TRACE_SRC_TRACEPARENT;
		i = 12;
	} else if ((w0 & 0xffffff) == NAME_B3 && n >= 3) {
		kind = TRACE_SRC_B3_SINGLE;
		i = 3;
	} else if (w0 == NAME_XB3_0 && (w1 & 0xffffffffff) == NAME_XB3_TRACE_1 && n >= 13) {
		kind = TRACE_SRC_B3;
		i = 13;
	} else if (w0 == NAME_XB3_SPAN_0 && (w1 & 0xffffffff) == NAME_XB3_SPAN_1 && n >= 12) {
		kind = TRACE_SRC_B3 | 0x80; /* the span id's header */
		i = 12;
	} else {
		return TRACE_J_NONE;
	}
	i = trace_ows(s, i, n);
	if (i >= TRACE_LINE_MAX)
		return TRACE_J_BAD;

	switch (kind) {
	case TRACE_SRC_TRACEPARENT: {
		/* 00-<32 hex>-<16 hex>-<2 hex>: version 00 exactly (a later
		 * version may add fields; ff is invalid), lower case. */
		__u32 f0, f1;

		if (line[i & 255] != '0' || line[(i + 1) & 255] != '0' || line[(i + 2) & 255] != '-' ||
		    line[(i + 35) & 255] != '-' || line[(i + 52) & 255] != '-')
			return TRACE_J_BAD;
		if (trace_hex_at(s, i + 3, 32, TRACE_HEX_TRACE) ||
		    trace_hex_at(s, i + 36, 16, TRACE_HEX_SPAN))
			return TRACE_J_BAD;
		f0 = trace_hexval[line[(i + 53) & 255]];
		f1 = trace_hexval[line[(i + 54) & 255]];
		if ((f0 | f1) > 15 || !trace_value_end(s, i + 55, n))
			return TRACE_J_BAD;
		if (!(f1 & 1)) /* trace-flags' "sampled" bit */
			s->scan.flags |= TRACE_F_UNSAMPLED;
		s->scan.source = TRACE_SRC_TRACEPARENT;
		return TRACE_J_FOUND;
	}
	case TRACE_SRC_B3_SINGLE: {
		/* <16 or 32 hex>-<16 hex>[-<sampling>[-<parent span>]]; a
		 * value of one character ("0", "1", "d") carries the sampling
		 * decision alone: no id, not an error. */
		__u32 t = 32;

		if (trace_value_end(s, i + 1, n))
			return TRACE_J_NONE;
		if (line[(i + 32) & 255] != '-')
			t = 16;
		if (line[(i + t) & 255] != '-' || trace_hex_at(s, i, t, TRACE_HEX_TRACE | TRACE_HEX_UPPER) ||
		    trace_hex_at(s, i + t + 1, 16, TRACE_HEX_SPAN | TRACE_HEX_UPPER))
			return TRACE_J_BAD;
		i += t + 17;
		if (!trace_value_end(s, i, n)) {
			c = line[(i + 1) & 255];
			if (line[i & 255] != '-' || (c != '0' && c != '1' && c != 'd'))
				return TRACE_J_BAD;
			if (c == '0') /* the sampling state: not sampled */
				s->scan.flags |= TRACE_F_UNSAMPLED;
			if (!trace_value_end(s, i + 2, n) &&
			    (line[(i + 2) & 255] != '-' || trace_hex_at(s, i + 3, 16, TRACE_HEX_PARENT | TRACE_HEX_UPPER) ||
			     !trace_value_end(s, i + 19, n)))
				return TRACE_J_BAD;
		}
		s->scan.source = TRACE_SRC_B3_SINGLE;
		return TRACE_J_FOUND;
	}
	case TRACE_SRC_B3: {
		__u32 t = 32;

		if (!trace_value_end(s, i + 32, n))
			t = 16;
		if (trace_hex_at(s, i, t, TRACE_HEX_TRACE | TRACE_HEX_UPPER) || !trace_value_end(s, i + t, n))
			return TRACE_J_BAD;
		s->scan.flags |= TRACE_F_B3_TRACE;
		break;
	}
	default:
		if (trace_hex_at(s, i, 16, TRACE_HEX_SPAN | TRACE_HEX_UPPER) || !trace_value_end(s, i + 16, n))
			return TRACE_J_BAD;
		s->scan.flags |= TRACE_F_B3_SPAN;
	}
	if ((s->scan.flags & (TRACE_F_B3_TRACE | TRACE_F_B3_SPAN)) != (TRACE_F_B3_TRACE | TRACE_F_B3_SPAN))
		return TRACE_J_PART;
	s->scan.source = TRACE_SRC_B3;
	return TRACE_J_FOUND;
}

/* trace_verdict turns a line's judgement into the buffer's outcome: 1
 * stops the scan of the buffer. */
static __always_inline int trace_verdict(struct trace_scratch *s, int j)
{
	switch (j) {
	case TRACE_J_FOUND:
		s->outcome = TRACE_FOUND;
		return 1;
	case TRACE_J_END:
		s->outcome = TRACE_END;
		return 1;
	case TRACE_J_BINARY:
		s->outcome = TRACE_NOT_HTTP;
		return 1;
	case TRACE_J_BAD:
		s->malformed++;
		/* Another header may still carry a context: go on. */
		return 0;
	}
	return 0;
}

/* TRACE_ZEROES flags exactly the zero bytes of x (0x80 in each), with no
 * false flag above a real one (unlike TRACE_HAS_ZERO). */
#define TRACE_ZEROES(x) (~((((x) & TRACE_BYTES(0x7f)) + TRACE_BYTES(0x7f)) | (x) | TRACE_BYTES(0x7f)))

/* trace_has_newline tells whether a '\n' is among bytes start..n-1 of
 * s->line (n at most TRACE_LINE_MAX), eight bytes at a time. */
static __always_inline int trace_has_newline(const struct trace_scratch *s, __u32 start, __u32 n)
{
	for (__u32 k = 0; k < TRACE_LINE_MAX / 8; k++) {
		__u32 i = k * 8;
		__u64 v, valid = ~0ULL;

		if (i >= n)
			break;
		if (i + 8 <= start)
			continue;
		if (n - i < 8)
			valid = (1ULL << (8 * (n - i))) - 1;
		if (start > i)
			valid &= ~((1ULL << (8 * (start - i))) - 1);
		v = *(const __u64 *)(s->line + (i & (TRACE_LINE_MAX - 8)));
		if (TRACE_ZEROES(v ^ TRACE_BYTES('\n')) & valid & TRACE_BYTES(0x80))
			return 1;
	}
	return 0;
}

/* trace_line_at looks at the line starting at payload offset at of the
 * buffer (a fresh line: nothing carried): judged now if it ends within
 * TRACE_LINE_MAX bytes or the buffer holds that many of it, carried to the
 * next segment otherwise. Returns 1 to stop the buffer's scan. */
__noinline int trace_line_at(struct __sk_buff *skb, __u32 at)
{
	struct trace_scratch *s = trace_scratch_get();
	__u32 n;

	if (!skb || !s || at >= s->len)
		return 1;
	s->scan.carry_len = 0;
	s->scan.flags &= ~TRACE_F_SKIP_LINE;
	n = s->len - at;
	if (n > TRACE_LINE_MAX)
		n = TRACE_LINE_MAX;
	asm volatile("" : "+r"(n));
	if (n == 0 || n > TRACE_LINE_MAX)
		return 1;
	if (bpf_skb_load_bytes(skb, s->off + at, s->line, n) < 0) {
		s->outcome = TRACE_LOAD_ERROR;
		return 1;
	}
	__builtin_memset(s->line + TRACE_LINE_MAX, 0, TRACE_LINE_MAX);
	if (!trace_has_newline(s, 0, n)) {
		if (n < TRACE_LINE_MAX) {
			/* The segment ends first: the line is judged whole
			 * when the next one comes. */
			__builtin_memcpy(s->scan.carry, s->line, TRACE_LINE_MAX);
			s->scan.carry_len = n;
			return 0;
		}
		/* Longer than any header looked for: judged on its start,
		 * its rest skipped. */
		s->scan.flags |= TRACE_F_SKIP_LINE;
	}
	return trace_verdict(s, trace_judge(s, n));
}

/* trace_line_carried judges the line the previous segment cut: its
 * carried bytes, then this buffer's first ones. Returns 1 to stop. */
__noinline int trace_line_carried(struct __sk_buff *skb)
{
	struct trace_scratch *s = trace_scratch_get();
	__u32 c, n, total;

	if (!skb || !s)
		return 1;
	c = s->scan.carry_len;
	if (c == 0 || c >= TRACE_LINE_MAX)
		return 0;
	n = TRACE_LINE_MAX - c;
	if (n > s->len)
		n = s->len;
	asm volatile("" : "+r"(n));
	if (n == 0 || n > TRACE_LINE_MAX)
		return 0;
	__builtin_memcpy(s->line, s->scan.carry, TRACE_LINE_MAX);
	if (bpf_skb_load_bytes(skb, s->off, s->line + (c & (TRACE_LINE_MAX - 1)), n) < 0) {
		s->outcome = TRACE_LOAD_ERROR;
		return 1;
	}
	__builtin_memset(s->line + TRACE_LINE_MAX, 0, TRACE_LINE_MAX);
	total = c + n;
	if (!trace_has_newline(s, c, total)) {
		if (total < TRACE_LINE_MAX) {
			/* Still not its end: this whole segment was part of
			 * the line. */
			__builtin_memcpy(s->scan.carry, s->line, TRACE_LINE_MAX);
			s->scan.carry_len = total;
			return 0;
		}
		s->scan.flags |= TRACE_F_SKIP_LINE;
	}
	s->scan.carry_len = 0;
	return trace_verdict(s, trace_judge(s, total));
}

/* trace_candidate tells whether a line starting with c is to be looked
 * at: the first letter of a name looked for, the block's end, or a byte
 * no header line starts with. */
static __always_inline int trace_candidate(__u8 c)
{
	__u8 l = c | 0x20;

	return l == 't' || l == 'b' || l == 'x' || c == '\r' || c == '\n' || c < 0x20 || c >= 0x7f;
}

/* trace_head_candidate is trace_candidate for a line whose first four
 * bytes are known (head, little-endian): the start of a name looked for
 * ("trac", "x-b3", "b3:" in any case), the block's end, or binary. Most
 * header lines fail it without a load: an X-Forwarded-For, a
 * Transfer-Encoding. */
static __always_inline int trace_head_candidate(__u32 head)
{
	__u32 l = head | 0x20202020;
	__u8 c = head & 0xff;

	return l == 0x63617274 /* "trac" */ || l == 0x33622d78 /* "x-b3" */ ||
	       (l & 0xffffff) == 0x3a3362 /* "b3:" */ || c == '\r' || c == '\n' || c < 0x20 || c >= 0x7f;
}

/* trace_line_after looks at the line that starts after the '\n' at
 * window offset at, of window start - at - 1: at once past it unless its
 * first bytes could start a trace header (or the block's end, or binary),
 * with trace_line_at otherwise. Returns 1 to stop the buffer's scan. A
 * global function: checked inline, the two ways of telling multiplied the
 * window's states past the verifier's bound. */
__noinline int trace_line_after(struct __sk_buff *skb, __u32 at)
{
	struct trace_scratch *s = trace_scratch_get();
	const __u8 *b;
	__u32 start;

	if (!skb || !s)
		return 1;
	b = (const __u8 *)s->win;
	start = s->win_pos + at + 1;
	if (at + 5 <= s->win_len && start + 4 <= s->len) {
		/* The window holds the line's first four bytes. */
		__u32 head = b[(at + 1) & (TRACE_WINDOW - 1)] | (__u32)b[(at + 2) & (TRACE_WINDOW - 1)] << 8 |
			     (__u32)b[(at + 3) & (TRACE_WINDOW - 1)] << 16 |
			     (__u32)b[(at + 4) & (TRACE_WINDOW - 1)] << 24;

		if (!trace_head_candidate(head)) {
			s->scan.flags |= TRACE_F_SKIP_LINE;
			return 0;
		}
	} else if (at + 1 < TRACE_WINDOW && !trace_candidate(b[(at + 1) & (TRACE_WINDOW - 1)])) {
		s->scan.flags |= TRACE_F_SKIP_LINE;
		return 0;
	}
	/* trace_line_at reads the line into s->line: the window stays. */
	return trace_line_at(skb, start);
}

/* trace_window scans window i of the buffer s->off, s->len describe for
 * line starts, and looks at those that could hold a trace header (a global
 * function, called once per window). Returns 1 to stop. */
__noinline int trace_window(struct __sk_buff *skb, __u32 i)
{
	struct trace_scratch *s = trace_scratch_get();
	__u32 pos, n, words;

	if (!skb || !s || i >= TRACE_WINDOWS)
		return 1;
	pos = i * TRACE_WINDOW;
	if (pos >= s->len)
		return 1;
	n = s->len - pos;
	if (n > TRACE_WINDOW)
		n = TRACE_WINDOW;
	asm volatile("" : "+r"(n));
	if (n == 0 || n > TRACE_WINDOW)
		return 1;
	if (bpf_skb_load_bytes(skb, s->off + pos, s->win, n) < 0) {
		s->outcome = TRACE_LOAD_ERROR;
		return 1;
	}
	s->win_len = n;
	s->win_pos = pos;
	/* The bytes past the buffer's end in its last word read as 0x01,
	 * neither NUL nor '\n': the loop then tests whole words, and most
	 * words (no NUL, no '\n') cost it two tests and a branch. */
	words = (n + 7) / 8;
	if (n & 7) {
		__u64 keep = (1ULL << (8 * (n & 7))) - 1;
		__u32 last = (n / 8) & (TRACE_WORDS - 1);

		s->win[last] = (s->win[last] & keep) | (TRACE_BYTES(0x01) & ~keep);
	}
	for (__u32 w = 0; w < TRACE_WORDS; w++) {
		__u64 v, nul, hits;

		if (w >= words)
			break;
		v = s->win[w];
		nul = TRACE_HAS_ZERO(v);
		hits = TRACE_HAS_ZERO(v ^ TRACE_BYTES('\n'));
		if (!(nul | hits))
			continue;
		/* A NUL byte: binary data, not a header block. */
		if (nul) {
			s->outcome = TRACE_NOT_HTTP;
			return 1;
		}
		/* Each '\n' flagged, lowest first: the lowest set bit is
		 * 0x80 << 8k, and (1 << 8k) * 0x0001020304050607 has k in its
		 * top byte. */
		for (__u32 k = 0; k < 8 && hits; k++) {
			__u64 low = hits & -hits;
			__u32 at = w * 8 + (((low >> 7) * 0x0001020304050607ULL) >> 56);
			__u32 start = pos + at + 1; /* the line after the '\n' */

			hits &= hits - 1;
			/* The test flags a byte above a real '\n' too: look. */
			if (((const __u8 *)s->win)[at & (TRACE_WINDOW - 1)] != '\n')
				continue;
			/* A '\n' ends the current line: whatever was carried
			 * or skipped of it is done. */
			s->scan.carry_len = 0;
			s->scan.flags &= ~TRACE_F_SKIP_LINE;
			if (start >= s->len)
				return 0; /* the next segment starts a line */
			if (trace_line_after(skb, at))
				return 1;
		}
	}
	return 0;
}

/* trace_scan_buffer scans the buffer s->off, s->len describe, after the
 * line the previous segment cut. */
static __always_inline void trace_scan_buffer(struct __sk_buff *skb, struct trace_scratch *s)
{
	if (!(s->scan.flags & TRACE_F_SKIP_LINE)) {
		if (s->scan.carry_len) {
			if (trace_line_carried(skb))
				return;
		} else if (s->len) {
			/* A line starts at the buffer's first byte. */
			if (bpf_skb_load_bytes(skb, s->off, s->line, 1) == 0 && !trace_candidate(s->line[0]))
				s->scan.flags |= TRACE_F_SKIP_LINE;
			else if (trace_line_at(skb, 0))
				return;
		}
	}
	for (__u32 i = 0; i < TRACE_WINDOWS; i++) {
		if (trace_window(skb, i))
			break;
	}
}

#endif
