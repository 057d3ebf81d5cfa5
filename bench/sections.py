"""Replace one benchmark's section of bench/RESULTS.md.

    python3 bench/sections.py RESULTS.md NAME SECTION_FILE

Each section sits between <!-- bench:NAME:begin --> and
<!-- bench:NAME:end --> markers, in the order of ORDER, so that running one
benchmark rewrites its own section and leaves the others as they were.
"""

import os
import re
import sys

ORDER = ["iperf", "bpfstats", "monitor", "tables", "rss", "store", "export", "capture", "rules", "signals", "designs", "tunnels", "k8s", "latency", "ui"]

HEADER = """# Loupe benchmark results

Written by `bench/run.sh` (`make bench`); each section by its benchmark,
`bench/run.sh NAME` rewrites only its own. Every number below was measured
by the command its section names, on the machine its section names. How the
benchmarks work: bench/README.md.
"""


def main():
    path, name, section_file = sys.argv[1:4]
    if name not in ORDER:
        sys.exit(f"sections.py: unknown section {name!r}")
    with open(section_file) as f:
        body = f.read().rstrip("\n") + "\n"
    text = HEADER
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    sections = {}
    for n in ORDER:
        m = re.search(
            rf"<!-- bench:{n}:begin -->\n(.*?)<!-- bench:{n}:end -->\n?", text, re.S
        )
        if m:
            sections[n] = m.group(1)
    first = re.search(r"<!-- bench:\w+:begin -->", text)
    head = text[: first.start()] if first else text
    sections[name] = body
    out = head.rstrip("\n") + "\n\n"
    for n in ORDER:
        content = sections.get(n, f"## {n}\n\n_Not run yet: `bench/run.sh {n}`._\n")
        out += f"<!-- bench:{n}:begin -->\n{content.rstrip(chr(10))}\n<!-- bench:{n}:end -->\n\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(out.rstrip("\n") + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
