//go:build !loupe_faults

package datapath

// faultRefuse refuses loads in test builds only (fault_on.go).
func faultRefuse([]string) error { return nil }
