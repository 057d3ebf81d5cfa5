package pcapfilter

// accessor is a protocol that packet data can be read from: `ip[2:2]`.
type accessor struct {
	base loadBase
	// off is where the protocol's header starts: a frame offset, or for
	// baseIPv4L4 the Ethernet header that precedes the IPv4 header.
	off uint32
	// guard is what libpcap tests before reading: the packet must carry
	// the protocol, so a read never runs on a packet of another one.
	guard func() node
}

// accessors are the protocols that `proto[off:size]` supports. As in
// libpcap, tcp, udp, sctp, icmp and igmp data is read from IPv4 packets
// only (first fragments), past the IPv4 options; `ip6[...]` and
// `icmp6[...]` count from the fixed IPv6 header.
var accessors = func() map[string]*accessor {
	l4 := func(p uint32) *accessor {
		return &accessor{base: baseIPv4L4, off: offL3, guard: func() node { return and(ipProto(p), ipv4First()) }}
	}
	l3 := func(et uint32) *accessor {
		return &accessor{base: baseFrame, off: offL3, guard: func() node { return ethType(et) }}
	}
	ether := &accessor{base: baseFrame, off: 0}
	return map[string]*accessor{
		"ether": ether, "link": ether,
		"ip": l3(etherIPv4), "ip6": l3(etherIPv6), "arp": l3(etherARP), "rarp": l3(etherRARP),
		"tcp": l4(protoTCP), "udp": l4(protoUDP), "sctp": l4(protoSCTP), "icmp": l4(protoICMP), "igmp": l4(protoIGMP),
		"icmp6": {base: baseFrame, off: offIPv6L4, guard: func() node {
			return and(ethType(etherIPv6), eq(baseFrame, offIPv6Next, 1, protoICMPv6))
		}},
	}
}()

// namedConsts are the offsets and values pcap-filter(7) names.
var namedConsts = map[string]uint32{
	"tcpflags": 13, "tcp-fin": 0x01, "tcp-syn": 0x02, "tcp-rst": 0x04, "tcp-push": 0x08,
	"tcp-ack": 0x10, "tcp-urg": 0x20, "tcp-ece": 0x40, "tcp-cwr": 0x80,

	"icmptype": 0, "icmpcode": 1,
	"icmp-echoreply": 0, "icmp-unreach": 3, "icmp-sourcequench": 4, "icmp-redirect": 5, "icmp-echo": 8,
	"icmp-routeradvert": 9, "icmp-routersolicit": 10, "icmp-timxceed": 11, "icmp-paramprob": 12,
	"icmp-tstamp": 13, "icmp-tstampreply": 14, "icmp-ireq": 15, "icmp-ireqreply": 16,
	"icmp-maskreq": 17, "icmp-maskreply": 18,

	"icmp6type": 0, "icmp6code": 1,
	"icmp6-destinationunreach": 1, "icmp6-packettoobig": 2, "icmp6-timeexceeded": 3,
	"icmp6-parameterproblem": 4, "icmp6-echo": 128, "icmp6-echoreply": 129,
	"icmp6-multicastlistenerquery": 130, "icmp6-multicastlistenerreportv1": 131,
	"icmp6-multicastlistenerdone": 132, "icmp6-routersolicit": 133, "icmp6-routeradvert": 134,
	"icmp6-neighborsolicit": 135, "icmp6-neighboradvert": 136, "icmp6-redirect": 137,
	"icmp6-routerrenum": 138, "icmp6-nodeinformationquery": 139, "icmp6-nodeinformationresponse": 140,
	"icmp6-ineighbordiscoverysolicit": 141, "icmp6-ineighbordiscoveryadvert": 142,
	"icmp6-multicastlistenerreportv2": 143, "icmp6-homeagentdiscoveryrequest": 144,
	"icmp6-homeagentdiscoveryreply": 145, "icmp6-mobileprefixsolicit": 146,
	"icmp6-mobileprefixadvert": 147, "icmp6-certpathsolicit": 148, "icmp6-certpathadvert": 149,
	"icmp6-multicastrouteradvert": 151, "icmp6-multicastroutersolicit": 152,
	"icmp6-multicastrouterterm": 153,
}

func isNamedConst(s string) bool {
	_, ok := namedConsts[s]
	return ok
}
