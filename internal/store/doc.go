// Package store is Loupe's embedded flow store: the default sink writes
// flow records into a directory on local disk, and `loupe flows` / `loupe
// top` query it, also while the agent runs (a separate process reading the
// same directory). No server, no cgo.
//
// # Layout
//
// A store directory holds:
//
//	LOCK                the writer's flock (one writer per directory)
//	MANIFEST            the list of live segments, replaced atomically
//	seg-<id>.lseg       immutable columnar segment files (format.go)
//	.tmp-*              files being written; ignored, removed on open
//
// Each Write becomes one segment: written to a temp file, fsync'd, renamed,
// directory fsync'd, then published by a new MANIFEST (same dance). A crash
// loses at most the batch in flight; nothing is ever modified in place, so
// older data cannot be damaged by a crash.
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
// verifies the header and the blocks it reads. A segment that fails is
// skipped and listed in the query's Report, never a panic and never an
// error for the whole query.
package store
