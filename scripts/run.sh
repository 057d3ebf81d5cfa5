#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the agent on this host
# with its embedded store (/var/lib/loupe/flows) and metrics on
# 127.0.0.1:9464. Extra arguments go to `loupe run`. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh run
. scripts/env.sh
# The agent pins its programs' links and maps under /sys/fs/bpf/loupe, so that
# counting goes on across its restarts; that needs a bpf file system there,
# which not every host mounts (and mounting takes CAP_SYS_ADMIN, which the
# agent itself does without). Without one it warns and runs unpinned.
if ! mountpoint -q /sys/fs/bpf; then
	mount -t bpf -o mode=0700 bpf /sys/fs/bpf || echo "could not mount a bpf file system on /sys/fs/bpf: loupe will run unpinned" >&2
fi
./scripts/build.sh bin/loupe
echo "built bin/loupe; in another terminal, 'bin/loupe flows' prints recent flows and 'bin/loupe top' the top talkers" >&2
exec bin/loupe run "$@"
