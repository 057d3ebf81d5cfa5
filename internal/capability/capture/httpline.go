package capture

import "bytes"

// requestLine returns "METHOD TARGET" when the TCP payload of the
// Ethernet frame starts with an HTTP/1.x request line, for the packet's
// comment; "" otherwise. It reads the headers the way the datapath does
// (up to two VLAN tags, IPv4 options, IPv6 without extension headers).
func requestLine(frame []byte) string {
	off, ok := tcpPayload(frame)
	if !ok {
		return ""
	}
	p := frame[off:]
	// The method first, up to 16 capitals and a space: most payloads are
	// no request, and their first bytes say so before a search for the
	// line's end.
	sp1 := -1
	for i := 0; i < len(p) && i <= 16; i++ {
		if p[i] == ' ' {
			sp1 = i
			break
		}
		if p[i] < 'A' || p[i] > 'Z' {
			return ""
		}
	}
	if sp1 <= 0 {
		return ""
	}
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		p = p[:i]
	}
	p = bytes.TrimSuffix(p, []byte("\r"))
	rest := p[sp1+1:]
	sp2 := bytes.LastIndexByte(rest, ' ')
	if sp2 <= 0 || !bytes.HasPrefix(rest[sp2+1:], []byte("HTTP/1.")) {
		return ""
	}
	target := rest[:sp2]
	if len(target) > 200 {
		target = target[:200]
	}
	// The comment is text: keep printable ASCII only.
	out := make([]byte, 0, sp1+1+len(target))
	out = append(out, p[:sp1+1]...)
	for _, c := range target {
		if c < 0x21 || c > 0x7e {
			c = '?'
		}
		out = append(out, c)
	}
	return string(out)
}

// tcpPayload returns where the TCP payload of the Ethernet frame starts.
func tcpPayload(f []byte) (int, bool) {
	if len(f) < 14 {
		return 0, false
	}
	off, et := 14, int(f[12])<<8|int(f[13])
	for tags := 0; (et == 0x8100 || et == 0x88a8) && tags < 2; tags++ {
		if len(f) < off+4 {
			return 0, false
		}
		et = int(f[off+2])<<8 | int(f[off+3])
		off += 4
	}
	switch et {
	case 0x0800:
		if len(f) < off+20 || f[off+9] != 6 {
			return 0, false
		}
		off += int(f[off]&0x0f) * 4
	case 0x86dd:
		if len(f) < off+40 || f[off+6] != 6 {
			return 0, false
		}
		off += 40
	default:
		return 0, false
	}
	if len(f) < off+20 {
		return 0, false
	}
	off += int(f[off+12]>>4) * 4
	if off > len(f) {
		return 0, false
	}
	return off, true
}
