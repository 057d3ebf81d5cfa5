package k8s

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// What is watched, and why each:
//
//   - pods of this node (spec.nodeName field selector), stripped to their
//     IPs, phase, hostNetwork and controller: the only pods whose workload
//     can be named, since their owners are looked up;
//   - EndpointSlices, cluster wide: which pod (of any node) is an endpoint
//     of which service, on which ports. They are chosen over matching each
//     service's selector against pod labels because they name pods of
//     every node (a flow's far end is often another node's pod, whose
//     object is not watched), they cover selector-less services, and they
//     are what kube-proxy itself routes by; the selector would need every
//     pod's labels and a re-match on each label change;
//   - services, cluster wide: ClusterIPs, external and load-balancer IPs,
//     node ports;
//   - nodes, cluster wide: their addresses, which hostNetwork pods share;
//   - the metadata alone of ReplicaSets and Jobs (metadata-only
//     informers): a pod's controller is a ReplicaSet or a Job, and their
//     own controller (a Deployment, a CronJob) is the workload. The names
//     of Deployments, StatefulSets, DaemonSets and CronJobs come from
//     owner references, so their objects are not watched.
//
// The read-only access this needs is PolicyRules.

var (
	replicaSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	jobs        = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

// byController indexes pods by their controller, "Kind/namespace/name",
// so that a ReplicaSet or Job seen late renames its pods.
const byController = "controller"

func controllerKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// informerSet is the running informers.
type informerSet struct {
	factories   []interface{ Start(<-chan struct{}) }
	shutdown    []func()
	all         map[string]cache.SharedIndexInformer // by resource name
	pods        cache.SharedIndexInformer
	rs, jobs    cache.SharedIndexInformer
	probeClient rest.Interface
}

func (s informerSet) run(ctx context.Context) {
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	<-ctx.Done()
	for _, f := range s.shutdown {
		f()
	}
}

func (s informerSet) synced() bool {
	for _, inf := range s.all {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// newInformers builds the informers, their transforms and handlers.
func (r *Resolver) newInformers() (informerSet, error) {
	rc := rest.CopyConfig(r.rest)
	rc.UserAgent = "loupe"
	// Protobuf is several times cheaper to decode than JSON, for the
	// typed objects; the metadata client speaks JSON.
	typed := rest.CopyConfig(rc)
	typed.ContentType = "application/vnd.kubernetes.protobuf"
	typed.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(typed)
	if err != nil {
		return informerSet{}, fmt.Errorf("kubernetes client: %w", err)
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		return informerSet{}, fmt.Errorf("kubernetes metadata client: %w", err)
	}

	local := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTransform(strip),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if r.node != "" {
				o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", r.node).String()
			}
		}))
	cluster := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(strip))
	meta := metadatainformer.NewSharedInformerFactory(md, 0)

	s := informerSet{
		factories:   []interface{ Start(<-chan struct{}) }{local, cluster, meta},
		shutdown:    []func(){local.Shutdown, cluster.Shutdown, meta.Shutdown},
		pods:        local.Core().V1().Pods().Informer(),
		rs:          meta.ForResource(replicaSets).Informer(),
		jobs:        meta.ForResource(jobs).Informer(),
		probeClient: cs.Discovery().RESTClient(),
	}
	s.all = map[string]cache.SharedIndexInformer{
		"pods":           s.pods,
		"services":       cluster.Core().V1().Services().Informer(),
		"nodes":          cluster.Core().V1().Nodes().Informer(),
		"endpointslices": cluster.Discovery().V1().EndpointSlices().Informer(),
		"replicasets":    s.rs,
		"jobs":           s.jobs,
	}
	for name, inf := range s.all {
		if name == "replicasets" || name == "jobs" {
			if err := inf.SetTransform(strip); err != nil {
				return informerSet{}, err
			}
		}
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			r.health.watchError(r, name, err)
		}); err != nil {
			return informerSet{}, err
		}
	}
	if err := s.pods.AddIndexers(cache.Indexers{byController: podController}); err != nil {
		return informerSet{}, err
	}
	handlers := map[string]func(obj any, deleted bool){
		"pods":           func(obj any, deleted bool) { r.onPod(s, obj, deleted) },
		"services":       r.onService,
		"nodes":          r.onNode,
		"endpointslices": r.onEndpointSlice,
		"replicasets":    func(obj any, _ bool) { r.onOwner(s, "ReplicaSet", obj) },
		"jobs":           func(obj any, _ bool) { r.onOwner(s, "Job", obj) },
	}
	for name, h := range handlers {
		if _, err := s.all[name].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { h(obj, false) },
			UpdateFunc: func(_, obj any) { h(obj, false) },
			DeleteFunc: func(obj any) { h(tombstone(obj), true) },
		}); err != nil {
			return informerSet{}, err
		}
	}
	return s, nil
}

// tombstone returns the last known state of a deleted object: the object
// itself, or the one a DeletedFinalStateUnknown carries (a deletion missed
// during an outage and found by the relist).
func tombstone(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func podController(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil && (ref.Kind == "ReplicaSet" || ref.Kind == "Job") {
		return []string{controllerKey(ref.Kind, p.Namespace, ref.Name)}, nil
	}
	return nil, nil
}

func (r *Resolver) onPod(s informerSet, obj any, deleted bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.applyPod(s, p, deleted)
}

// applyPod stores what a pod holds. Called with wmu held.
func (r *Resolver) applyPod(s informerSet, p *corev1.Pod, deleted bool) {
	seen := r.now().UnixNano()
	key := "pod/" + string(p.UID)
	if deleted {
		r.apply(key, srcPod, holding{}, claim{seen: seen})
		return
	}
	r.apply(key, srcPod, podHolding(p, func(ns string, ref *metav1.OwnerReference) (string, string) {
		return r.workload(s, ns, ref)
	}), podClaim(p, seen))
}

// workload names the workload of a pod whose controller is ref: the
// controller of its ReplicaSet or Job if that has one (a Deployment, a
// CronJob), else the controller itself.
func (r *Resolver) workload(s informerSet, ns string, ref *metav1.OwnerReference) (kind, name string) {
	var store cache.Store
	switch {
	case ref.Kind == "ReplicaSet" && groupOf(ref.APIVersion) == "apps":
		store = s.rs.GetStore()
	case ref.Kind == "Job" && groupOf(ref.APIVersion) == "batch":
		store = s.jobs.GetStore()
	default:
		return ref.Kind, ref.Name
	}
	obj, ok, _ := store.GetByKey(ns + "/" + ref.Name)
	if m, isMeta := obj.(*metav1.PartialObjectMetadata); ok && isMeta {
		if top := metav1.GetControllerOfNoCopy(m); top != nil {
			return top.Kind, top.Name
		}
	}
	return ref.Kind, ref.Name
}

func groupOf(apiVersion string) string {
	g, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return ""
	}
	return g
}

// onOwner renames the pods a ReplicaSet or Job controls, which may have
// been seen before it (informers do not order their events between one
// another) or whose owner changed (a ReplicaSet adopted by a Deployment).
func (r *Resolver) onOwner(s informerSet, kind string, obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	pods, err := s.pods.GetIndexer().ByIndex(byController, controllerKey(kind, m.Namespace, m.Name))
	if err != nil || len(pods) == 0 {
		return
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	for _, obj := range pods {
		if p, ok := obj.(*corev1.Pod); ok {
			r.applyPod(s, p, false)
		}
	}
}

func (r *Resolver) onService(obj any, deleted bool) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	r.applyObject("svc/"+string(svc.UID), srcService, svc.ObjectMeta, deleted, func() holding { return serviceHolding(svc) })
}

func (r *Resolver) onNode(obj any, deleted bool) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	r.applyObject("node/"+string(n.UID), srcNode, n.ObjectMeta, deleted, func() holding { return nodeHolding(n) })
}

func (r *Resolver) onEndpointSlice(obj any, deleted bool) {
	e, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	r.applyObject("eps/"+string(e.UID), srcEndpoint, e.ObjectMeta, deleted, func() holding { return endpointSliceHolding(e) })
}

// applyObject stores what a service, node or EndpointSlice holds: nothing
// once deleted. They say nothing of when they took an address but their
// creation, before which they held none.
func (r *Resolver) applyObject(key string, src source, m metav1.ObjectMeta, deleted bool, holds func() holding) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	c := claim{seen: r.now().UnixNano(), notBefore: unixNano(m.CreationTimestamp)}
	if deleted {
		r.apply(key, src, holding{}, c)
		return
	}
	r.apply(key, src, holds(), c)
}
