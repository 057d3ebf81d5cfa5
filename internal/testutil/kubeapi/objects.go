package kubeapi

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Objects writes what a cluster's controllers and kubelets would: objects
// with their owners, and the status of pods and nodes. Every call fails the
// test on error.
type Objects struct {
	t  testing.TB
	cs kubernetes.Interface
}

// Objects writes through the main API server, as the administrator.
func (c *Cluster) Objects(t testing.TB) *Objects { return NewObjects(t, c.Client(t)) }

// NewObjects writes through cs (a spare API server's client).
func NewObjects(t testing.TB, cs kubernetes.Interface) *Objects { return &Objects{t: t, cs: cs} }

func (o *Objects) ctx() context.Context { return context.Background() }

func (o *Objects) check(what string, err error) {
	o.t.Helper()
	if err != nil {
		o.t.Fatalf("%s: %v", what, err)
	}
}

// Namespace creates a namespace.
func (o *Objects) Namespace(name string) {
	o.t.Helper()
	_, err := o.cs.CoreV1().Namespaces().Create(o.ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	o.check("create namespace "+name, err)
}

// Node creates a node with these internal addresses.
func (o *Objects) Node(name string, ips ...string) {
	o.t.Helper()
	n, err := o.cs.CoreV1().Nodes().Create(o.ctx(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	o.check("create node "+name, err)
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	_, err = o.cs.CoreV1().Nodes().UpdateStatus(o.ctx(), n, metav1.UpdateOptions{})
	o.check("node status "+name, err)
}

func template(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}
}

func selector(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
}

func ownedBy(owner *metav1.OwnerReference) []metav1.OwnerReference {
	if owner == nil {
		return nil
	}
	return []metav1.OwnerReference{*owner}
}

func controllerRef(apiVersion, kind string, m metav1.ObjectMeta) *metav1.OwnerReference {
	yes := true
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: m.Name, UID: m.UID, Controller: &yes}
}

// Workload creates a workload object of kind Deployment, ReplicaSet,
// StatefulSet, DaemonSet, Job or CronJob, owned by owner (nil: none), and
// returns the controller reference its pods (or its ReplicaSets or Jobs)
// carry. Nothing runs it: the test creates its pods.
func (o *Objects) Workload(kind, ns, name string, owner *metav1.OwnerReference) *metav1.OwnerReference {
	o.t.Helper()
	meta := metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: ownedBy(owner)}
	apps, batch := o.cs.AppsV1(), o.cs.BatchV1()
	var (
		m   metav1.ObjectMeta
		api = "apps/v1"
		err error
	)
	switch kind {
	case "Deployment":
		var d *appsv1.Deployment
		d, err = apps.Deployments(ns).Create(o.ctx(), &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Selector: selector(name), Template: template(name)}}, metav1.CreateOptions{})
		if err == nil {
			m = d.ObjectMeta
		}
	case "ReplicaSet":
		var r *appsv1.ReplicaSet
		r, err = apps.ReplicaSets(ns).Create(o.ctx(), &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Selector: selector(name), Template: template(name)}}, metav1.CreateOptions{})
		if err == nil {
			m = r.ObjectMeta
		}
	case "StatefulSet":
		var s *appsv1.StatefulSet
		s, err = apps.StatefulSets(ns).Create(o.ctx(), &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: selector(name), Template: template(name)}}, metav1.CreateOptions{})
		if err == nil {
			m = s.ObjectMeta
		}
	case "DaemonSet":
		var d *appsv1.DaemonSet
		d, err = apps.DaemonSets(ns).Create(o.ctx(), &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: selector(name), Template: template(name)}}, metav1.CreateOptions{})
		if err == nil {
			m = d.ObjectMeta
		}
	case "Job":
		api = "batch/v1"
		tmpl := template(name)
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		var j *batchv1.Job
		j, err = batch.Jobs(ns).Create(o.ctx(), &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: tmpl}}, metav1.CreateOptions{})
		if err == nil {
			m = j.ObjectMeta
		}
	case "CronJob":
		api = "batch/v1"
		tmpl := template(name)
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		var c *batchv1.CronJob
		c, err = batch.CronJobs(ns).Create(o.ctx(), &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{
			Schedule:    "0 * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}},
		}}, metav1.CreateOptions{})
		if err == nil {
			m = c.ObjectMeta
		}
	default:
		o.t.Fatalf("unknown workload kind %q", kind)
	}
	o.check("create "+kind+" "+ns+"/"+name, err)
	return controllerRef(api, kind, m)
}

// Pod is a pod to create, and what its kubelet would report.
type Pod struct {
	Namespace, Name string
	Node            string
	// IP is the pod's address ("": none yet). A hostNetwork pod has its
	// node's.
	IP          string
	HostNetwork bool
	Owner       *metav1.OwnerReference
	// Phase is the pod's phase; "": Running.
	Phase corev1.PodPhase
	// NetworkReady is when the pod's sandbox got its network: the
	// PodReadyToStartContainers condition's time. Zero: no condition.
	NetworkReady time.Time
}

// Pod creates a pod and writes its status.
func (o *Objects) Pod(p Pod) *corev1.Pod {
	o.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, OwnerReferences: ownedBy(p.Owner)},
		Spec: corev1.PodSpec{
			NodeName:    p.Node,
			HostNetwork: p.HostNetwork,
			Containers:  []corev1.Container{{Name: "c", Image: "none"}},
		},
	}
	created, err := o.cs.CoreV1().Pods(p.Namespace).Create(o.ctx(), pod, metav1.CreateOptions{})
	o.check("create pod "+p.Namespace+"/"+p.Name, err)
	return o.PodStatus(created, p)
}

// PodStatus writes what p says of the pod's status (IP, phase, network
// readiness) over pod's.
func (o *Objects) PodStatus(pod *corev1.Pod, p Pod) *corev1.Pod {
	o.t.Helper()
	pod = pod.DeepCopy()
	st := &pod.Status
	st.Phase = p.Phase
	if st.Phase == "" {
		st.Phase = corev1.PodRunning
	}
	st.PodIP, st.PodIPs, st.HostIP = p.IP, nil, ""
	if p.IP != "" {
		st.PodIPs = []corev1.PodIP{{IP: p.IP}}
	}
	st.Conditions = nil
	if !p.NetworkReady.IsZero() {
		st.Conditions = []corev1.PodCondition{{
			Type:               corev1.PodReadyToStartContainers,
			Status:             corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(p.NetworkReady),
		}}
	}
	updated, err := o.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(o.ctx(), pod, metav1.UpdateOptions{})
	o.check("pod status "+pod.Namespace+"/"+pod.Name, err)
	return updated
}

// DeletePod deletes a pod at once (grace period 0), as the kubelet does
// once its containers are gone.
func (o *Objects) DeletePod(ns, name string) {
	o.t.Helper()
	zero := int64(0)
	err := o.cs.CoreV1().Pods(ns).Delete(o.ctx(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	o.check("delete pod "+ns+"/"+name, err)
}

// Service is a service to create.
type Service struct {
	Namespace, Name string
	// ClusterIP: an address in 10.0.0.0/16 (the harness's service range),
	// "None" for a headless service, "" for one the server picks.
	ClusterIP string
	Port      int32
	NodePort  int32 // 0: a ClusterIP service
}

// Service creates a service selecting the pods labelled app=Name (which no
// controller acts on: its endpoints are EndpointSlice's).
func (o *Objects) Service(s Service) *corev1.Service {
	o.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name},
		Spec: corev1.ServiceSpec{
			ClusterIP: s.ClusterIP,
			Selector:  map[string]string{"app": s.Name},
			Ports:     []corev1.ServicePort{{Port: s.Port, TargetPort: intstr.FromInt32(s.Port), NodePort: s.NodePort}},
		},
	}
	if s.NodePort != 0 {
		svc.Spec.Type = corev1.ServiceTypeNodePort
	}
	created, err := o.cs.CoreV1().Services(s.Namespace).Create(o.ctx(), svc, metav1.CreateOptions{})
	o.check("create service "+s.Namespace+"/"+s.Name, err)
	return created
}

// Endpoint is one endpoint of an EndpointSlice: a pod's address.
type Endpoint struct {
	IP, Pod, Node string
}

// EndpointSlice creates an IPv4 EndpointSlice of a service, on one TCP
// port, as the EndpointSlice controller would.
func (o *Objects) EndpointSlice(ns, name, service string, port int32, eps ...Endpoint) {
	o.t.Helper()
	tcp := corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &tcp}},
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.IP}}
		if e.Pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.Pod}
		}
		if e.Node != "" {
			node := e.Node
			ep.NodeName = &node
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	_, err := o.cs.DiscoveryV1().EndpointSlices(ns).Create(o.ctx(), s, metav1.CreateOptions{})
	o.check("create endpointslice "+ns+"/"+name, err)
}

// GrantAgent gives AgentUser these permissions, cluster wide, through a
// ClusterRole and its binding: the role the agent's deployment declares.
func (o *Objects) GrantAgent(rules []rbacv1.PolicyRule) {
	o.t.Helper()
	_, err := o.cs.RbacV1().ClusterRoles().Create(o.ctx(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: AgentUser},
		Rules:      rules,
	}, metav1.CreateOptions{})
	o.check("create clusterrole", err)
	_, err = o.cs.RbacV1().ClusterRoleBindings().Create(o.ctx(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: AgentUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentUser},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: AgentUser}},
	}, metav1.CreateOptions{})
	o.check("create clusterrolebinding", err)
}
