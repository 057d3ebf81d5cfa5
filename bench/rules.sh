# Benchmark 9: what measurement rules cost per packet (the selective
# measurement issue's target: at most +20 ns at 10 000 rules over no rules;
# a skipped packet cheaper than a measured one). BenchmarkRules in
# internal/datapath runs the real entry program on one TCP packet through
# BPF_PROG_TEST_RUN: the flows-only build, then the build with rules
# holding 0, 10 and 10 000 rules (a /24 destination each, the packet's among
# them), measured or skipped, and a packet no rule matches. Rounds of the
# whole benchmark alternate; medians over the rounds.
# Knobs: BENCH_RULES_ROUNDS (5), BENCH_RULES_RUNS (300000 runs a case).
# Sourced by bench/run.sh.

bench_rules() {
	local rounds=${BENCH_RULES_ROUNDS:-5} runs=${BENCH_RULES_RUNS:-300000} r tsv=$WORK/rules.tsv
	(cd "$ROOT" && go test -c -o "$WORK/datapath.test" ./internal/datapath)
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		"$WORK/datapath.test" -test.run '^$' -test.bench '^BenchmarkRules$' -test.benchtime "${runs}x" |
			awk -v r="$r" '/^BenchmarkRules\// {n = $1; sub(/^BenchmarkRules\//, "", n); sub(/-[0-9]+$/, "", n); print r "\t" n "\t" $(NF-1)}' >>"$tsv"
		echo "bench: rules round $r: $(awk -F'\t' -v r="$r" '$1 == r {printf "%s %s ns  ", $2, $3}' "$tsv")" >&2
	done
	section_begin rules "9. Measurement rules: BPF ns per packet"
	say "BPF_PROG_TEST_RUN of the entry program on a 100-byte TCP packet to 10.0.5.9 (\`go test -bench Rules ./internal/datapath\`," \
		"$runs runs a case, $rounds rounds, medians): the flows-only build, then the build with rules with 0, 10 or 10 000 rules" \
		"\`dst=10.X.Y.0/24 proto=tcp ACTION\`, the packet's /24 among them; \"no match\" sends to 172.16.5.9, which no rule covers;" \
		"\"noprefix\" is the one rule \`proto=tcp measure\`, judged without a trie lookup (the rule's own work, apart from the trie's)." \
		"A test run pays no hook dispatch and finds its caches warm: compare the rows with one another, not with section 2." "" \
		'```' "go test -c -o datapath.test ./internal/datapath" \
		"./datapath.test -test.run '^\$' -test.bench '^BenchmarkRules\$' -test.benchtime ${runs}x" '```' "" \
		"| case | runs (ns/packet) | median (ns/packet) | over rules-0 |" "| --- | --- | ---: | ---: |"
	local base c v
	base=$(awk -F'\t' '$2 == "rules-0" {print $3}' "$tsv" | median)
	for c in flows-only rules-0 rules-1-noprefix-measure rules-10-measure rules-10000-measure rules-10000-skip rules-10000-no-match; do
		v=$(awk -F'\t' -v c="$c" '$2 == c {print $3}' "$tsv" | median)
		say "| $c | $(awk -F'\t' -v c="$c" '$2 == c {printf "%s%s", (n++ ? ", " : ""), $3}' "$tsv") | $v | $(awk -v v="$v" -v b="$base" 'BEGIN {printf "%+.0f ns", v - b}') |"
	done
	local m10k skip
	m10k=$(awk -F'\t' '$2 == "rules-10000-measure" {print $3}' "$tsv" | median)
	skip=$(awk -F'\t' '$2 == "rules-10000-skip" {print $3}' "$tsv" | median)
	say "" "Targets: 10 000 rules at most +20 ns over no rules: **$(awk -v a="$m10k" -v b="$base" 'BEGIN {print (a - b <= 20 ? "met" : "not met")}')**" \
		"($(awk -v a="$m10k" -v b="$base" 'BEGIN {printf "%+.0f", a - b}') ns); a skipped packet cheaper than a measured one:" \
		"**$(awk -v s="$skip" -v m="$m10k" 'BEGIN {print (s < m ? "met" : "not met")}')** ($skip against $m10k ns)."
	section_end
}
