package k8s

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
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
	all         map[string]cache.SharedIndexInformer // by resource name
	handlers    []cache.ResourceEventHandlerRegistration
	pods        cache.SharedIndexInformer
	rs, jobs    cache.SharedIndexInformer
	probeClient rest.Interface
}

func (s informerSet) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range s.all {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

// synced reports whether every handler has been given every object of
// its informer's first list: the informer's own HasSynced says only that
// its store has them.
func (s informerSet) synced() bool {
	for _, h := range s.handlers {
		if !h.HasSynced() {
			return false
		}
	}
	return true
}

// clients returns REST clients of the core and discovery.k8s.io groups
// that decode only the two groups' types, a metadata client, and a client
// for the health probe.
//
// client-go's clientset and informer factories register every API group
// of Kubernetes (some sixty) in their scheme: linking them doubled the
// agent's binary (35 to 72 MB). The informers here need two groups' types
// and metadata alone of two more, so they are built on plain REST
// clients with a scheme of those two groups.
func clients(rc *rest.Config) (core, discovery rest.Interface, md metadata.Interface, probe rest.Interface, err error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme)
	typed := func(base *rest.Config, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(base)
		c.GroupVersion, c.APIPath = &gv, apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		// Protobuf is several times cheaper to decode than JSON.
		c.ContentType = runtime.ContentTypeProtobuf
		c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		return rest.RESTClientFor(c)
	}
	if core, err = typed(rc, corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, nil, nil, nil, err
	}
	if discovery, err = typed(rc, discoveryv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, nil, nil, nil, err
	}
	if md, err = metadata.NewForConfig(rc); err != nil {
		return nil, nil, nil, nil, err
	}
	unthrottled := rest.CopyConfig(rc)
	unthrottled.QPS = -1 // no client-side rate limit
	if probe, err = typed(unthrottled, corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, nil, nil, nil, err
	}
	return core, discovery, md, probe, nil
}

// metadataListWatch lists and watches the metadata alone of a resource.
func metadataListWatch(md metadata.Interface, gvr schema.GroupVersionResource) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return md.Resource(gvr).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return md.Resource(gvr).Watch(ctx, o)
		},
	}
}

// newInformers builds the informers, their transforms and handlers.
func (r *Resolver) newInformers() (informerSet, error) {
	rc := rest.CopyConfig(r.rest)
	rc.UserAgent = "loupe"
	core, disc, md, probe, err := clients(rc)
	if err != nil {
		return informerSet{}, fmt.Errorf("kubernetes client: %w", err)
	}
	inf := func(lw cache.ListerWatcher, example runtime.Object) cache.SharedIndexInformer {
		idx := cache.Indexers{}
		if _, isPod := example.(*corev1.Pod); isPod {
			idx[byController] = podController
		}
		return cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{Indexers: idx})
	}
	everything := func(*metav1.ListOptions) {}
	thisNode := func(o *metav1.ListOptions) {
		if r.node != "" {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", r.node).String()
		}
	}
	s := informerSet{
		pods:        inf(cache.NewFilteredListWatchFromClient(core, "pods", metav1.NamespaceAll, thisNode), &corev1.Pod{}),
		rs:          inf(metadataListWatch(md, replicaSets), &metav1.PartialObjectMetadata{}),
		jobs:        inf(metadataListWatch(md, jobs), &metav1.PartialObjectMetadata{}),
		probeClient: probe,
	}
	s.all = map[string]cache.SharedIndexInformer{
		"pods":           s.pods,
		"services":       inf(cache.NewFilteredListWatchFromClient(core, "services", metav1.NamespaceAll, everything), &corev1.Service{}),
		"nodes":          inf(cache.NewFilteredListWatchFromClient(core, "nodes", metav1.NamespaceAll, everything), &corev1.Node{}),
		"endpointslices": inf(cache.NewFilteredListWatchFromClient(disc, "endpointslices", metav1.NamespaceAll, everything), &discoveryv1.EndpointSlice{}),
		"replicasets":    s.rs,
		"jobs":           s.jobs,
	}
	for name, inf := range s.all {
		if err := inf.SetTransform(strip); err != nil {
			return informerSet{}, err
		}
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			r.health.watchError(r, name, err)
		}); err != nil {
			return informerSet{}, err
		}
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
		reg, err := s.all[name].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { h(obj, false) },
			UpdateFunc: func(_, obj any) { h(obj, false) },
			DeleteFunc: func(obj any) { h(tombstone(obj), true) },
		})
		if err != nil {
			return informerSet{}, err
		}
		s.handlers = append(s.handlers, reg)
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
