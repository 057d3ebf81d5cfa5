# Developer entry points. The scripts under scripts/ hold the real steps, so
# that a fresh machine without make can run them too.

GO ?= go
VMLINUX_ROOTS = "struct __sk_buff" __u8 __u16 __u32 __u64 __s8 __s16 __s32 __s64 \
	__be16 __be32 __wsum __sum16 "enum bpf_map_type" BPF_NOEXIST BPF_F_NO_PREALLOC \
	BPF_RB_FORCE_WAKEUP BPF_RB_AVAIL_DATA BPF_F_CURRENT_CPU TCX_NEXT \
	"struct bpf_raw_tracepoint_args" "struct sk_buff" "struct tcp_sock" "struct tcp_skb_cb" \
	"enum skb_drop_reason"

.PHONY: build image manifests check-manifests generate check-generated ui vmlinux headers test bench clean

# Stamps the version and commit (scripts/build.sh).
build:
	GO=$(GO) ./scripts/build.sh bin/loupe

# The OCI image, built without a container runtime: bin/image/oci (an OCI
# layout) and bin/image/loupe.tar (docker load / podman load).
image:
	GO=$(GO) ./scripts/image.sh

# The plain manifests, rendered from the Helm chart (needs helm:
# scripts/peers/helm.sh builds it); check-manifests fails if they drifted.
manifests:
	./scripts/manifests.sh

check-manifests:
	./scripts/manifests.sh --check

# Regenerate the committed BPF objects and the protobuf Go code (needs clang-19
# and protoc: scripts/deps.sh generate).
generate:
	$(GO) generate ./internal/datapath/ ./internal/export/kafka/

check-generated:
	./scripts/check-generated.sh

# Rebuild the web UI into internal/ui/dist (committed, so that go build
# needs no npm): node and npm, modules from web/package-lock.json.
ui:
	./scripts/ui.sh

# Regenerate bpf/include/vmlinux.h from this kernel's BTF, trimmed.
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > /tmp/loupe-vmlinux-full.h
	python3 tools/vmlinux/trim.py /tmp/loupe-vmlinux-full.h $(VMLINUX_ROOTS) > bpf/include/vmlinux.h

# Re-pin the libbpf headers from the installed libbpf-dev.
headers:
	cp /usr/include/bpf/bpf_helpers.h /usr/include/bpf/bpf_helper_defs.h /usr/include/bpf/bpf_endian.h \
		/usr/include/bpf/bpf_core_read.h bpf/include/bpf/

test:
	./scripts/test.sh

# Benchmarks (not tests): results go to bench/RESULTS.md.
bench:
	./bench/run.sh

clean:
	rm -rf bin
