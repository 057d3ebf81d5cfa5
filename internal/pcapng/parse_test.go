package pcapng

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// A strict reader of what the Writer writes, used to check it: it fails on
// anything the format forbids or the Writer should never produce (a length
// that is not a multiple of 4, leading and trailing lengths that differ,
// non-zero padding, an options list without opt_endofopt or with bytes
// after it, a packet on an undeclared interface or longer than its snap
// length, a string that is not UTF-8, an unknown block).

type section struct {
	comment, os, userAppl string
	ifaces                []iface
	packets               []rpacket
}

type iface struct {
	link    uint16
	snapLen uint32
	name    string
	desc    string
	tsresol []byte
}

type rpacket struct {
	ifid            uint32
	ts              uint64
	capLen, origLen uint32
	data            []byte
	flags           *uint32
	comments        []string
}

type option struct {
	code  uint16
	value []byte
}

var rle = binary.LittleEndian

// parse reads a whole capture of one or more sections.
func parse(b []byte) ([]section, error) {
	var secs []section
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return nil, fmt.Errorf("@%d: %d trailing bytes", off, len(b)-off)
		}
		typ, n := rle.Uint32(b[off:]), int(rle.Uint32(b[off+4:]))
		if n < 12 || n%4 != 0 || n > len(b)-off {
			return nil, fmt.Errorf("@%d: block length %d (of %d left)", off, n, len(b)-off)
		}
		if tail := int(rle.Uint32(b[off+n-4:])); tail != n {
			return nil, fmt.Errorf("@%d: leading length %d, trailing %d", off, n, tail)
		}
		body := b[off+8 : off+n-4]
		var err error
		switch {
		case typ == blockSHB:
			var s section
			s, err = parseSHB(body)
			secs = append(secs, s)
		case len(secs) == 0:
			err = fmt.Errorf("block type %#x before any section header", typ)
		case typ == blockIDB:
			var i iface
			i, err = parseIDB(body)
			secs[len(secs)-1].ifaces = append(secs[len(secs)-1].ifaces, i)
		case typ == blockEPB:
			var p rpacket
			s := &secs[len(secs)-1]
			p, err = parseEPB(body, s.ifaces)
			s.packets = append(s.packets, p)
		default:
			err = fmt.Errorf("unexpected block type %#x", typ)
		}
		if err != nil {
			return nil, fmt.Errorf("@%d: %w", off, err)
		}
		off += n
	}
	return secs, nil
}

func parseSHB(body []byte) (section, error) {
	var s section
	if len(body) < 16 {
		return s, fmt.Errorf("SHB body of %d bytes", len(body))
	}
	if m := rle.Uint32(body); m != 0x1A2B3C4D {
		return s, fmt.Errorf("byte-order magic %#x", m)
	}
	if maj, min := rle.Uint16(body[4:]), rle.Uint16(body[6:]); maj != 1 || min != 0 {
		return s, fmt.Errorf("version %d.%d", maj, min)
	}
	if l := rle.Uint64(body[8:]); l != ^uint64(0) {
		return s, fmt.Errorf("section length %d, want -1", l)
	}
	opts, err := parseOpts(body[16:])
	if err != nil {
		return s, fmt.Errorf("SHB: %w", err)
	}
	for _, o := range opts {
		v, err := str(o)
		if err != nil {
			return s, err
		}
		switch o.code {
		case 1:
			s.comment = v
		case 3:
			s.os = v
		case 4:
			s.userAppl = v
		default:
			return s, fmt.Errorf("SHB: unexpected option %d", o.code)
		}
	}
	return s, nil
}

func parseIDB(body []byte) (iface, error) {
	var i iface
	if len(body) < 8 {
		return i, fmt.Errorf("IDB body of %d bytes", len(body))
	}
	i.link, i.snapLen = rle.Uint16(body), rle.Uint32(body[4:])
	if r := rle.Uint16(body[2:]); r != 0 {
		return i, fmt.Errorf("IDB reserved field %d", r)
	}
	opts, err := parseOpts(body[8:])
	if err != nil {
		return i, fmt.Errorf("IDB: %w", err)
	}
	for _, o := range opts {
		switch o.code {
		case 2, 3:
			v, err := str(o)
			if err != nil {
				return i, err
			}
			if o.code == 2 {
				i.name = v
			} else {
				i.desc = v
			}
		case 9:
			i.tsresol = o.value
		default:
			return i, fmt.Errorf("IDB: unexpected option %d", o.code)
		}
	}
	return i, nil
}

func parseEPB(body []byte, ifaces []iface) (rpacket, error) {
	var p rpacket
	if len(body) < 20 {
		return p, fmt.Errorf("EPB body of %d bytes", len(body))
	}
	p.ifid = rle.Uint32(body)
	p.ts = uint64(rle.Uint32(body[4:]))<<32 | uint64(rle.Uint32(body[8:]))
	p.capLen, p.origLen = rle.Uint32(body[12:]), rle.Uint32(body[16:])
	if int(p.ifid) >= len(ifaces) {
		return p, fmt.Errorf("EPB on interface %d of %d", p.ifid, len(ifaces))
	}
	if p.capLen > ifaces[p.ifid].snapLen || p.capLen > p.origLen {
		return p, fmt.Errorf("EPB captured length %d, original %d, snap length %d", p.capLen, p.origLen, ifaces[p.ifid].snapLen)
	}
	padded := (int(p.capLen) + 3) &^ 3
	if 20+padded > len(body) {
		return p, fmt.Errorf("EPB data of %d bytes in a body of %d", p.capLen, len(body))
	}
	p.data = body[20 : 20+p.capLen]
	if !allZero(body[20+p.capLen : 20+padded]) {
		return p, fmt.Errorf("EPB data padding is not zero")
	}
	opts, err := parseOpts(body[20+padded:])
	if err != nil {
		return p, fmt.Errorf("EPB: %w", err)
	}
	for _, o := range opts {
		switch o.code {
		case 1:
			v, err := str(o)
			if err != nil {
				return p, err
			}
			p.comments = append(p.comments, v)
		case 2:
			if len(o.value) != 4 || p.flags != nil {
				return p, fmt.Errorf("epb_flags of %d bytes, or twice", len(o.value))
			}
			f := rle.Uint32(o.value)
			p.flags = &f
		default:
			return p, fmt.Errorf("EPB: unexpected option %d", o.code)
		}
	}
	return p, nil
}

// parseOpts reads an options list that must end with opt_endofopt exactly
// at the end of b (or be empty).
func parseOpts(b []byte) ([]option, error) {
	var opts []option
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			return nil, fmt.Errorf("option header cut at %d", off)
		}
		code, n := rle.Uint16(b[off:]), int(rle.Uint16(b[off+2:]))
		off += 4
		if code == 0 {
			if n != 0 || off != len(b) {
				return nil, fmt.Errorf("opt_endofopt of length %d with %d bytes after it", n, len(b)-off)
			}
			return opts, nil
		}
		padded := (n + 3) &^ 3
		if off+padded > len(b) {
			return nil, fmt.Errorf("option %d of %d bytes overruns the block", code, n)
		}
		if !allZero(b[off+n : off+padded]) {
			return nil, fmt.Errorf("option %d padding is not zero", code)
		}
		opts = append(opts, option{code: code, value: b[off : off+n]})
		off += padded
	}
	if len(b) > 0 {
		return nil, fmt.Errorf("options without opt_endofopt")
	}
	return nil, nil
}

func str(o option) (string, error) {
	if !utf8.Valid(o.value) {
		return "", fmt.Errorf("option %d is not UTF-8: %q", o.code, o.value)
	}
	return string(o.value), nil
}

func allZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }
