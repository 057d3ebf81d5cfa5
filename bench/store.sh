# Benchmark 6: the store query benchmark. bench/store/ (its own owner) writes
# bench/store/RESULTS.md; this runs it and includes that file here, its
# headings moved one level down. Sourced by bench/run.sh.

bench_store() {
	local cmd=(go run ./bench/store) rc=0
	# DuckDB on the same records, in the same run (scripts/deps.sh bench
	# installs it); without it the section says so.
	if python3 -c 'import duckdb' 2>/dev/null; then
		cmd+=(-duckdb bench/store/duckdb_compare.py)
	else
		echo "bench: DuckDB is not installed (scripts/deps.sh bench): the store benchmark runs without it" >&2
	fi
	echo "bench: ${cmd[*]} (several minutes)" >&2
	timeout 45m "${cmd[@]}" >"$WORK/store.log" 2>&1 || rc=$?
	section_begin store "6. Store query benchmark"
	if ((rc != 0)); then
		say "\`${cmd[*]}\` **failed** (exit status $rc) in this run; its last output:" "" '```' "$(tail -20 "$WORK/store.log")" '```'
		section_end
		cat "$WORK/store.log" >&2
		return 1
	fi
	say "Run as \`${cmd[*]}\` (from the repository root), which writes [bench/store/RESULTS.md](store/RESULTS.md);" \
		"its report as that run wrote it:" ""
	awk '/^```/ {fence = !fence} !fence && /^#+ / {$0 = "##" $0} {print}' bench/store/RESULTS.md >>"$SECTION"
	section_end
}
