// Package store is Loupe's embedded flow store: the default sink writes
// flow records into a directory on local disk, and `loupe flows` / `loupe
// top` query it, also while the agent runs (a separate process reading the
// same directory). No server, no cgo.
//
// # Layout
//
// A store directory holds:
//
//	LOCK                   the writer's flock (one writer per directory)
//	MANIFEST               the list of live segments, replaced atomically
//	seg-<id>.lseg          immutable columnar segment files (format.go)
//	seg-<id>.lseg.corrupt  damaged segments the writer set aside
//	.tmp-<random>-*        files being written; ignored, removed on open
//
// Each Write becomes one segment: written to a temp file, fsync'd, renamed,
// directory fsync'd, then published by a new MANIFEST (same dance). A crash
// loses at most the batch in flight; nothing is ever modified in place, so
// older data cannot be damaged by a crash.
//
// The agent's store sink writes one eviction through Stage and Commit
// instead: each segment is staged (written and renamed, but unlisted, so
// invisible, and deleted by Open after a crash), and Commit publishes all of
// an eviction's segments in one manifest, together with the eviction's mark:
// which kernel table (pin set and epoch) and how much of its ring buffer the
// records hold (manifest.go). An agent restarted after a crash asks Stored
// for the mark, and clears a table the store already holds instead of
// storing it twice.
//
// # Which directories, and who may read them
//
// Flow records say who talked to whom, and the writer usually runs as root,
// so (dir.go):
//
//   - Only a Loupe store, or an empty or new directory, is opened: a store
//     has a MANIFEST that starts with the manifest magic, or (its manifest
//     lost) only store file names and a valid segment. Anything else is
//     refused by the writer and by readers alike, and the writer never
//     creates, deletes or renames a file in it. An empty directory becomes
//     a store as soon as the writer opens it (LOCK and MANIFEST), so that
//     readers recognise it before the first record arrives.
//   - The writer refuses a directory that is not owned by its user or that
//     group or others can write into: whoever can write there could plant
//     links that redirect the writer's writes.
//   - The directory is created 0700 and every file 0600. A store an older
//     version made world-readable (0755, 0644) is made private when the
//     writer opens it, with a warning in the log.
//   - Every file is reached through one open descriptor of the directory,
//     never through its path, and opened with O_NOFOLLOW; new files are
//     created with O_EXCL under unpredictable temporary names; LOCK, the one
//     file opened for writing that may exist already, must be a regular
//     file of the writer's user with a single link.
//
// # Why a custom columnar store
//
// The workload is append-only batches, whole-segment deletion by age, and
// group-by scans over millions of rows ("top talkers in the last hour").
//
//   - SQLite (a cgo dependency, or the sqlite3 CLI) is a row store: a
//     GROUP BY over 10 M rows reads every column of every row and hashes
//     each address as text or blob, which takes seconds (see
//     bench/store/RESULTS.md for the measured comparison on the same data).
//     Retention is a DELETE plus VACUUM, and a reader in another process
//     needs WAL mode and busy handling against the writer.
//   - bbolt is a copy-on-write B+tree key/value store: it gives crash safety
//     and MVCC readers, but no columns and no aggregation; a group-by would
//     decode every record from its value, and its file never shrinks after
//     retention deletes.
//
// Here a query reads only the columns it needs straight from mmap'd files,
// and groups by per-segment dictionary ids (an address is a u32 index into
// the segment's address dictionary), so the per-record work is a few loads
// and an add into a slice. Segments carry their time range, so queries skip
// whole files, and retention is unlinking files.
//
// # Consistency
//
// Readers take no lock. A query reads the MANIFEST once and opens the files
// it lists; an open file stays readable after the writer unlinks it, so the
// query sees exactly that manifest's state. If a listed file is already
// gone, a newer manifest exists: the reader starts over (Report.Retries).
// The writer deletes a file only after publishing a manifest without it.
//
// Compaction (compact.go) merges small segments into bigger ones in the
// background; the swap of inputs for output is one manifest publish, so it
// is atomic for readers and for crashes. Merged segments also list the ids
// they replace, which lets a lost manifest be rebuilt without counting
// anything twice.
//
// # Integrity
//
// Every segment carries CRC32C checksums: of the header, of each block, and
// of the whole file. Scan and compaction verify the whole file; Top
// verifies the header and the blocks it reads, once per Reader: a Reader
// keeps Top's segments mapped, with what it verified of them and their
// addresses' query-wide ids, while the manifest lists them and the file
// is the same inode, unchanged (segcache.go), so that a warm Top neither
// maps nor checksums anything again. A segment that fails, or
// that cannot be read at all (permission denied, a directory or a symlink
// in its place), is skipped and listed in the query's Report, never a panic
// and never an error for the whole query.
//
// The writer quarantines damaged segments: when it opens the store, and at
// every maintenance run (each minute), it checks each listed segment's
// header against the manifest (a few pages each; an emptied or replaced
// file fails), and compaction verifies all of what it merges. A damaged segment is dropped from the manifest and renamed to
// seg-<id>.lseg.corrupt, kept as evidence, and counted (Stats), so that
// queries stop reporting it.
//
// # Retention
//
// Retention deletes whole segments: those whose newest record is older
// than Options.Retention, then, while the live segments take more than
// Options.MaxSize bytes, the oldest (by newest record) but never the
// newest. With a size limit, compaction builds no segment bigger than an
// eighth of it. What retention deleted is counted by reason (age, size) in
// segments, records and bytes.
//
// # Queries
//
// Every query takes a Query: a time window, address prefixes, a port, a
// protocol, interface globs and a direction, turned per segment into masks
// over its dictionaries (query.go), so that a segment none of whose
// entries match is not read. Scan hands over every match in storage order.
// Select (select.go) sorts and limits: it reads the filter and sort
// columns, keeps the best N rows in a heap per worker and decodes only
// those. Top (top.go) sums bytes and packets per group first (and, apart,
// the accuracy of the groups with a record that is not exact:
// accuracy.go; by address, from each segment's sums per address, kept
// with it: addrsums.go), keeps the groups that may be among the first n
// (of the pairs, only those whose addresses' totals reach a floor, summed
// in a dense matrix of the addresses' ranks where it is small: pairs.go),
// and counts their distinct flows exactly, with a bit per flow id: a
// Reader gives every distinct flow key of its segments an id, once per
// segment (flowids.go, distinct.go). Where a flow's group follows from its
// key and the ranking is by bytes, the bits are set while the records are
// summed, and no reading counts apart; its port grouping looks up only the
// connections whose SYNs say their service is the higher port, found from
// each segment's SYN rows (service.go). Follow (follow.go) hands over
// the segments a writer publishes, as it publishes them. Writer
// (status.go) says whether a writer holds the store, without taking its
// lock.
package store
