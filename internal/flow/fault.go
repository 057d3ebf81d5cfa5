package flow

// Fault points let a test crash the agent at a chosen step of an eviction,
// to prove that what a crash there leaves behind is neither lost nor
// counted twice. They exist only in a binary built with the loupe_faults
// build tag (fault_on.go); in every other build faultPoint is empty.

// FaultAfterCommit is the point between the flush that commits a table's
// records (and its mark) and the clearing of the table.
const FaultAfterCommit = "after-commit"
