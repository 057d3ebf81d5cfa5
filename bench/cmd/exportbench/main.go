// Command exportbench measures what Loupe's network exporters sustain: flow
// records per second pushed through an exporter's delivery queue and client
// to a real collector, and the CPU the exporting process spends.
//
//	exportbench send -target URL [-records N] [-rate R] [-flows F]
//	exportbench recv-ipfix -proto udp|tcp -addr ADDR
//	exportbench recv-otlp -addr ADDR
//
// send runs in the calling process, which bench/export.sh pins to one core
// with GOMAXPROCS=1; it prints one JSON line. The receivers count what
// arrives and print the count when they get SIGINT or SIGTERM; they run on
// the other core so that they do not take the sender's.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "send":
		err = send(os.Args[2:])
	case "recv-ipfix":
		err = recvIPFIX(os.Args[2:])
	case "recv-otlp":
		err = recvOTLP(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "exportbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: exportbench send|recv-ipfix|recv-otlp [flags]")
	os.Exit(2)
}
