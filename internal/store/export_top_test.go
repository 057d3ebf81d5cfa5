package store

import "context"

// KeyPaths is keyPaths, for tests.
type KeyPaths = keyPaths

// TopLimits is Top with a set of flow keys whose workers fold every
// flushEvery keys and hold budget keys at most, telling paths which ways
// the set took, for tests of its paths.
func (r *Reader) TopLimits(ctx context.Context, q Query, by GroupBy, n, flushEvery, budget int, paths *KeyPaths) ([]TopEntry, error) {
	return r.top(ctx, q, by, SortBytes, n, keyLimits{flushEvery: flushEvery, budget: budget, paths: paths}, true, nil)
}
