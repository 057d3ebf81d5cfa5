package testutil

import (
	"net"
	"testing"
)

// FreePorts returns n distinct free TCP ports on 127.0.0.1, for a peer the
// test starts. They are held open together so that they differ, then
// released for the peer.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
