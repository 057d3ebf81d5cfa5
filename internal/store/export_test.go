package store

// LockHolder is lockHolder, for tests.
var LockHolder = lockHolder
