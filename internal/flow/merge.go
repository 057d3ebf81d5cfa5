package flow

// MergePerCPU merges the per-CPU copies of one flow's counters.
//
// A copy that counted nothing is skipped. A copy whose last packet is older
// than cutoff (the moment the table was installed) cannot belong to this
// interval: it is a leftover of a deleted entry whose memory was reused
// (the netobserv paper's stale-entry problem) and is discarded and counted.
// Loupe's table swap makes such leftovers impossible on kernels that zero
// reused per-CPU elements, so a non-zero count is worth investigating.
func MergePerCPU(perCPU []Stats, cutoff uint64) (merged Stats, stale int) {
	for i := range perCPU {
		s := &perCPU[i]
		if s.Packets == 0 {
			continue
		}
		if s.LastSeen < cutoff {
			stale++
			continue
		}
		merged.Add(s)
	}
	return merged, stale
}
