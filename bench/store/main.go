// Command store benchmarks internal/store: it writes N generated flow
// records (default 10 million) in batches the size of an agent's eviction,
// then times Top over the last hour, and writes a markdown report.
//
// Run from the repository root:
//
//	go run ./bench/store            # writes bench/store/RESULTS.md
//	go run ./bench/store -n 1000000 -out /dev/stdout
//	go run ./bench/store -dir DIR -ref UNIX -write-only -hops 10000   # the data only (bench/ui.sh)
//
// The "cold" run drops the store files from the page cache first
// (posix_fadvise DONTNEED on each file, nothing else), so it reads from disk;
// the warm figure is the median of -runs further runs.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"loupe/internal/export/storesink"
	"loupe/internal/flow"
	"loupe/internal/store"
)

func main() {
	n := flag.Int("n", 10_000_000, "records to write")
	batchSize := flag.Int("batch", 50_000, "records per Write (one eviction)")
	seed := flag.Uint64("seed", 1, "generator seed")
	runs := flag.Int("runs", 5, "warm runs per query (the median is reported)")
	dir := flag.String("dir", "", "store directory (default: a new temp dir, removed afterwards)")
	out := flag.String("out", "bench/store/RESULTS.md", "where to write the markdown report")
	csvPath := flag.String("csv", "", "also write the records as CSV here (for sqlite_compare.sh)")
	duckScript := flag.String("duckdb", "", "time DuckDB on the same records with this script (duckdb_compare.py), in this run, and check its answers")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the query phase here")
	refUnix := flag.Int64("ref", 0, "end of the generated hour, unix seconds (default: now); fixes the data for a given seed")
	queryOnly := flag.Bool("query-only", false, "reuse the store in -dir and only run the queries (for profiling; not for RESULTS.md)")
	queryBy := flag.String("by", "", "with -query-only: time only this grouping (src, dst, pair, port, ...)")
	queryN := flag.Int("top", 10, "with -query-only: the groups asked for (the UI's topology asks for 301 pairs)")
	compactMax := flag.Int("compact-max", storesink.CompactMaxRecords, "largest merged segment, in records (default: what the agent uses)")
	writeOnly := flag.Bool("write-only", false, "write the records into -dir, compact them and stop: no queries, no report (the UI benchmark's data)")
	hops := flag.Int("hops", 0, "with -write-only: also write this many per-hop latency records over the same hour")
	flag.Parse()
	log.SetFlags(0)
	if *writeOnly && *dir == "" {
		log.Fatal("-write-only needs -dir: the records would be written into a temporary directory and removed")
	}
	if *hops > 0 && !*writeOnly {
		log.Fatal("-hops is for -write-only")
	}
	if *queryOnly {
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				log.Fatal(err)
			}
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
		runQueriesOnly(*dir, *runs, *queryBy, *queryN)
		return
	}

	storeDir := *dir
	if storeDir == "" {
		d, err := os.MkdirTemp("", "loupe-store-bench-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		storeDir = d
	}
	ctx := context.Background()
	ref := time.Now().UTC().Truncate(time.Second)
	if *refUnix != 0 {
		ref = time.Unix(*refUnix, 0).UTC()
	}
	batches := (*n + *batchSize - 1) / *batchSize
	g := newGenerator(*seed, ref, batches)

	var csvw *bufio.Writer
	if *duckScript != "" && *csvPath == "" {
		d, err := os.MkdirTemp("", "loupe-store-bench-csv-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*csvPath = filepath.Join(d, "flows.csv")
	}
	if *csvPath != "" {
		f, err := os.Create(*csvPath)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		csvw = bufio.NewWriterSize(f, 1<<20)
		defer csvw.Flush()
	}

	s, err := store.Open(storeDir, store.Options{CompactMaxRecords: *compactMax})
	if err != nil {
		log.Fatal(err)
	}
	recs := make([]flow.Record, *batchSize)
	var genTime, writeTime time.Duration
	start := time.Now()
	for written := 0; written < *n; written += len(recs) {
		recs = recs[:min(*batchSize, *n-written)]
		t := time.Now()
		g.batch(recs)
		if csvw != nil {
			writeCSV(csvw, recs)
		}
		genTime += time.Since(t)
		t = time.Now()
		if err := s.Write(ctx, recs); err != nil {
			log.Fatal(err)
		}
		writeTime += time.Since(t)
	}
	loopTime := time.Since(start)
	t := time.Now()
	if err := s.Maintain(ctx); err != nil { // let compaction finish
		log.Fatal(err)
	}
	settle := time.Since(t)
	st := s.Stats()
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	disk := dirBytes(storeDir)
	log.Printf("wrote %d records in %v (Write calls %v, generation %v), compaction settled in %v: %d segments, %d compactions",
		*n, loopTime.Round(time.Millisecond), writeTime.Round(time.Millisecond), genTime.Round(time.Millisecond),
		settle.Round(time.Millisecond), st.Segments, st.Compactions)
	if *writeOnly {
		if err := writeHops(storeDir, *seed, ref, *hops); err != nil {
			log.Fatal(err)
		}
		log.Printf("wrote %d per-hop latency records; the hour ends at %d (unix s)", *hops, ref.Unix())
		return
	}

	// The peak of the write phase; then the queries' own, from a reset.
	writePeak := peakRSS()
	resetPeakRSS()
	r, err := store.OpenReader(storeDir)
	if err != nil {
		log.Fatal(err)
	}
	hour := store.NewQuery()
	hour.Since, hour.Until = ref.Add(-time.Hour), ref
	last5 := store.NewQuery()
	last5.Since, last5.Until = ref.Add(-5*time.Minute), ref
	type result struct {
		name       string
		cold, warm time.Duration
		rep        store.Report
		by         store.GroupBy
		top        bool // a Top, of grouping by
		lastHour   bool // over the last hour, as DuckDB's queries
		rows       []store.TopEntry
		peak       int64 // peak RSS of the cold run, bytes
	}
	var results []result
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var queryPeak int64
	newest, biggest := store.NewestFirst(), store.NewestFirst()
	if biggest, err = store.ParseOrder("bytes"); err != nil {
		log.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		q     store.Query
		by    store.GroupBy
		order *store.Order // a Select (loupe flows) instead of a Top
	}{
		{"top 10 sources, last hour", hour, store.BySrc, nil},
		{"top 10 destinations, last hour", hour, store.ByDst, nil},
		{"top 10 pairs, last hour", hour, store.ByPair, nil},
		{"top 10 ports (service ports), last hour", hour, store.ByPort, nil},
		{"top 10 source ports, last hour", hour, store.BySrcPort, nil},
		{"top 10 destination ports, last hour", hour, store.ByDstPort, nil},
		{"top 10 namespace pairs, last hour (no names in these records: one group of them all)", hour, store.ByNamespace, nil},
		{"top 10 workload pairs, last hour (as namespaces)", hour, store.ByWorkload, nil},
		{"top 10 service pairs, last hour (as namespaces)", hour, store.ByService, nil},
		{"top 10 sources, last 5 min", last5, store.BySrc, nil},
		{"50 newest records, last hour (loupe flows)", hour, 0, &newest},
		{"50 biggest records, last hour (loupe flows --sort bytes)", hour, 0, &biggest},
	} {
		res := result{name: c.name, by: c.by, top: c.order == nil, lastHour: c.q.Since.Equal(hour.Since)}
		q := c.q
		q.Report = &res.rep
		// Each query's peak, of its cold run, from the memory it starts
		// with, as a CLI process that runs one query would: what the
		// queries before it freed goes back to the OS first. (The warm
		// runs' peaks are the process's: the Go heap keeps what earlier
		// runs grew it to.)
		queryPeak = max(queryPeak, peakRSS())
		// The Reader keeps Top's segments mapped from one query to the
		// next, and the page cache cannot drop mapped pages: it lets
		// go of them first, so that the cold run reads from disk and
		// maps, checks and looks up everything again.
		if err := r.Close(); err != nil {
			log.Fatal(err)
		}
		debug.FreeOSMemory()
		resetPeakRSS()
		dropCache(storeDir)
		var times []time.Duration
		for i := range *runs + 1 {
			t := time.Now()
			var top []store.TopEntry
			if c.order != nil {
				err = r.Select(ctx, q, *c.order, 50, func(*flow.Record) error { return nil })
			} else {
				top, err = r.Top(ctx, q, c.by, 10)
			}
			d := time.Since(t)
			if err != nil {
				log.Fatal(err)
			}
			if i == 0 {
				res.cold, res.rows, res.peak = d, top, peakRSS()
				queryPeak = max(queryPeak, res.peak)
			} else {
				times = append(times, d)
			}
		}
		slices.Sort(times)
		res.warm = times[len(times)/2]
		log.Printf("%s: cold %v (peak RSS %s), warm median %v (%d of %d segments read, %d records matched)",
			c.name, res.cold.Round(time.Millisecond), mb(res.peak), res.warm.Round(time.Millisecond), res.rep.Read, res.rep.Segments, res.rep.Matched)
		results = append(results, res)
	}
	queryPeak = max(queryPeak, peakRSS())
	var duck *duckResults
	if *duckScript != "" {
		if csvw != nil {
			if err := csvw.Flush(); err != nil {
				log.Fatal(err)
			}
		}
		if duck, err = runDuckDB(*duckScript, *csvPath, hour, *runs); err != nil {
			log.Fatal(err)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# internal/store benchmark\n\n")
	fmt.Fprintf(&b, "Command: `go run ./bench/store%s` (from the repository root)  \n", argString())
	fmt.Fprintf(&b, "Kernel: `%s`, CPU: %s, %d CPUs (GOMAXPROCS %d), %s, %s  \n",
		kernel(), cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "Data: %d records, seed %d, %d Writes of %d records spread over the hour ending at %d (unix s), "+
		"which is the queries' `Until`.\n\n", *n, *seed, batches, *batchSize, ref.Unix())
	fmt.Fprintf(&b, "| measurement | value |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| write throughput (time in Write only, compaction running in the background) | %s records/s |\n", rate(*n, writeTime))
	fmt.Fprintf(&b, "| write throughput (whole write loop, including generating the records) | %s records/s |\n", rate(*n, loopTime))
	fmt.Fprintf(&b, "| compaction left after the last Write | %v |\n", settle.Round(time.Millisecond))
	fmt.Fprintf(&b, "| segments after compaction | %d (%d compactions) |\n", st.Segments, st.Compactions)
	fmt.Fprintf(&b, "| bytes on disk | %.1f MB, %.1f bytes per record |\n", float64(disk)/1e6, float64(disk)/float64(*n))
	for _, res := range results {
		fmt.Fprintf(&b, "| %s: cold (store files dropped from page cache) | %s (peak RSS %s) |\n", res.name, ms(res.cold), mb(res.peak))
		fmt.Fprintf(&b, "| %s: warm, median of %d | %s (%d of %d segments read, %d records matched) |\n",
			res.name, *runs, ms(res.warm), res.rep.Read, res.rep.Segments, res.rep.Matched)
	}
	fmt.Fprintf(&b, "| peak RSS of the benchmark process (VmHWM, includes mapped segment pages, which the Reader keeps mapped between queries) | %s |\n", mb(max(writePeak, queryPeak)))
	fmt.Fprintf(&b, "| peak RSS while writing | %s |\n", mb(writePeak))
	fmt.Fprintf(&b, "| peak RSS while querying (VmHWM reset after the writes; each query's cold row has its own, from a reset before it, once the memory earlier queries freed went back to the OS) | %s |\n", mb(queryPeak))
	fmt.Fprintf(&b, "\nTop 10 sources, last hour (to cross-check other engines; flows are distinct flow keys):\n\n| src | bytes | packets | flows |\n| --- | --- | --- | --- |\n")
	for _, e := range results[0].rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", e.Src, e.Bytes, e.Packets, e.Flows)
	}
	if duck != nil {
		var loupe []duckComparable
		for _, res := range results {
			if res.top && res.lastHour {
				loupe = append(loupe, duckComparable{res.by, res.warm, res.rows})
			}
		}
		duck.report(&b, loupe, *runs)
	}
	fmt.Print(b.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

func writeCSV(w *bufio.Writer, recs []flow.Record) {
	var b []byte
	for i := range recs {
		r := &recs[i]
		b = b[:0]
		b = strconv.AppendInt(b, r.FirstSeen.UnixNano(), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, r.LastSeen.UnixNano(), 10)
		b = append(b, ',')
		b = r.SrcIP().AppendTo(b)
		b = append(b, ',')
		b = r.DstIP().AppendTo(b)
		for _, v := range []uint64{uint64(r.SrcPort), uint64(r.DstPort), uint64(r.Proto), r.Packets, r.Bytes, uint64(r.IfIndex)} {
			b = append(b, ',')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, ',')
		b = append(b, r.Iface...)
		b = append(b, ',')
		b = append(b, r.Direction.String()...)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(r.EtherType), 10)
		b = append(b, ',')
		b = append(b, net.HardwareAddr(r.SrcMAC[:]).String()...)
		b = append(b, ',')
		b = append(b, net.HardwareAddr(r.DstMAC[:]).String()...)
		for _, v := range []uint64{uint64(r.TCPFlags), uint64(r.DSCP), uint64(r.Sampling)} {
			b = append(b, ',')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, '\n')
		w.Write(b)
	}
}

// dropCache evicts the store's files (only those) from the page cache.
func dropCache(dir string) {
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		f, err := os.Open(filepath.Join(dir, de.Name()))
		if err != nil {
			continue
		}
		const fadvDontNeed = 4
		syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0)
		f.Close()
	}
}

func dirBytes(dir string) int64 {
	var total int64
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if fi, err := de.Info(); err == nil {
			total += fi.Size()
		}
	}
	return total
}

func argString() string {
	var b strings.Builder
	for _, a := range os.Args[1:] {
		b.WriteString(" " + a)
	}
	return b.String()
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes,
// or -1 if it cannot say.
func peakRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// resetPeakRSS sets the peak resident set size back to the current one
// (clear_refs "5", Linux 4.0 and later).
func resetPeakRSS() {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		log.Printf("cannot reset the peak RSS, the peaks are the process's: %v", err)
	}
}

// cpuTime is the process's CPU time so far, user and system: on a
// machine shared with other work it says what a query cost where its
// wall time says mostly how busy the others were.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mb(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f MB", float64(n)/(1<<20))
}

func rate(n int, d time.Duration) string {
	return fmt.Sprintf("%.2f M", float64(n)/d.Seconds()/1e6)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

// runQueriesOnly times Top on an existing store, for quick profiling.
func runQueriesOnly(dir string, runs int, only string, n int) {
	r, err := store.OpenReader(dir)
	if err != nil {
		log.Fatal(err)
	}
	st, err := r.Stats()
	if err != nil {
		log.Fatal(err)
	}
	ref := st.Newest.Truncate(time.Second).Add(time.Second)
	q := store.NewQuery()
	q.Since, q.Until = ref.Add(-time.Hour), ref
	for by := store.BySrc; by <= store.ByService; by++ {
		if only != "" && by.String() != only {
			continue
		}
		var times, cpus []time.Duration
		for range runs {
			t, c := time.Now(), cpuTime()
			if _, err := r.Top(context.Background(), q, by, n); err != nil {
				log.Fatal(err)
			}
			times, cpus = append(times, time.Since(t)), append(cpus, cpuTime()-c)
		}
		slices.Sort(times)
		slices.Sort(cpus)
		log.Printf("%v: median %v, min %v; CPU time (user and system, all threads) median %v",
			by, times[len(times)/2].Round(time.Millisecond), times[0].Round(time.Millisecond), cpus[len(cpus)/2].Round(time.Millisecond))
	}
}
