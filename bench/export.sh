# Benchmark 7: what each network exporter sustains. `exportbench send` pushes
# flow records through the exporter's delivery queue and client (the agent's
# own code, targets.Open) as fast as the exporter takes them, on one core
# (taskset -c 0, GOMAXPROCS=1), to a collector on the other core; then offers
# 10 000 records/s for 10 s to measure the CPU that rate costs. Sourced by
# bench/run.sh.

# Collector ports on loopback.
EXPORT_PORT_IPFIX_UDP=47390
EXPORT_PORT_IPFIX_TCP=47391
EXPORT_PORT_OTLP=43170
EXPORT_PORT_KAFKA=49092
EXPORT_PORT_KAFKA_CTRL=49093

# kafka_start: a single-node KRaft broker on CPU 1 with topic "flows" (4
# partitions), jars from scripts/peers/kafka.sh; the same settings as the
# tests' broker (internal/testutil/kafka).
kafka_start() {
	local libs=${LOUPE_KAFKA_LIBS:-/var/cache/loupe/peers/kafka-4.3.1} dir=$WORK/kafka id i
	[[ -f $libs/.complete ]] || scripts/peers/kafka.sh
	mkdir -p "$dir/data"
	cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$EXPORT_PORT_KAFKA_CTRL
listeners=PLAINTEXT://127.0.0.1:$EXPORT_PORT_KAFKA,CONTROLLER://127.0.0.1:$EXPORT_PORT_KAFKA_CTRL
advertised.listeners=PLAINTEXT://127.0.0.1:$EXPORT_PORT_KAFKA
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
	cat >"$dir/log4j2.properties" <<LOG
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/broker.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
LOG
	KAFKA_JAVA=(java -Xmx512m -XX:+UseSerialGC -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$libs/*")
	id=$("${KAFKA_JAVA[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
	"${KAFKA_JAVA[@]}" kafka.tools.StorageTool format --ignore-formatted --cluster-id="$id" -c "$dir/server.properties" >"$dir/format.log" 2>&1
	start_bg KAFKA_PID TERM "$dir/stdout.log" taskset -c 1 "${KAFKA_JAVA[@]}" kafka.Kafka "$dir/server.properties"
	# Ready when it accepts the topic: retry for up to 60 s.
	for ((i = 0; i < 60; i++)); do
		alive "$KAFKA_PID" || break
		if "${KAFKA_JAVA[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:$EXPORT_PORT_KAFKA \
			--create --if-not-exists --topic flows --partitions 4 --replication-factor 1 >"$dir/topic.log" 2>&1; then
			return 0
		fi
		sleep 1
	done
	echo "bench: kafka broker not ready; its logs:" >&2
	tail -20 "$dir/stdout.log" "$dir/broker.log" "$dir/topic.log" >&2 2>/dev/null
	return 1
}

# kafka_offsets: the sum of the end offsets of topic flows.
kafka_offsets() {
	"${KAFKA_JAVA[@]}" org.apache.kafka.tools.GetOffsetShell --bootstrap-server 127.0.0.1:$EXPORT_PORT_KAFKA \
		--topic flows 2>/dev/null | awk -F: '{s += $3} END {print s + 0}'
}

# export_run NAME TARGET RECV_KIND: the two send runs against one collector,
# appending a line per run to $tsv.
export_run() {
	local name=$1 target=$2 recv=$3 rpid file=${1//[^a-zA-Z0-9+]/_} log out mode received k0=0
	log=$WORK/recv-$file.log
	local send=(env GOMAXPROCS=1 taskset -c 0 "$BIN/exportbench" send -target "$target")
	for mode in max 10k; do
		case $recv in
		ipfix-udp) start_bg rpid INT "$log" taskset -c 1 "$BIN/exportbench" recv-ipfix -proto udp -addr 127.0.0.1:$EXPORT_PORT_IPFIX_UDP ;;
		ipfix-tcp) start_bg rpid INT "$log" taskset -c 1 "$BIN/exportbench" recv-ipfix -proto tcp -addr 127.0.0.1:$EXPORT_PORT_IPFIX_TCP ;;
		otlp) start_bg rpid INT "$log" taskset -c 1 "$BIN/exportbench" recv-otlp -addr 127.0.0.1:$EXPORT_PORT_OTLP ;;
		kafka) rpid="" k0=$(kafka_offsets) ;;
		none) rpid="" ;;
		esac
		[[ -z $rpid ]] || wait_log "$log" "listening" 10 "$rpid"
		out=$WORK/send-$file-$mode.json
		if [[ $mode == max ]]; then
			"${send[@]}" -records "${BENCH_EXPORT_RECORDS:-2000000}" >"$out"
		else
			"${send[@]}" -records 100000 -rate 10000 >"$out"
		fi
		received=""
		if [[ -n $rpid ]]; then
			sleep 1
			stop_bg "$rpid" 10
			received=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["records"])' <"$log")
		elif [[ $recv == kafka ]]; then
			received=$(($(kafka_offsets) - k0))
		fi
		python3 - "$out" "$name" "$mode" "$received" >>"$tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("\t".join(str(x) for x in (sys.argv[2], sys.argv[3], r["records"], r["sent"], r["dropped"], sys.argv[4] or "-",
      "%.2f" % r["seconds"], "%.2f" % r["cpu_seconds"], "%.0f" % r["records_per_second"],
      "%.2f" % r["cpu_percent_per_10k_records_per_second"], "%.1f" % (r["max_rss_kib"] / 1024),
      "%.0f" % (r["sent"] / r["cpu_seconds"] if r["cpu_seconds"] else 0))))
PY
		echo "bench: export $name $mode: $(cat "$out")" >&2
	done
}

bench_export() {
	local tsv=$WORK/export.tsv
	: >"$tsv"
	export_run "ipfix+udp" "ipfix+udp://127.0.0.1:$EXPORT_PORT_IPFIX_UDP" ipfix-udp
	export_run "ipfix+tcp" "ipfix+tcp://127.0.0.1:$EXPORT_PORT_IPFIX_TCP" ipfix-tcp
	export_run "otlp" "otlp://127.0.0.1:$EXPORT_PORT_OTLP" otlp
	kafka_start
	export_run "kafka (protobuf, zstd)" "kafka://127.0.0.1:$EXPORT_PORT_KAFKA/flows" kafka
	export_run "kafka (json, zstd)" "kafka://127.0.0.1:$EXPORT_PORT_KAFKA/flows?format=json" kafka
	export_run "json:/dev/null" "json:/dev/null" none

	section_begin export "7. Exporters: records per second on one core"
	say "\`exportbench send\` (bench/cmd/exportbench) builds ${BENCH_EXPORT_RECORDS:-2000000} records over 100 000 distinct flows" \
		"(¾ IPv4, ¼ IPv6, TCP and UDP) and writes them, 1 024 at a time, into the exporter the agent would open for the" \
		"target (\`targets.Open\`: delivery queue + client, default settings), keeping the queue from overflowing so that" \
		"what is measured is delivery; then it closes the exporter (flushing everything) and reports records delivered per" \
		"second of wall time and its own CPU time. It runs pinned to CPU 0 with GOMAXPROCS=1; the collector runs on CPU 1:" \
		"\`exportbench recv-ipfix\` (counts IPFIX data records, UDP receive buffer 32 MiB), \`exportbench recv-otlp\`" \
		"(an OTLP/gRPC server counting log records), or a real Kafka 4.3.1 broker (KRaft, topic of 4 partitions; received" \
		"= growth of the topic's end offsets). The second run of each offers 10 000 records/s for 10 s: its CPU is the" \
		"agent's cost of exporting 10 000 flows/s." \
		"" \
		'```' \
		"GOMAXPROCS=1 taskset -c 0 exportbench send -target TARGET -records ${BENCH_EXPORT_RECORDS:-2000000}" \
		"GOMAXPROCS=1 taskset -c 0 exportbench send -target TARGET -records 100000 -rate 10000" \
		'```' \
		"" \
		"| exporter | run | records | delivered | dropped | received by the collector | seconds | CPU s | records/s | records per CPU second | CPU % of a core per 10 000 records/s | peak RSS (MiB) |" \
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	local name mode n sent dropped recv secs cpu rps per10k rss rpc verdict=""
	while IFS=$'\t' read -r name mode n sent dropped recv secs cpu rps per10k rss rpc; do
		say "| $name | $([[ $mode == max ]] && echo "as fast as it goes" || echo "10 000/s offered") | $n | $sent | $dropped | $recv | $secs | $cpu | $rps | $rpc | $per10k | $rss |"
		if [[ $mode == max && ($name == ipfix* || $name == kafka*) ]]; then
			verdict+="$name $(awk -v r="$rps" 'BEGIN {print (r >= 200000 ? "met" : "not met")}') ($rps/s); "
		fi
	done <"$tsv"
	say "" "records/s is delivered records per second of wall time, records per CPU second the same per second of the" \
		"exporting process's CPU: in the runs at full speed, where the two differ the collector, not the exporter, set" \
		"the pace (the OTLP receiver decodes every record with the generated protobuf types)." \
		"" "Target: 200 000 flow records/s through IPFIX and Kafka each on one core: ${verdict%; }."
	section_end
}
