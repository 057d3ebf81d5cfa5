//go:build !loupe_faults

package flow

func faultPoint(string, int) {}
