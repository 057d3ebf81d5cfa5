/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packet header layouts as they are on the wire.
 *
 * These are wire formats, not kernel structs: they must never be CO-RE
 * relocated, so they are declared here instead of taken from vmlinux.h (whose
 * records carry preserve_access_index). Bit fields are avoided: the parser
 * reads the bytes that hold them.
 */
#ifndef LOUPE_WIRE_H
#define LOUPE_WIRE_H

#include "vmlinux.h"

#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define ETH_P_TEB 0x6558 /* transparent Ethernet bridging: an Ethernet frame inside GRE or Geneve */

#define IPPROTO_HOPOPTS 0
#define IPPROTO_ICMP 1
#define IPPROTO_IPIP 4 /* IPv4 inside IP */
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_IPV6 41 /* IPv6 inside IP */
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_GRE 47
#define IPPROTO_AH 51
#define IPPROTO_ICMPV6 58
#define IPPROTO_DSTOPTS 60
#define IPPROTO_SCTP 132
#define IPPROTO_MH 135
#define IPPROTO_UDPLITE 136

struct eth_wire {
	__u8 dst[ETH_ALEN];
	__u8 src[ETH_ALEN];
	__be16 proto;
};

/* The 4 bytes that follow an 802.1Q / 802.1ad ethertype. */
struct vlan_wire {
	__be16 tci;
	__be16 proto;
};

#define VLAN_HLEN 4          /* a tag: TPID and TCI */
#define VLAN_VID_MASK 0x0FFF /* the VLAN ID in a TCI */

struct ipv4_wire {
	__u8 version_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off; /* 3 flag bits, 13-bit offset in 8-byte units */
	__u8 ttl;
	__u8 protocol;
	__be16 check;
	__be32 saddr;
	__be32 daddr;
};

#define IPV4_OFFSET_MASK 0x1FFF

struct ipv6_wire {
	__u8 vtc_flow[4]; /* version(4) traffic class(8) flow label(20) */
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* Common head of hop-by-hop, routing, destination and mobility headers:
 * length in 8-octet units, not counting the first 8. AH uses the same two
 * bytes but counts 4-octet units, minus 2. */
struct ipv6_ext_wire {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct ipv6_frag_wire {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* 13-bit offset in the high bits, then 2 reserved bits and M */
	__be32 id;
};

#define IPV6_FRAG_OFFSET_MASK 0xFFF8

/* TCP, UDP, UDP-Lite and SCTP all start with the two ports. */
struct ports_wire {
	__be16 src;
	__be16 dst;
};

struct tcp_wire {
	__be16 src;
	__be16 dst;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_ae; /* data offset(4) reserved(3) AE/NS(1) */
	__u8 flags;   /* CWR ECE URG ACK PSH RST SYN FIN */
	__be16 window;
	__sum16 check;
	__be16 urg_ptr;
};

/* Bits of tcp_wire.flags. */
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

struct icmp_wire {
	__u8 type;
	__u8 code;
};

/* VXLAN (RFC 7348): flags, of which I says the VNI is valid, then the
 * 24-bit VNI; an Ethernet frame follows. */
struct vxlan_wire {
	__u8 flags;
	__u8 reserved[3];
	__u8 vni[3];
	__u8 reserved2;
};

#define VXLAN_F_VNI 0x08

/* Geneve (RFC 8926): version (2 bits) and the options' length in 4-byte
 * units (6 bits), flags, the protocol of what follows the options (an
 * EtherType), the 24-bit VNI. */
struct geneve_wire {
	__u8 ver_optlen;
	__u8 flags;
	__be16 proto;
	__u8 vni[3];
	__u8 reserved;
};

/* GRE (RFC 2784, 2890): flags and version, the protocol of the payload (an
 * EtherType), then the optional fields the flags announce, 4 bytes each, in
 * this order: checksum (and a reserved half), key, sequence number. */
struct gre_wire {
	__be16 flags;
	__be16 proto;
};

#define GRE_F_CSUM 0x8000
#define GRE_F_ROUTING 0x4000 /* RFC 1701 source routing: withdrawn by RFC 2784 */
#define GRE_F_KEY 0x2000
#define GRE_F_SEQ 0x1000
#define GRE_VERSION 0x0007 /* 0: GRE; 1: PPTP's enhanced GRE (RFC 2637) */

#endif
