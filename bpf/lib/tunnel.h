/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The parse's tunnel step: the packet inside VXLAN, Geneve, GRE or IP in IP.
 *
 * On a Kubernetes node most pod traffic crosses the node's NIC inside an
 * overlay (flannel and Calico's VXLAN, OVN's Geneve, Calico's IPIP, GRE in
 * others). Keyed by its outer headers, every pod flow between two nodes
 * would be one flow between two node addresses. So when the parse finds a
 * tunnel's transport (PARSE_ENCAP), the tunnel step (tunnel_decap, pkt.h)
 * reads the tunnel header and the packet inside it with the parser's own
 * functions, and the packet is counted under the inner packet's key: the
 * same key the overlay device (vxlan0, flannel.1) or the pod's veth gives
 * it. The outer side (tunnel type, outer addresses, MACs and ports, VNI or
 * GRE key) goes beside the key, in struct tunnel_info (flows/flows.h keeps
 * it per flow in a side table), so that the key stays the 60 bytes one
 * cache line holds.
 *
 * One level deep. Kubernetes overlays nest one level; a tunnel inside a
 * tunnel (VXLAN carried over GRE) is counted (PARSE_F_TUNNEL_DEPTH) and
 * keyed by the first inner packet, whose transport is the second tunnel's.
 * A second level would be a third copy of the whole parse for the verifier
 * to walk, for traffic that is rare on the hosts Loupe watches.
 *
 * A tunnel header that breaks its RFC (VXLAN without its I flag, Geneve of
 * another version, GRE with routing or of an unknown version) is counted
 * and the packet keyed by its outer headers; so is a header cut short, or
 * an inner packet whose Ethernet or IP header is cut short. No packet is
 * dropped or left uncounted because of its tunnel. A payload the parser
 * does not take apart (GRE carrying neither IP nor Ethernet, PPTP's GRE
 * version 1) is keyed by its outer headers too, and counted nowhere: it is
 * not an anomaly.
 *
 * Why global functions (tunnel_decap, tunnel_inner): the verifier checks
 * a global function once, on its own, where an inlined step would be
 * checked again for every state the outer parse reaches it in (each VLAN
 * depth, IPv6 extension chain, IPv4 header length, tunnel type and GRE
 * option): the flows-only program took about 120 000 verified instructions
 * before, and the inner parse inlined would have multiplied them. Their
 * arguments are the packet's key and scalars, and their results come back
 * through a per-CPU scratch value (tunnel_scratch), so that struct pkt is
 * never handed to a call: that would put the whole of pkt on the stack for
 * every packet (see pkt.h). A tunnelled packet pays two calls and their
 * returns; any other packet nothing but the parse's own test of its result.
 */
#ifndef LOUPE_TUNNEL_H
#define LOUPE_TUNNEL_H

#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "flow.h"
#include "parse.h"
#include "wire.h"

/* The outer side of a packet taken out of a tunnel: 56 bytes. Its first 44
 * bytes have the flow key's layout (addresses IPv4-mapped, network order;
 * MACs), so that they are copied from the outer key as they are. */
struct tunnel_info {
	__u8 src_addr[16]; /* the outer IP header's */
	__u8 dst_addr[16];
	__u8 src_mac[6]; /* the outer Ethernet header's */
	__u8 dst_mac[6];
	__u32 id;        /* VNI (VXLAN, Geneve) or GRE key, host order; with TUNNEL_F_ID */
	__u16 src_port;  /* outer UDP ports (VXLAN, Geneve); 0 for GRE and IP in IP */
	__u16 dst_port;
	__u16 vlan_id;   /* the outer frame's VLAN, as the flow key has it */
	__u8 type;       /* enum tunnel_type */
	__u8 flags;      /* enum tunnel_flag */
};

enum tunnel_flag {
	TUNNEL_F_ID = 1 << 0,  /* id holds a VNI or a GRE key */
	TUNNEL_F_ETH = 1 << 1, /* the inner packet has an Ethernet header: the key's MACs and VLAN are its */
};

/* What tunnel_header and tunnel_inner return when the packet cannot be
 * taken out (it stays keyed by its outer headers); otherwise they return
 * the inner packet's enum parse_result, PARSE_OK or PARSE_TRUNCATED_L4. */
enum decap_fail {
	DECAP_NONE = -1,      /* not a payload the parser takes apart */
	DECAP_BAD = -2,       /* a tunnel header that breaks its RFC */
	DECAP_TRUNCATED = -3, /* the tunnel header or the inner L2/L3 header cut short */
};

/* The furthest a tunnel header, or the packet inside, may start in the
 * frame. Headers past it are not read (counted as cut short); this bound
 * keeps every offset the inner parse computes within what the verifier
 * allows for packet access. */
#define TUNNEL_MAX_OFF 1024

/* What the tunnel step hands back besides the key, per CPU: the program
 * that reads it runs on the CPU that wrote it, in the same run. The fields
 * after info are struct pkt's as the tunnel step leaves them: the inner
 * packet's when it was taken out (tunnel set), the outer packet's
 * otherwise. */
struct tunnel_scratch {
	struct tunnel_info info;
	/* The inner packet's key while it is parsed: here rather than on the
	 * stack, which the tunnel step shares with the entry program. */
	struct flow_key key;
	struct pkt_offsets off; /* from the frame's first byte */
	__u32 tcp_seq;
	__u32 tcp_ack;
	__u32 tcp_flags;
	__s32 result; /* enum parse_result */
	__u16 inner;
	__u8 dscp;
	__u8 flags;  /* enum parse_flag */
	__u8 tunnel; /* enum tunnel_type; 0: keyed by the outer headers */
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);                   /* Key: 0 */
	__type(value, struct tunnel_scratch); /* Value: the tunnel step's outcome for the packet at hand */
} tunnel_scratch SEC(".maps");

static __always_inline struct tunnel_scratch *tunnel_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&tunnel_scratch, &zero);
}

/* tunnel_inner parses the packet a tunnel carries, starting off bytes into
 * the frame with its Ethernet header (proto ETH_P_TEB, network order) or
 * its IP header (ETH_P_IP, ETH_P_IPV6). On success (an enum parse_result,
 * PARSE_OK or PARSE_TRUNCATED_L4) the tunnel scratch holds the inner
 * packet's key and the rest of its parse; otherwise it returns an enum
 * decap_fail. key, the outer headers' key, is only read: an inner packet
 * without Ethernet keeps its MACs and VLAN.
 *
 * A global function of its own, apart from tunnel_decap: the verifier
 * checks the inner parse once, for any offset and protocol, and not once
 * for each way the tunnel headers before it can be laid out (GRE's eight
 * combinations of optional fields, Geneve's options, each tunnel type). */
__noinline int tunnel_inner(struct __sk_buff *skb, const struct flow_key *key, __u32 off, __u32 proto)
{
	struct tunnel_scratch *s;
	struct flow_key *inner;
	struct pkt ip = {};
	void *data, *end, *pos;
	__be16 l3proto = proto;
	int res;

	/* Bounded before anything else, the one copy of off that is used (see
	 * tunnel_header). */
	barrier_var(off);
	if (off > TUNNEL_MAX_OFF)
		return DECAP_TRUNCATED;
	s = tunnel_scratch_get();
	if (!skb || !key || !s)
		return DECAP_NONE;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	inner = &s->key;
	__builtin_memset(inner, 0, sizeof(*inner));
	ip.key = inner;
	if (l3proto == bpf_htons(ETH_P_TEB)) {
		pos = parse_l2(data + off, end, off, &l3proto, &ip);
		if (!pos)
			return DECAP_TRUNCATED;
	} else if (l3proto == bpf_htons(ETH_P_IP) || l3proto == bpf_htons(ETH_P_IPV6)) {
		/* No Ethernet of its own: the key keeps the frame's. */
		__builtin_memcpy(inner->src_mac, key->src_mac, ETH_ALEN);
		__builtin_memcpy(inner->dst_mac, key->dst_mac, ETH_ALEN);
		inner->vlan_id = key->vlan_id;
		inner->eth_type = bpf_ntohs(l3proto);
		ip.off.l3 = off;
		ip.off.payload = off;
		pos = data + off;
	} else {
		return DECAP_NONE;
	}
	res = parse_l3(pos, end, l3proto, &ip);
	if (res == PARSE_TRUNCATED_L2 || res == PARSE_TRUNCATED_L3)
		return DECAP_TRUNCATED;
	if (res >= PARSE_ENCAP) {
		ip.flags |= PARSE_F_TUNNEL_DEPTH;
		res = PARSE_OK;
	}
	s->off = ip.off;
	s->tcp_seq = ip.tcp_seq;
	s->tcp_ack = ip.tcp_ack;
	s->tcp_flags = ip.tcp_flags;
	s->inner = off;
	s->dscp = ip.dscp;
	s->flags = ip.flags;
	return res;
}

/* tunnel_header reads the header of the tunnel of the given type (enum
 * tunnel_type) that starts off bytes into the frame, and hands what follows
 * it to tunnel_inner. key is the packet's key as the parse left it (the
 * outer headers'). When it returns an enum parse_result (>= 0), s holds the
 * outer side (info), the inner packet's key and the rest of its parse;
 * otherwise it returns an enum decap_fail. */
static __always_inline int tunnel_header(struct __sk_buff *skb, const struct flow_key *key, __u32 off,
					 __u32 type, struct tunnel_scratch *s)
{
	void *data, *end, *pos;
	__u32 id = 0;
	__u8 flags = 0;
	__be16 proto;

	/* The offset checked must be the one added to data: without the
	 * barrier the compiler may check one copy and add another, whose
	 * bound the verifier does not know. */
	barrier_var(off);
	if (off > TUNNEL_MAX_OFF)
		return DECAP_TRUNCATED;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	pos = data + off;
	switch (type) {
	case TUNNEL_VXLAN: {
		struct vxlan_wire *vx = pos;

		if ((void *)(vx + 1) > end)
			return DECAP_TRUNCATED;
		if (!(vx->flags & VXLAN_F_VNI))
			return DECAP_BAD;
		id = (__u32)vx->vni[0] << 16 | (__u32)vx->vni[1] << 8 | vx->vni[2];
		flags = TUNNEL_F_ID;
		proto = bpf_htons(ETH_P_TEB);
		off += sizeof(*vx);
		break;
	}
	case TUNNEL_GENEVE: {
		struct geneve_wire *gnv = pos;

		if ((void *)(gnv + 1) > end)
			return DECAP_TRUNCATED;
		if (gnv->ver_optlen >> 6)
			return DECAP_BAD;
		id = (__u32)gnv->vni[0] << 16 | (__u32)gnv->vni[1] << 8 | gnv->vni[2];
		flags = TUNNEL_F_ID;
		proto = gnv->proto;
		/* Options in 4-byte units, at most 252 bytes: skipped. */
		off += sizeof(*gnv) + (gnv->ver_optlen & 0x3f) * 4;
		break;
	}
	case TUNNEL_GRE: {
		struct gre_wire *gre = pos;
		__u16 gf;

		if ((void *)(gre + 1) > end)
			return DECAP_TRUNCATED;
		gf = bpf_ntohs(gre->flags);
		if ((gf & GRE_VERSION) == 1)
			return DECAP_NONE;
		if (gf & (GRE_VERSION | GRE_F_ROUTING))
			return DECAP_BAD;
		proto = gre->proto;
		off += sizeof(*gre);
		if (gf & GRE_F_CSUM)
			off += 4; /* checksum and reserved1 */
		if (gf & GRE_F_KEY) {
			__be32 *k = data + off;

			if ((void *)(k + 1) > end)
				return DECAP_TRUNCATED;
			id = bpf_ntohl(*k);
			flags = TUNNEL_F_ID;
			off += 4;
		}
		if (gf & GRE_F_SEQ)
			off += 4;
		break;
	}
	case TUNNEL_IPIP:
		proto = key->proto == IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
		break;
	default:
		return DECAP_NONE;
	}
	if (proto == bpf_htons(ETH_P_TEB))
		flags |= TUNNEL_F_ETH;

	/* The outer side; read only when tunnel_inner succeeds. */
	__builtin_memcpy(&s->info, key, __builtin_offsetof(struct tunnel_info, id));
	s->info.id = id;
	s->info.src_port = key->src_port;
	s->info.dst_port = key->dst_port;
	s->info.vlan_id = key->vlan_id;
	s->info.type = type;
	s->info.flags = flags;
	return tunnel_inner(skb, key, off, proto);
}

#endif
