package flows

import (
	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/store"
)

// collector reads the evictor's, the sinks' and the store's counters at
// scrape time, so that they know nothing of Prometheus. Every label set is
// bounded: reasons, sink names.
type collector struct {
	u *Unit

	capacity, entries, fill                      *prometheus.Desc
	evictions, evictedFlows, stale, evictSeconds *prometheus.Desc
	ringEvents                                   *prometheus.Desc
	sinkRecords, sinkPackets, sinkErrors         *prometheus.Desc
	sinkDropRecords, sinkDropPackets             *prometheus.Desc
	sinkPendRecords, sinkPendPackets             *prometheus.Desc
	storeSegments, storeRecords, storeBytes      *prometheus.Desc
	retSegments, retRecords, retBytes            *prometheus.Desc
	quarSegments, quarRecords                    *prometheus.Desc
	resumed, alreadyStored                       *prometheus.Desc
	sketchRecords, sketchPackets, sketchBytes    *prometheus.Desc
	sketchUnattr, sketchUnattrBytes              *prometheus.Desc
	sketchIncomplete, sketchErrors, sketchMemory *prometheus.Desc
	tunnelErrors                                 *prometheus.Desc
}

func newCollector(u *Unit) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_"+name, help, labels, nil)
	}
	return &collector{
		u:            u,
		capacity:     d("flow_table_capacity", "Flows one kernel flow table holds: flow_budget, times the CPUs with per-CPU tables (each CPU holds flow_budget)."),
		entries:      d("flow_table_entries", "Flows in the table at the last eviction."),
		fill:         d("flow_table_fill_ratio", "flow_table_entries / flow_table_capacity at the last eviction."),
		evictions:    d("evictions_total", "Table evictions, by what caused them.", "reason"),
		evictedFlows: d("evicted_flows_total", "Flow table entries read and deleted by evictions."),
		stale:        d("stale_entries_discarded_total", "Per-CPU leftovers older than their table, discarded at merge."),
		evictSeconds: d("eviction_duration_seconds", "Duration of the last eviction."),
		ringEvents:   d("ringbuf_events_total", "Packets delivered through the ring buffer, by reason.", "reason"),
		sinkRecords:  d("sink_records_total", "Flow records each sink stored (store, JSON file) or delivered (a network exporter's collector took them).", "sink"),
		sinkPackets:  d("sink_packets_total", "Packets counted by the records of loupe_sink_records_total.", "sink"),
		sinkErrors:   d("sink_errors_total", "Failed writes and flushes, by sink.", "sink"),
		// Every record handed to a sink is stored, pending or dropped:
		// records the evictor wrote = sink_records_total + sink_pending_records + sink_dropped_records_total.
		sinkDropRecords: d("sink_dropped_records_total", "Flow records a sink gave up, by reason: no_space, write_error (store, JSON file); queue_full, rejected, shutdown (network exporters).", "sink", "reason"),
		sinkDropPackets: d("sink_dropped_packets_total", "Packets counted by the records of loupe_sink_dropped_records_total.", "sink", "reason"),
		sinkPendRecords: d("sink_pending_records", "Flow records a sink holds for a later attempt (a store that cannot be written, an exporter's queue).", "sink"),
		sinkPendPackets: d("sink_pending_packets", "Packets counted by the records of loupe_sink_pending_records.", "sink"),
		storeSegments:   d("store_segments", "Live segments in the flow store."),
		storeRecords:    d("store_records", "Flow records in the flow store's live segments."),
		storeBytes:      d("store_disk_bytes", "Bytes of the flow store's live segments (store.max_size bounds it)."),
		retSegments:     d("store_retention_deleted_segments_total", "Segments retention deleted, by reason: age (store.retention), size (store.max_size).", "reason"),
		retRecords:      d("store_retention_deleted_records_total", "Flow records in the segments retention deleted, by reason.", "reason"),
		retBytes:        d("store_retention_deleted_bytes_total", "Bytes of the segments retention deleted, by reason.", "reason"),
		quarSegments:    d("store_quarantined_segments_total", "Damaged segments the store set aside (renamed *.corrupt) and no longer counts."),
		quarRecords:     d("store_quarantined_records_total", "Flow records the quarantined segments held, as far as the manifest listed them."),
		resumed:         d("restart_tables_resumed_total", "Kernel tables of a pin set of another layout (an upgrade, another flow budget or table kind) that this agent drained through their own BTF and emitted."),
		alreadyStored:   d("restart_tables_already_stored_total", "Kernel tables an earlier agent left whose epoch the store already held: cleared without being emitted again."),
		// Sketch mode (memory): what the sketches behind full tables held.
		sketchRecords:     d("sketch_records_total", "Flow records made from the sketches behind full tables, by accuracy: decoded (exact counts), estimated (count-min estimates, and the unattributed remainder of each interface).", "accuracy"),
		sketchPackets:     d("sketch_packets_total", "Packets that spilled into the sketches because the flow table was full, exactly."),
		sketchBytes:       d("sketch_bytes_total", "Bytes of loupe_sketch_packets_total."),
		sketchUnattr:      d("sketch_unattributed_packets_total", "Spilled packets no record could name a flow for (the sketch did not decode them), in per-interface unattributed records."),
		sketchUnattrBytes: d("sketch_unattributed_bytes_total", "Bytes of loupe_sketch_unattributed_packets_total."),
		sketchIncomplete:  d("sketch_decode_incomplete_total", "Sketch halves that held more flows than they decode (past about 0.8 flows per cell): raise memory."),
		sketchErrors:      d("sketch_decode_errors_total", "Sketch halves that could not be read or decoded; their traffic is in loupe_datapath_events_total{event=\"spilled_packets\"} only."),
		sketchMemory:      d("sketch_memory_bytes", "Kernel memory the sketches take, both halves on every CPU (0: sketch mode off)."),
		tunnelErrors:      d("tunnel_table_read_errors_total", "Tunnel tables (the outer side of tunnelled flows, beside each flow table) that could not be read: that interval's records have no tunnel fields."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	u := c.u
	if u.ev == nil {
		return
	}

	es := u.ev.Stats()
	budget := float64(u.capacity())
	gauge(c.capacity, budget)
	gauge(c.entries, float64(es.LastFlows))
	gauge(c.fill, float64(es.LastFlows)/budget)
	for reason, n := range es.Evictions {
		counter(c.evictions, n, reason)
	}
	counter(c.evictedFlows, es.Flows)
	counter(c.resumed, es.Resumed)
	counter(c.alreadyStored, es.AlreadyStored)
	counter(c.stale, es.Stale)
	gauge(c.evictSeconds, es.LastDuration.Seconds())
	for reason, n := range es.Events {
		counter(c.ringEvents, n, reason)
	}
	for acc, n := range es.Sketch.Records {
		counter(c.sketchRecords, n, acc)
	}
	counter(c.sketchPackets, es.Sketch.Packets)
	counter(c.sketchBytes, es.Sketch.Bytes)
	counter(c.sketchUnattr, es.Sketch.UnattributedPackets)
	counter(c.sketchUnattrBytes, es.Sketch.UnattributedBytes)
	counter(c.sketchIncomplete, es.Sketch.Incomplete)
	counter(c.sketchErrors, es.Sketch.Errors)
	gauge(c.sketchMemory, float64(u.dp.Plan().SketchBytes))
	counter(c.tunnelErrors, u.tunnelErrors.Load())

	for _, s := range u.fan.Stats() {
		counter(c.sinkRecords, s.Stored.Records, s.Name)
		counter(c.sinkPackets, s.Stored.Packets, s.Name)
		counter(c.sinkErrors, s.Errors, s.Name)
		gauge(c.sinkPendRecords, float64(s.Pending.Records), s.Name)
		gauge(c.sinkPendPackets, float64(s.Pending.Packets), s.Name)
		for reason, n := range s.Dropped {
			counter(c.sinkDropRecords, n.Records, s.Name, reason)
			counter(c.sinkDropPackets, n.Packets, s.Name, reason)
		}
	}
	if u.store != nil {
		st := u.store.StoreStats()
		gauge(c.storeSegments, float64(st.Segments))
		gauge(c.storeRecords, float64(st.Records))
		gauge(c.storeBytes, float64(st.DiskBytes))
		for _, reason := range []string{store.RetentionAge, store.RetentionSize} {
			d := st.Retention[reason]
			counter(c.retSegments, d.Segments, reason)
			counter(c.retRecords, d.Records, reason)
			counter(c.retBytes, d.Bytes, reason)
		}
		counter(c.quarSegments, st.QuarantinedSegments)
		counter(c.quarRecords, st.QuarantinedRecords)
	}
}
