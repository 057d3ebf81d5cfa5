/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* HTTP/1.x status lines in TCP payload: the capture trigger's scanner.
 *
 * A status line ("HTTP/1.1 500 ...") is looked for at every position of the
 * payload, not only at its start (the thesis's scanner, section 4.1.3): the
 * second of two pipelined responses, or a response that GRO merged behind
 * another on a keep-alive connection, starts in the middle. The payload is
 * read with bpf_skb_load_bytes in windows from a bpf_loop, so bytes beyond
 * the linear area (GSO/GRO super-packets up to 64 KB) are read too: direct
 * packet access sees only the linear part.
 *
 * Cost: a window is read once and searched for 'H' thirty-two bytes at a
 * time, eight in each of four words with one branch for the four; only a
 * word holding an 'H' is looked at byte by byte. The loops are plain bounded
 * loops, not unrolled further, so that the verifier walks each body once per
 * iteration instead of every path through a few hundred inlined compares.
 */
#ifndef LOUPE_CAPTURE_HTTP_H
#define LOUPE_CAPTURE_HTTP_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "parse.h"

/* "HTTP/1.1 500": the bytes a status line is recognised by. */
#define HTTP_STATUS_LEN 12
/* Bytes of a direction's stream kept to find a status line that starts in
 * one segment and ends in the next. */
#define HTTP_TAIL_LEN (HTTP_STATUS_LEN - 1)
/* Windows overlap by a status line but one byte: every position is the start
 * of a candidate in exactly one window. 512 bytes: each window costs a read
 * (a helper call) and a call of the window function, and with 64-byte
 * windows those made a 1448-byte segment cost twice what it does now
 * (BenchmarkCapturePath). */
#define SCAN_WINDOW 512
#define SCAN_WORDS (SCAN_WINDOW / 8)
#define SCAN_STRIDE (SCAN_WINDOW - HTTP_STATUS_LEN + 1)
/* The most one buffer can hold (a GSO/GRO super-packet). */
#define SCAN_MAX_BYTES 65536

/* "HTTP/1." as the low seven bytes of a little-endian word. */
#define HTTP1_PREFIX 0x2e312f50545448ULL

/* status_at returns the status code of a status line starting at b[at], or
 * 0. b must hold at + HTTP_STATUS_LEN bytes. The twelve bytes are put
 * together into two words and tested with one branch: the verifier walks
 * every branch of a scan, so fewer branches verify faster, and a byte read
 * at a variable offset is always aligned where a word read is not. */
static __always_inline __u16 status_at(const __u8 *b, __u32 at)
{
	__u64 w = 0;
	__u32 t = 0, d, sp, c1, c2, c3;

#pragma unroll
	for (int k = 0; k < 8; k++)
		w |= (__u64)b[at + k] << (8 * k);
#pragma unroll
	for (int k = 0; k < 4; k++)
		t |= (__u32)b[at + 8 + k] << (8 * k);
	d = (w >> 56) - '0';
	sp = t & 0xff;
	c1 = ((t >> 8) & 0xff) - '1';
	c2 = ((t >> 16) & 0xff) - '0';
	c3 = (t >> 24) - '0';
	if (((w & 0x00ffffffffffffffULL) != HTTP1_PREFIX) | (d > 9) | (sp != ' ') | (c1 > 4) | (c2 > 9) | (c3 > 9))
		return 0;
	return (c1 + 1) * 100 + c2 * 10 + c3;
}

/* Broadcast a byte to every byte of a word, and the "has a zero byte" test:
 * a word holding an 'H' has a zero byte once XORed with BYTES('H'). The test
 * may also flag a byte above a real zero byte (a borrow): harmless, every
 * flagged position is checked. */
#define BYTES(b) (0x0101010101010101ULL * (b))
#define HAS_ZERO(x) (((x) - BYTES(0x01)) & ~(x) & BYTES(0x80))

/* What a scan found: written by http_scan_window, one window at a time. */
struct http_found {
	__u32 off;        /* where the payload starts in the frame */
	__u32 len;        /* payload bytes */
	__u32 at;         /* payload offset of the status line that stopped the scan */
	__u16 status;     /* that status line's code; 0: none */
	__u16 lines;      /* status lines seen */
	__u16 load_error; /* a read failed: the rest was not scanned */
	__u16 head;       /* bytes of window 0 already in w (capture_http_head) */
};

/* A scan window's bytes and what the scan found: in a per-CPU map rather
 * than on the stack, which the entry program, the capture function and the
 * functions below it share (512 bytes in all). */
struct http_window {
	__u64 w[SCAN_WORDS];
	struct http_found found;
	/* The clock as capture_http_head read it for this packet (0: it did
	 * not): what the packet's other readers take instead of reading it
	 * again (about 25 ns a reading). */
	__u64 now;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct http_window);
} capture_window SEC(".maps");

/* The codes that stop a scan: a bit per code from 100 to 611. */
struct http_codes {
	__u64 bits[8];
};

/* The scan's loop context (bpf_loop takes it on the stack). */
struct http_scan {
	struct __sk_buff *skb;
	const struct http_codes *codes;
};

/* http_code_set tells whether status is in codes. */
static __always_inline int http_code_set(const struct http_codes *codes, __u16 status)
{
	__u32 i;

	i = status - 100;
	/* Hide what the compiler knows of i (status_at's range), or it drops
	 * the bound below, which the verifier needs. */
	asm volatile("" : "+r"(i));
	if (i >= 512)
		return 0;
	return (codes->bits[(i >> 6) & 7] >> (i & 63)) & 1;
}

/* Where a word of a window is, for http_scan_word, in one argument (a global
 * function takes five): the word (bits 0-7), the window's last start (8-17)
 * and the window's offset in the payload (18-).  */
#define SCAN_WHERE(w, last, pos) ((__u64)(w) | (__u64)(last) << 8 | (__u64)(pos) << 18)

/* http_scan_word looks at the candidates of the word of the window that
 * hits flags (the bytes holding an 'H'), up to the window's last start
 * (where: SCAN_WHERE). It returns 1 when a status line with a code in codes
 * stops the scan (found.status, and found.at in the payload), 0 otherwise;
 * found.lines counts the status lines.
 *
 * A global function, called only for a word with an 'H': checked once on
 * its own, its branches are not multiplied by the window's 64 words. */
__noinline int http_scan_word(struct http_window *win, const struct http_codes *codes, __u64 hits, __u64 where)
{
	__u32 w = where & 0xff, last = (where >> 8) & 0x3ff;
	struct http_found *f;

	if (!win || !codes || w >= SCAN_WORDS || last > SCAN_WINDOW - HTTP_STATUS_LEN)
		return 0;
	f = &win->found;
	/* Each flagged byte, lowest first: the lowest set bit is 0x80 << 8k,
	 * and (1 << 8k) * 0x0001020304050607 has k in its top byte. */
	for (__u32 c = 0; c < 8 && hits; c++) {
		__u64 low = hits & -hits;
		__u32 at = w * 8 + (((low >> 7) * 0x0001020304050607ULL) >> 56);
		__u16 status;

		hits &= hits - 1;
		/* The constant bound is for the verifier, which does not carry
		 * last's bound over to at. */
		if (at > last || at > SCAN_WINDOW - HTTP_STATUS_LEN)
			break;
		status = status_at((const __u8 *)win->w, at);
		if (!status)
			continue;
		f->lines++;
		if (http_code_set(codes, status)) {
			f->status = status;
			f->at = (where >> 18) + at;
			return 1;
		}
	}
	return 0;
}

/* http_scan_quad looks at the four words of the window from the one where
 * names (SCAN_WHERE) for status lines, as http_scan_word. A global
 * function of its own, so that the window's loop keeps few values across
 * calls: the entry program and the functions below it share 512 bytes of
 * stack, to the byte. */
__noinline int http_scan_quad(struct http_window *win, const struct http_codes *codes, __u64 where)
{
	if (!win || !codes)
		return 0;
	for (__u32 k = 0; k < 4; k++) {
		__u32 w = ((where & 0xff) + k) & (SCAN_WORDS - 1);
		__u64 hits = HAS_ZERO(win->w[w] ^ BYTES('H'));

		if (hits && http_scan_word(win, codes, hits, (where & ~0xffULL) | w))
			return 1;
	}
	return 0;
}

/* http_scan_window scans window i of the payload: candidates starting at
 * i * SCAN_STRIDE, up to SCAN_STRIDE of them. Returns 1 to stop the loop.
 *
 * A global function, called once per window from the bpf_loop callback:
 * the verifier checks a bpf_loop callback as a loop whose states it cannot
 * prune against each other until every iteration is explored, so a callback
 * with a branch per candidate position has a number of paths exponential in
 * the positions; a global function is checked once, on its own. */
__noinline int http_scan_window(struct __sk_buff *skb, const struct http_codes *codes, __u32 i)
{
	__u32 pos, n, last, zero = 0;
	struct http_window *win;
	struct http_found *f;
	__u64 where;

	if (!skb || !codes || i > SCAN_MAX_BYTES / SCAN_STRIDE)
		return 1;
	win = bpf_map_lookup_elem(&capture_window, &zero);
	if (!win)
		return 1;
	f = &win->found;
	pos = i * SCAN_STRIDE;
	if (pos >= f->len || f->len - pos < HTTP_STATUS_LEN)
		return 1;
	n = f->len - pos;
	if (n > SCAN_WINDOW)
		n = SCAN_WINDOW;
	/* Window 0 was read with the payload's first bytes. */
	if ((i != 0 || f->head < n) && bpf_skb_load_bytes(skb, f->off + pos, win->w, n) < 0) {
		f->load_error = 1;
		return 1;
	}
	/* The last start with a whole status line in this window, and within
	 * this window's stride. */
	last = n - HTTP_STATUS_LEN;
	if (last > SCAN_STRIDE - 1)
		last = SCAN_STRIDE - 1;

	/* Four words a turn, one branch for the four: most words of a body
	 * hold no 'H', and the turn's overhead was a large part of the
	 * scan's cost (BenchmarkCapturePath: four words a turn took 140 of
	 * the 340 ns a 1 448-byte body cost over an ACK). A turn with an
	 * 'H' hands its words to http_scan_quad. Words past the window's
	 * bytes hold an earlier window's: http_scan_word stops at last. */
	where = SCAN_WHERE(0, last, pos);
	for (__u32 w = 0; w < SCAN_WORDS; w += 4) {
		/* last, from where: one value fewer kept across the call. */
		if (w * 8 > ((where >> 8) & 0x3ff))
			break;
		if ((HAS_ZERO(win->w[w] ^ BYTES('H')) | HAS_ZERO(win->w[w + 1] ^ BYTES('H')) |
		     HAS_ZERO(win->w[w + 2] ^ BYTES('H')) | HAS_ZERO(win->w[w + 3] ^ BYTES('H'))) &&
		    http_scan_quad(win, codes, where | w))
			return 1;
	}
	return 0;
}

static long http_scan_cb(__u64 i, void *data)
{
	struct http_scan *s = data;

	long stop = http_scan_window(s->skb, s->codes, i);

	/* Hide what the compiler knows of stop (0 or 1), or it drops the
	 * test below, which the verifier needs: it knows nothing of what a
	 * global function returns. */
	asm volatile("" : "+r"(stop));
	return stop ? 1 : 0;
}

/* http_scan_payload scans the len bytes of payload that win->found
 * describes, with win->found set. */
static __always_inline void http_scan_payload(struct __sk_buff *skb, const struct http_codes *codes, __u32 len)
{
	struct http_scan s = {.skb = skb, .codes = codes};

	bpf_loop((len + SCAN_STRIDE - 1) / SCAN_STRIDE, http_scan_cb, &s, 0);
}

/* One direction's end of stream: where its next segment should start and
 * its last HTTP_TAIL_LEN bytes (len: 0 when none are kept). */
struct http_tail {
	__u32 next_seq;
	__u8 len;
	__u8 pad[3];
	__u8 bytes[HTTP_TAIL_LEN + 1];
};

/* http_tail_has_h tells whether tail's bytes hold an 'H': a status line
 * can start there only then. Two words, one test each. */
static __always_inline int http_tail_has_h(const struct http_tail *tail)
{
	__u64 lo = 0;
	__u32 hi = 0;

	__builtin_memcpy(&lo, tail->bytes, 8);
	__builtin_memcpy(&hi, tail->bytes + 8, 4); /* bytes[11] is padding, always 0 */
	return HAS_ZERO(lo ^ BYTES('H')) || HAS_ZERO((__u64)(hi ^ 0x48484848U) | 0xffffffff00000000ULL);
}

/* http_split_status looks for a status line that starts in tail (the end of
 * the direction's previous segment) and ends in this segment's first bytes
 * (len of them, already in capture_window: capture_http_head read them). It
 * returns the status, and in *back how many of its bytes were in the
 * previous segment. */
__noinline int http_split_status(__u32 len, const struct http_tail *tail, __u32 *back)
{
	__u8 b[2 * HTTP_TAIL_LEN + 2] = {};
	struct http_window *win;
	__u32 t, zero = 0;

	if (!tail || !back)
		return 0;
	t = tail->len;
	if (t == 0 || t > HTTP_TAIL_LEN || len == 0 || !http_tail_has_h(tail))
		return 0;
	win = bpf_map_lookup_elem(&capture_window, &zero);
	if (!win)
		return 0;
	__builtin_memcpy(b, tail->bytes, HTTP_TAIL_LEN);
	/* The segment's first bytes; past a short segment's end, zeroes,
	 * which fail status_at, so a line it does not complete is not
	 * taken. */
	for (__u32 k = 0; k < HTTP_TAIL_LEN; k++) {
		if (k >= len)
			break;
		b[HTTP_TAIL_LEN + k] = ((const __u8 *)win->w)[k];
	}
	/* Starts within the kept bytes (counted from 0: an index that starts
	 * at 11 - t would be a pointer minus a variable, which the verifier
	 * refuses on the stack). */
	for (__u32 s = 0; s < HTTP_TAIL_LEN; s++) {
		__u16 status;

		if (s + t < HTTP_TAIL_LEN)
			continue;
		status = status_at(b, s);
		if (status) {
			*back = HTTP_TAIL_LEN - s;
			return status;
		}
	}
	return 0;
}

/* http_keep_tail keeps the last HTTP_TAIL_LEN bytes of the direction's
 * stream for its next segment (which should start at seq + len): the end of
 * these len bytes of payload at off, after the bytes kept before them when
 * the segment is shorter and follows them, so that a status line split over
 * several short segments is found too. It returns 1 when the kept bytes
 * hold an 'H', where such a line could start. A global function, like
 * http_split_status. */
__noinline int http_keep_tail(struct __sk_buff *skb, __u32 off, __u32 len, __u32 seq, struct http_tail *tail)
{
	__u8 old[HTTP_TAIL_LEN + 1] = {};
	__u32 t;

	if (!skb || !tail || len == 0)
		return 0;
	if (len >= HTTP_TAIL_LEN) {
		tail->len = 0;
		if (bpf_skb_load_bytes(skb, off + len - HTTP_TAIL_LEN, tail->bytes, HTTP_TAIL_LEN) < 0)
			return 0;
		tail->len = HTTP_TAIL_LEN;
		tail->next_seq = seq + len;
		return http_tail_has_h(tail);
	}
	t = tail->len && tail->next_seq == seq ? tail->len : 0;
	if (t > HTTP_TAIL_LEN)
		t = HTTP_TAIL_LEN;
	__builtin_memcpy(old, tail->bytes, HTTP_TAIL_LEN);
	__builtin_memset(tail->bytes, 0, sizeof(tail->bytes));
	/* The kept bytes move left by len... */
	for (__u32 k = 0; k < HTTP_TAIL_LEN; k++) {
		__u32 from = k + len;

		/* Hide what the compiler knows of from, or it drops the
		 * bound the verifier needs (as in http_code_set). */
		asm volatile("" : "+r"(from));
		if (from >= HTTP_TAIL_LEN)
			break;
		tail->bytes[k] = old[from];
	}
	/* ...and this segment's bytes end the tail. */
	for (__u32 k = 0; k < HTTP_TAIL_LEN - 1; k++) {
		__u32 to = HTTP_TAIL_LEN - len + k;

		if (k >= len)
			break;
		asm volatile("" : "+r"(to));
		if (to >= HTTP_TAIL_LEN)
			break;
		if (bpf_skb_load_bytes(skb, off + k, &tail->bytes[to], 1) < 0) {
			tail->len = 0;
			return 0;
		}
	}
	t += len;
	tail->len = t < HTTP_TAIL_LEN ? t : HTTP_TAIL_LEN;
	tail->next_seq = seq + len;
	return http_tail_has_h(tail);
}

#endif
