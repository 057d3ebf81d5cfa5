// Package datapath loads Loupe's flow-accounting BPF program, sizes its
// maps, and gives userspace the two things it needs from the kernel: the
// flow tables (swapped, read, and cleared once committed) and the ring
// buffer of diverted packets. With a pin directory it pins the maps, so
// that they outlive the agent, adopts those an earlier agent of the same
// layout pinned, and reads those of other layouts through their BTF
// (pins.go, load.go, retired.go). The kernel signals (RTT, retransmits,
// drops with reason) are an object of their own, loaded and attached at
// raw tracepoints signal by signal (signals.go). It knows nothing of
// interfaces, sinks or exporters.
package datapath

// The objects are generated with a pinned clang (Debian's clang-19) and
// committed, so `go build` needs no clang. `make generate` reruns this; CI
// reruns it and fails on any difference.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type flow_key -type flow_stats -type flow_slot -type slot_fill -type flow_event -type table_state -type counter -type capture_counter -type capture_event -type capture_pkt -type capture_config -type capture_rule -type rule -type rule_lpm_key -type rule_candidates -type rules_config -type rule_stats -type rules_verdict -type dns_counter -type dns_flag -type handshake_counter -type latency_counter -type latency_event -type sketch_cell -type sketch_counter -type sketch_slot -type sketch_params -type tunnel_info -type tunnel_type -type tunnel_flag loupe ../../bpf/loupe.c -- -I../../bpf/include -I../../bpf/lib
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel baseline ../../bpf/baseline.c -- -I../../bpf/include -I../../bpf/lib
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type signal_key -type sock_signals -type drop_key -type drop_signals -type signal_counter signals ../../bpf/signals.c -- -I../../bpf/include -I../../bpf/lib
