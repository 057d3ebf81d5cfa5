package k8s_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"loupe/internal/k8s"
	"loupe/internal/testutil/kubeapi"
)

// Sizes of the benchmark's cluster (the issue's: 5 000 pods, 1 000
// services). Each service has an EndpointSlice of its ReplicaSet's five
// pods; the pods are spread over 50 nodes, and the resolver watches every
// one of them (no node name), the most a cluster of this size can cost.
const (
	benchServices = 1000
	benchPerSvc   = 5
	benchNodes    = 50
)

func benchPodIP(i int) string    { return fmt.Sprintf("10.%d.%d.%d", 128+i/65536, i/256%256, i%256) }
func benchSvcIP(i int) string    { return fmt.Sprintf("10.0.%d.%d", 4+i/256, i%256) }
func benchNodeIP(i int) string   { return fmt.Sprintf("192.0.2.%d", 10+i) }
func benchNodeName(i int) string { return fmt.Sprintf("lk8-node-%02d", i) }

// BenchmarkResolver measures, against a real API server holding 5 000 pods
// and 1 000 services: the heap the resolver's informers and history take
// once synced (runtime.MemStats, after a GC, against before it started),
// the time to sync, and the time of one lookup, alone and from every CPU.
//
//	go test -run '^$' -bench BenchmarkResolver ./internal/k8s
//
// bench/k8s.sh runs it and writes bench/RESULTS.md's section.
func BenchmarkResolver(b *testing.B) {
	c := kubeapi.Start(b)
	o := c.Objects(b)
	cs := c.Client(b)
	for i := range benchNodes {
		o.Node(benchNodeName(i), benchNodeIP(i))
	}
	o.Namespace("lk8-bench")
	began := time.Now()
	// Writes in parallel: one API call at a time would take minutes. The
	// queue holds every item, so a worker that fails the benchmark (and
	// exits) blocks no one.
	work := make(chan int, benchServices)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			wo := kubeapi.NewObjects(b, cs)
			for s := range work {
				name := fmt.Sprintf("svc-%04d", s)
				rs := wo.Workload("ReplicaSet", "lk8-bench", name+"-7d9f", nil)
				var eps []kubeapi.Endpoint
				for k := range benchPerSvc {
					i := s*benchPerSvc + k
					p := kubeapi.Pod{Namespace: "lk8-bench", Name: fmt.Sprintf("%s-7d9f-%d", name, k), Node: benchNodeName(i % benchNodes),
						IP: benchPodIP(i), Owner: rs, NetworkReady: time.Now()}
					wo.Pod(p)
					eps = append(eps, kubeapi.Endpoint{IP: p.IP, Pod: p.Name, Node: p.Node})
				}
				wo.Service(kubeapi.Service{Namespace: "lk8-bench", Name: name, ClusterIP: benchSvcIP(s), Port: 8080})
				wo.EndpointSlice("lk8-bench", name+"-abcde", name, 8080, eps...)
			}
		})
	}
	for s := range benchServices {
		work <- s
	}
	close(work)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.Logf("%d pods, %d services and their EndpointSlices and ReplicaSets, %d nodes written in %s",
		benchServices*benchPerSvc, benchServices, benchNodes, time.Since(began).Round(time.Millisecond))

	c.Objects(b).GrantAgent(k8s.PolicyRules())
	cfg := k8s.DefaultConfig()
	cfg.Kubeconfig = c.Kubeconfig(b)
	before := heap()
	r, err := k8s.New(cfg, k8s.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	began = time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if !r.WaitSynced(wctx) {
		b.Fatalf("not synced: %+v", r.Status())
	}
	synced := time.Since(began)
	last := addr(b, benchPodIP(benchServices*benchPerSvc-1))
	for r.Resolve(last, time.Now()).Kind != k8s.KindPod {
		if wctx.Err() != nil {
			b.Fatalf("the last pod not named after sync: %+v", r.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cacheBytes := heap() - before
	st := r.Status()
	if st.Objects["pods"] != benchServices*benchPerSvc || st.Objects["services"] != benchServices+1 {
		b.Fatalf("status %+v: want every pod and service", st)
	}

	// Lookups: pod IPs (with their services), service IPs and addresses
	// no one holds, in a fixed mixed order.
	addrs := make([]netip.Addr, 4096)
	for i := range addrs {
		switch i % 4 {
		case 0, 1:
			addrs[i] = addr(b, benchPodIP(i*7919%(benchServices*benchPerSvc)))
		case 2:
			addrs[i] = addr(b, benchSvcIP(i*31%benchServices))
		default:
			addrs[i] = addr(b, fmt.Sprintf("203.0.113.%d", i%256))
		}
	}
	now := time.Now()
	b.Run("cache", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(cacheBytes)/1e6, "heap-MB")
		b.ReportMetric(float64(synced.Milliseconds()), "sync-ms")
		b.ReportMetric(float64(st.Addresses), "addresses")
	})
	b.Run("resolve", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.Resolve(addrs[i&4095], now)
			i++
		}
	})
	b.Run("resolve-endpoint", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.ResolveEndpoint(addrs[i&4095], 8080, 6, now)
			i++
		}
	})
	b.Run("resolve-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				r.Resolve(addrs[i&4095], now)
				i++
			}
		})
	})
}

// heap returns the bytes of live heap objects after a full collection.
func heap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
