# Benchmark 15: the web UI's first view of each page over the store
# benchmark's 10 M records (issue 13: every page under 1 s). The records
# are written into a store by `go run ./bench/store -write-only` (the store
# benchmark's generator, seed 1, with per-hop latency records for the
# Latency page); the agent serves that store in a namespace of its own, and
# web/test/firstview.mjs drives Debian's chromium (playwright-core) from
# the same namespace. Each page is timed after a fresh start of the agent,
# its store's files dropped from the page cache (cold), then on reloads
# (warm). Sourced by bench/run.sh.

bench_ui() {
	local runs=${BENCH_UI_RUNS:-5} pages=${BENCH_UI_PAGES:-"overview flows topology captures latency"}
	local records=${BENCH_UI_RECORDS:-10000000} hops=${BENCH_UI_HOPS:-10000}
	local store=$WORK/store ref since until ns page url apid npid rc=0 t
	local ui=127.0.0.1:9463 node_script=web/test/firstview.mjs
	for t in node /usr/bin/chromium; do
		command -v "$t" >/dev/null || {
			echo "bench: ui: $t is missing" >&2
			return 1
		}
	done
	[[ -d web/node_modules/playwright-core ]] || {
		echo "bench: ui: web/node_modules/playwright-core is missing: cd web && npm ci" >&2
		return 1
	}
	# The hour of records ends now: the pages are given that hour as their
	# window (since and until), so that every record is in it however long
	# the run takes.
	ref=$(date +%s)
	since=$(date -u -d "@$((ref - 3600))" +%Y-%m-%dT%H:%M:%SZ)
	until=$(date -u -d "@$ref" +%Y-%m-%dT%H:%M:%SZ)
	local gen=(go run ./bench/store -dir "$store" -n "$records" -ref "$ref" -write-only -hops "$hops")
	echo "bench: ui: ${gen[*]}" >&2
	"${gen[@]}" >"$WORK/gen.log" 2>&1 || {
		cat "$WORK/gen.log" >&2
		return 1
	}
	ns=loupeb-$RUN_ID-ui
	ip netns add "$ns"
	NETNS+=("$ns")
	ip -n "$ns" link set lo up
	local agent=(loupe run --iface lo --store "$store" --control none --pin-dir none --ui-listen "$ui" --capture-follow --rules-enabled)
	for page in $pages; do
		case $page in
		overview | flows | topology) url="http://$ui/#/$page?since=$since&until=$until" ;;
		# The Latency page takes a duration ago: the hour and two minutes
		# for the reloads, before which nothing was written.
		latency) url="http://$ui/#/latency?since=$(($(date +%s) - ref + 3600 + 120))s" ;;
		captures) url="http://$ui/#/captures" ;;
		*)
			echo "bench: ui: unknown page $page" >&2
			return 1
			;;
		esac
		# Cold: the store's files out of the page cache, a new agent (whose
		# Reader has mapped and checked no segment yet), a new browser.
		drop_store_cache "$store"
		start_agent apid "$ns" "$WORK/agent-$page.log" "${agent[@]:2}"
		wait_log "$WORK/agent-$page.log" 'serving the UI' 10 "$apid"
		# In the background, so that a signal to the benchmark stops it
		# (and its chromium) through the EXIT trap rather than waiting.
		start_bg npid TERM "$WORK/node-$page.log" ip netns exec "$ns" node "$node_script" "$url" "$page" "$runs" "$WORK/$page.json"
		while alive "$npid"; do
			sleep 0.2
		done
		stop_bg "$npid" 5
		if ((STOP_RC != 0)); then
			echo "bench: ui: $page: firstview.mjs exited with status $STOP_RC:" >&2
			sed 's/^/    /' "$WORK/node-$page.log" >&2
			rc=1
		fi
		stop_agent "$apid"
		echo "bench: ui: $page: $(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["runs"]; print("cold %.0f ms, warm %s ms" % (r[0]["ms"], [round(x["ms"]) for x in r[1:]]) if r else "no run")' "$WORK/$page.json")" >&2
	done

	section_begin ui "15. Web UI: each page's first view over 10 M stored records"
	say "Data: the store benchmark's generator (seed 1), $records flow records spread over the hour ending at $ref (unix s)," \
		"compacted as the agent compacts them, and $hops per-hop latency records over the same hour (the Latency page's)." \
		"The agent serves that store in a namespace of its own (its own traffic on lo is measured and stored too, outside that hour);" \
		"chromium runs in the same namespace, 1280×900, headless. Overview, Flows and Topology are given that hour as their" \
		"window (\`since\` and \`until\` in the address, as a user's custom range), the Latency page a \`since\` two minutes before that hour's start (it takes a duration ago)." \
		"" \
		"A page's first view is the time from the start of the navigation to the first frame painted after the page" \
		"marked itself ready (main.ts: every request of its first view answered and drawn; the script checks that the" \
		"page's data is on it and no error). **Cold**: the page's first load in a new browser, right after a new start" \
		"of the agent, the store's files dropped from the page cache before it (posix_fadvise DONTNEED, \`dd iflag=nocache\`)." \
		"**Warm**: the median of $runs reloads after it. The API requests are the page's own (Resource Timing:" \
		"request start to response end, as the browser saw them), each the median over the warm loads, cold in brackets;" \
		"a page's requests run at once, on the agent's 2 CPUs." \
		"" \
		'```' \
		"${gen[*]/#$WORK/\$WORK}" \
		"ip netns exec $ns ${agent[*]/#$WORK/\$WORK}" \
		"ip netns exec $ns node $node_script 'http://$ui/#/PAGE?since=$since&until=$until' PAGE $runs OUT.json" \
		'```' \
		""
	python3 - "$WORK" "$pages" >>"$SECTION" <<'EOF'
import json, statistics, sys, urllib.parse
work, pages = sys.argv[1], sys.argv[2].split()
print("| page | first view, cold | first view, warm (median; min–max) | the page's API requests: warm median (cold) | warm < 1 s |")
print("| --- | ---: | ---: | --- | --- |")
worst, failed, slow = 0.0, [], []
for p in pages:
    try:
        d = json.load(open(f"{work}/{p}.json"))
    except OSError:
        d = {"runs": [], "failures": ["no result"]}
    runs = d["runs"]
    if d["failures"] or len(runs) < 2:
        failed.append(p)
        print(f"| {p} | | | **failed**: {'; '.join(d['failures'])[:300]} | **no** |")
        continue
    warm = [r["ms"] for r in runs[1:]]
    med = statistics.median(warm)
    worst = max(worst, med)
    def name(path):
        u = urllib.parse.urlsplit(path)
        q = urllib.parse.parse_qs(u.query)
        n = u.path.removeprefix("/api/v1/")
        return n + (f" by={q['by'][0]}" if "by" in q else "")
    api = {}
    for i, r in enumerate(runs):
        for e in r["api"]:
            api.setdefault(name(e["path"]), [[], []])[i > 0].append(e["ms"])
    cells = ", ".join(f"{k} {statistics.median(v[1]):.0f} ({v[0][0]:.0f})" if v[0] and v[1] else f"{k} ?" for k, v in
                      sorted(api.items(), key=lambda kv: -statistics.median(kv[1][1] or [0])))
    print(f"| {p} | {runs[0]['ms']:.0f} ms | {med:.0f} ms ({min(warm):.0f}–{max(warm):.0f}) | {cells} ms | {'yes' if med < 1000 else '**no**'} |")
    if med >= 1000:
        k, v = max(api.items(), key=lambda kv: statistics.median(kv[1][1] or [0]))
        slow.append(f"{p} {med:.0f} ms, waiting {statistics.median(v[1]):.0f} ms for its slowest request, {k}")
met = not failed and worst < 1000
print()
reason = f" ({', '.join(failed)} failed)" if failed else ""
if slow:
    reason += ": " + "; ".join(slow) + ". A page's requests run at once, and the store's queries each use every CPU"
print(f"Target (issue 13): every page's first view under 1 s, warm: **{'met' if met else 'not met'}**{reason} (slowest warm median {worst:.0f} ms).")
EOF
	section_end
	return "$rc"
}

# drop_store_cache DIR: evict DIR's files (only those) from the page cache.
drop_store_cache() {
	local f
	for f in "$1"/*; do
		[[ -f $f ]] && dd if="$f" iflag=nocache count=0 status=none
	done
	return 0
}
