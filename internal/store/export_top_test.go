package store

import "context"

// TopBitsBudget is Top with the bits of its second pass bounded to budget
// bytes a reading, telling readings how many readings it took, for tests
// of the name groupings' shares.
func (r *Reader) TopBitsBudget(ctx context.Context, q Query, by GroupBy, n, budget int, readings *int) ([]TopEntry, error) {
	return r.top(ctx, q, by, SortBytes, n, topLimits{bitsBudget: budget, readings: readings}, true, nil)
}

// TopPairCells is Top with pairRound's dense matrix bounded to cells
// cells, for tests of the rounds that do not fit it.
func (r *Reader) TopPairCells(ctx context.Context, q Query, n, cells int) ([]TopEntry, error) {
	return r.top(ctx, q, ByPair, SortBytes, n, topLimits{bitsBudget: flowBitsBudget, pairCells: cells}, true, nil)
}
