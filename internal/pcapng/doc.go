// Package pcapng writes captured packets in pcapng, the format tcpdump,
// tshark and Wireshark read (draft-ietf-opsawg-pcapng). A Writer encodes a
// stream onto any io.Writer (a file, or a client following a capture live:
// `loupe capture --follow -w - | tcpdump -r -`); a Rotator spreads streams
// over size- and age-limited files in a private directory and removes the
// oldest.
//
// The encoder is written here, from the specification, rather than taken
// from gopacket's pcapgo.NgWriter. That one has comments, epb_flags, a
// fixed nanosecond if_tsresol and several interfaces, but it builds each
// packet's options as a slice of interface values (five allocations for a
// packet with a comment and flags, and several times the time: see
// BenchmarkPcapgoWritePacket); it writes a comment over 65535 bytes with
// its length cut to 16 bits but all of it in the block, which tshark then
// rejects as a corrupt file; it declares the first interface in its
// constructor, not on first use; and it cannot say how many bytes a packet
// will take, which a file size limit that is never overshot needs.
//
// The choices made in the file:
//
//   - Byte order: always little-endian. pcapng lets the writer choose (the
//     Section Header Block's byte-order magic tells readers), and a fixed
//     order makes the output identical on every host, so golden files hold.
//   - Sections: one Section Header Block per stream, with section length -1
//     (unknown), since a stream is written before its end is known. It names
//     the application (shb_userappl, "loupe <version>"), the OS (shb_os) and
//     may carry a comment.
//   - Interfaces: one Interface Description Block per (ifindex, name, link
//     type), written just before the first packet that needs it, so a
//     renamed or re-created interface gets a new one and readers name each
//     packet's interface correctly. It carries if_name, if_description
//     "ifindex N" (the key flow records use) and if_tsresol.
//   - Timestamps: if_tsresol = 9, so the 64-bit timestamp counts
//     nanoseconds since the epoch. The datapath stamps packets in
//     nanoseconds, and a microsecond file (the format's default) would make
//     back-to-back packets on a fast link look simultaneous, which hides the
//     latencies a capture is taken to explain. tshark, Wireshark and tcpdump
//     --nano show the nanoseconds.
//   - Lengths: an Enhanced Packet Block records both the captured length and
//     the original length, so a packet cut by the snap length still shows
//     its size on the wire. The snap length never exceeds 262144
//     (MaxSnapLen): Wireshark refuses a larger Ethernet packet and with it
//     the rest of the file.
//   - Direction: the epb_flags option, bits 0-1: 01 inbound, 10 outbound
//     (tshark's frame.packet_flags_direction). A packet of unknown direction
//     has no epb_flags option at all.
//   - Comments: opt_comment on a packet says why it was captured (the
//     trigger, the status, the request), and Wireshark shows and filters on
//     it (frame.comment contains "status=500"), so the capture explains
//     itself without the agent at hand. Comments are UTF-8 as the format
//     requires: invalid bytes become U+FFFD, and a comment is cut (on a
//     character boundary) at 65535 bytes, the largest an option holds.
//
// All blocks are padded to 32 bits, every options list ends with
// opt_endofopt, and a packet is encoded in place into a reused buffer, so
// writing one allocates nothing.
package pcapng
