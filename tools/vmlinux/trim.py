#!/usr/bin/env python3
"""Trim a `bpftool btf dump ... format c` header to the types Loupe uses.

Usage: trim.py FULL_VMLINUX_H ROOT [ROOT ...] > vmlinux.h

A ROOT is a type ("struct __sk_buff", "enum bpf_map_type", "__u64") or the
name of an enumerator, which selects the (possibly anonymous) enum holding it.
Every type a selected definition needs is pulled in; a struct or union that is
only reached through pointers becomes a forward declaration, so the closure
stays small. Output keeps bpftool's order, which is already dependency order.
"""
import re
import sys

TAGGED = re.compile(r"\b(struct|union|enum)\s+(\w+)(\s*\*)?")
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def parse(text):
    start = text.index("\ntypedef ")
    end = text.rindex("#ifndef BPF_NO_PRESERVE_ACCESS_INDEX")
    head, body, tail = text[:start], text[start:end], text[end:]
    blocks = []
    for raw in body.strip().split("\n\n"):
        blk = raw.strip()
        if not blk:
            continue
        name, members = None, []
        m = re.match(r"^(struct|union|enum) (\w+) \{", blk)
        if m:
            name = f"{m.group(1)} {m.group(2)}"
        elif re.match(r"^(struct|union) (\w+);$", blk):
            name = "fwd " + blk[:-1]
        elif blk.startswith("typedef"):
            # Function pointer, function type, or plain alias.
            fm = (re.search(r"\(\*\s*(?:const\s+)?(\w+)\)", blk)
                  or re.match(r"typedef [^(]*?(\w+)\(", blk)
                  or re.search(r"(\w+)(\[\d*\])*( __attribute__\(.*\))?;$", blk))
            name = fm.group(1)
        if blk.startswith("enum "):
            members = re.findall(r"^\t(\w+) =", blk, re.M)
        blocks.append({"text": blk, "name": name, "members": members})
    return head, blocks, tail


def main():
    head, blocks, tail = parse(open(sys.argv[1]).read())
    by_name = {b["name"]: b for b in blocks if b["name"]}
    by_member = {m: b for b in blocks for m in b["members"]}
    typedefs = {b["name"] for b in blocks if b["text"].startswith("typedef")}

    want, fwd, todo = set(), set(), []

    def need(key, pointer_only=False):
        if pointer_only and key.split()[0] in ("struct", "union"):
            if key not in want:
                fwd.add(key)
            return
        blk = by_name.get(key)
        if blk is None:
            sys.exit(f"trim: type {key!r} is not in the BTF dump")
        if id(blk) not in want:
            want.add(id(blk))
            want.add(key)
            todo.append(blk)

    for root in sys.argv[2:]:
        if root in by_member:
            b = by_member[root]
            if id(b) not in want:
                want.add(id(b))
                todo.append(b)
        else:
            need(root)

    while todo:
        blk = todo.pop()
        text = blk["text"]
        own = blk["name"]
        for kind, name, star in TAGGED.findall(text):
            key = f"{kind} {name}"
            if key != own:
                need(key, pointer_only=bool(star))
        for ident in IDENT.findall(text):
            if ident in typedefs and ident != own:
                need(ident)

    fwd -= want
    out = [head.rstrip("\n"), ""]
    out += [f"{k};\n" for k in sorted(fwd)]
    out += [b["text"] + "\n" for b in blocks if id(b) in want]
    out.append(tail)
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
