package store

import "context"

// TopBitsBudget is Top with the bits of its second pass bounded to budget
// bytes a reading, telling readings how many readings it took, for tests
// of the name groupings' shares.
func (r *Reader) TopBitsBudget(ctx context.Context, q Query, by GroupBy, n, budget int, readings *int) ([]TopEntry, error) {
	return r.top(ctx, q, by, SortBytes, n, flowLimits{bitsBudget: budget, readings: readings}, true, nil)
}
