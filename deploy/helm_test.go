package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"loupe/internal/config"
	"loupe/internal/k8s"
	"loupe/internal/testutil"
)

const (
	chartDir = "helm/loupe"
	// helmVersion is the helm scripts/peers/helm.sh builds.
	helmVersion = "3.19.5"
	// helmBinEnv overrides the directory of helm, as the script does.
	helmBinEnv = "LOUPE_HELM_BIN"
	release    = "loupe"
	namespace  = "monitoring"
)

// requireHelm returns the helm scripts/peers/helm.sh built, or skips the
// test (fails it under CI, which builds it: scripts/deps.sh test).
func requireHelm(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(helmBinEnv)
	if dir == "" {
		dir = "/var/cache/loupe/peers/helm-" + helmVersion
	}
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	msg := fmt.Sprintf("helm %s not found in %s (run scripts/peers/helm.sh, or set %s)", helmVersion, dir, helmBinEnv)
	if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
		t.Fatalf("%s, and %s=1 forbids skipping", msg, testutil.RequirePrivilegedEnv)
	}
	t.Skip(msg)
	return ""
}

// rendered is the chart rendered with some values, decoded into the
// Kubernetes API's types, strictly: a field the API does not have is an
// error, which neither helm lint nor helm template reports.
type rendered struct {
	objects   []runtime.Object
	unknown   []*unstructured.Unstructured // kinds outside client-go's scheme (ServiceMonitor)
	daemonSet *appsv1.DaemonSet
	agent     corev1.Container
}

// helmTemplate renders the chart with a values file holding values.
func helmTemplate(t *testing.T, values string) ([]byte, error) {
	t.Helper()
	helm := requireHelm(t)
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helm, "template", release, chartDir, "--namespace", namespace, "--values", vf)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	return out, nil
}

func render(t *testing.T, values string) rendered {
	t.Helper()
	out, err := helmTemplate(t, values)
	if err != nil {
		t.Fatal(err)
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Yaml: true, Strict: true})
	var r rendered
	docs := utilyaml.NewDocumentDecoder(io.NopCloser(bytes.NewReader(out)))
	defer docs.Close()
	buf := make([]byte, 1<<20)
	for {
		n, err := docs.Read(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the rendered documents: %v", err)
		}
		doc := buf[:n]
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", gvk, err)
			}
			r.unknown = append(r.unknown, u)
			continue
		}
		if err != nil {
			t.Fatalf("a rendered object does not decode strictly into the API's types: %v\n%s", err, doc)
		}
		r.objects = append(r.objects, obj)
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			r.daemonSet = ds
		}
	}
	if r.daemonSet == nil {
		t.Fatal("no DaemonSet rendered")
	}
	for _, c := range r.daemonSet.Spec.Template.Spec.Containers {
		if c.Name == "loupe" {
			r.agent = c
		}
	}
	if r.agent.Name == "" {
		t.Fatal("the DaemonSet has no container named loupe")
	}
	return r
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// kinds lists the rendered objects' kinds and names, sorted.
func (r rendered) kinds() []string {
	var ks []string
	for _, o := range r.objects {
		m := o.(interface{ GetName() string })
		ks = append(ks, fmt.Sprintf("%T/%s", o, m.GetName()))
	}
	for _, u := range r.unknown {
		ks = append(ks, u.GetKind()+"/"+u.GetName())
	}
	slices.Sort(ks)
	return ks
}

func find[T runtime.Object](r rendered, name string) T {
	for _, o := range r.objects {
		if x, ok := o.(T); ok && o.(interface{ GetName() string }).GetName() == name {
			return x
		}
	}
	var zero T
	return zero
}

// agentConfig loads the rendered ConfigMap's loupe.yaml through the
// agent's own loader, with the environment the DaemonSet gives the agent
// (its $(POD_IP) expanded as the kubelet would), so that what the chart
// writes is what the agent would run with.
func (r rendered) agentConfig(t *testing.T, podIP string) config.Config {
	t.Helper()
	cm := find[*corev1.ConfigMap](r, release)
	if cm == nil {
		t.Fatal("no ConfigMap named " + release)
	}
	data, ok := cm.Data["loupe.yaml"]
	if !ok || len(cm.Data) != 1 {
		t.Fatalf("ConfigMap data keys %v, want loupe.yaml alone", slices.Collect(func(yield func(string) bool) {
			for k := range cm.Data {
				if !yield(k) {
					return
				}
			}
		}))
	}
	file := filepath.Join(t.TempDir(), "loupe.yaml")
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range r.agent.Env {
		if strings.HasPrefix(e.Name, "LOUPE_") {
			env = append(env, e.Name+"="+strings.ReplaceAll(e.Value, "$(POD_IP)", podIP))
		}
	}
	// The configuration is read from where the ConfigMap is mounted.
	if !slices.Equal(r.agent.Args, []string{"--config", "/etc/loupe/loupe.yaml"}) || r.agent.Command != nil {
		t.Fatalf("agent command %q args %q, want the image's entrypoint with --config /etc/loupe/loupe.yaml", r.agent.Command, r.agent.Args)
	}
	if m := mountAt(r.agent, "/etc/loupe/loupe.yaml"); m == nil || m.Name != "config" || m.SubPath != "loupe.yaml" || !m.ReadOnly {
		t.Fatalf("/etc/loupe/loupe.yaml: mount %+v, want the ConfigMap's loupe.yaml, read-only", m)
	}
	return loadConfig(t, file, env)
}

// mountAt is the agent's volume mount whose path holds path, the
// deepest one.
func mountAt(c corev1.Container, path string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

func (r rendered) volume(name string) *corev1.Volume {
	for i, v := range r.daemonSet.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &r.daemonSet.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// hostPathOf is the host path a path of the agent's container is on, and
// the type of that hostPath volume.
func (r rendered) hostPathOf(t *testing.T, path string) (string, corev1.HostPathType) {
	t.Helper()
	m := mountAt(r.agent, path)
	if m == nil {
		t.Fatalf("%s is on no volume of the agent's container: the container's file system is read-only", path)
	}
	v := r.volume(m.Name)
	if v == nil || v.HostPath == nil {
		t.Fatalf("%s is on volume %s, which is not a hostPath", path, m.Name)
	}
	rel := strings.TrimPrefix(path, m.MountPath)
	typ := corev1.HostPathType("")
	if v.HostPath.Type != nil {
		typ = *v.HostPath.Type
	}
	return v.HostPath.Path + rel, typ
}

func capsOf(c corev1.Container) (add, drop []string) {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return nil, nil
	}
	for _, a := range c.SecurityContext.Capabilities.Add {
		add = append(add, string(a))
	}
	for _, d := range c.SecurityContext.Capabilities.Drop {
		drop = append(drop, string(d))
	}
	slices.Sort(add)
	return add, drop
}

// checkAgentLeastPrivilege checks the agent's container: exactly the three
// capabilities, every other dropped, not privileged, no escalation, a
// read-only root, and no pod-level setting that would widen any of that.
func checkAgentLeastPrivilege(t *testing.T, r rendered) {
	t.Helper()
	add, drop := capsOf(r.agent)
	if !slices.Equal(add, []string{"BPF", "NET_ADMIN", "PERFMON"}) || !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("agent capabilities add %q drop %q, want add exactly [BPF NET_ADMIN PERFMON], drop [ALL]", add, drop)
	}
	for _, a := range add {
		if strings.Contains(a, "SYS_ADMIN") {
			t.Errorf("the agent's container adds %s", a)
		}
	}
	sc := r.agent.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("agent securityContext %+v: want privileged false, allowPrivilegeEscalation false, readOnlyRootFilesystem true, runAsUser 0", sc)
	}
	spec := r.daemonSet.Spec.Template.Spec
	if spec.HostPID || spec.HostIPC {
		t.Errorf("hostPID %v hostIPC %v: the agent needs neither", spec.HostPID, spec.HostIPC)
	}
	if !spec.HostNetwork {
		t.Error("hostNetwork is off: the agent would watch its own pod's interfaces, not the node's")
	}
	for _, m := range r.agent.VolumeMounts {
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			t.Errorf("the agent's mount %s propagates both ways", m.MountPath)
		}
	}
}

// TestChartDefaults renders the chart with its default values and checks
// every property deploy/README.md promises.
func TestChartDefaults(t *testing.T) {
	r := render(t, "")
	want := []string{
		"*v1.ClusterRole/loupe", "*v1.ClusterRoleBinding/loupe", "*v1.ConfigMap/loupe",
		"*v1.DaemonSet/loupe", "*v1.ServiceAccount/loupe",
	}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("objects %q, want %q (no Service, no Namespace by default)", got, want)
	}
	checkAgentLeastPrivilege(t, r)
	spec := r.daemonSet.Spec.Template.Spec
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 {
		t.Errorf("%d init containers and %d containers, want none and the agent alone", len(spec.InitContainers), len(spec.Containers))
	}
	// Every node, whatever its taints.
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" || spec.Tolerations[0].Effect != "" {
		t.Errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
	}
	checkNodeName(t, r)
	checkResources(t, r)
	checkRBAC(t, r)

	cfg := r.agentConfig(t, "10.1.2.3")
	// Listeners: loopback only.
	if cfg.Listen != "127.0.0.1:9464" || (cfg.Control.Listen != "" && cfg.Control.Listen != config.None) || cfg.Control.TokenFile != "" {
		t.Errorf("listen %q, control.listen %q, token_file %q: want 127.0.0.1:9464 and no control TCP listener", cfg.Listen, cfg.Control.Listen, cfg.Control.TokenFile)
	}
	checkProbes(t, r, "127.0.0.1", cfg.Listen)
	// The store, the socket and the pins on the host's paths.
	for _, c := range []struct {
		what, path, host string
		typ              corev1.HostPathType
	}{
		{"store.path", cfg.Store.Path, "/var/lib/loupe/flows", corev1.HostPathDirectoryOrCreate},
		{"control.socket", cfg.Control.Socket, "/run/loupe/loupe.sock", corev1.HostPathDirectoryOrCreate},
		{"pin_dir", cfg.PinDir, "/sys/fs/bpf/loupe", corev1.HostPathDirectory},
	} {
		if host, typ := r.hostPathOf(t, c.path); host != c.host || typ != c.typ {
			t.Errorf("%s %s is the host's %s (%s), want %s (%s)", c.what, c.path, host, typ, c.host, c.typ)
		}
	}
	// Pins under /sys/fs/ in the container would meet the runtimes'
	// default AppArmor profile, which denies writes there.
	if strings.HasPrefix(cfg.PinDir, "/sys/") {
		t.Errorf("pin_dir %s is under /sys in the container", cfg.PinDir)
	}
	if m := mountAt(r.agent, cfg.PinDir); m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("the bpf file system's mount propagation is %v, want HostToContainer", m.MountPropagation)
	}
}

func checkNodeName(t *testing.T, r rendered) {
	t.Helper()
	for _, e := range r.agent.Env {
		if e.Name == "NODE_NAME" {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				t.Errorf("NODE_NAME is %+v, want the downward API's spec.nodeName", e)
			}
			return
		}
	}
	t.Error("no NODE_NAME: the agent would watch every pod of the cluster")
}

// checkResources checks the requests and limits the chart documents
// (values.yaml, from bench/RESULTS.md).
func checkResources(t *testing.T, r rendered) {
	t.Helper()
	res := r.agent.Resources
	for name, want := range map[string]string{"requests.cpu": "100m", "requests.memory": "128Mi", "limits.cpu": "1", "limits.memory": "512Mi"} {
		list, key, _ := strings.Cut(name, ".")
		q := res.Requests
		if list == "limits" {
			q = res.Limits
		}
		got, ok := q[corev1.ResourceName(key)]
		if !ok || got.String() != want {
			t.Errorf("%s %s, want %s", name, got.String(), want)
		}
	}
}

// checkProbes checks that liveness asks /healthz and readiness /readyz of
// the agent's HTTP listener, on the address it listens on.
func checkProbes(t *testing.T, r rendered, host, listen string) {
	t.Helper()
	port := ""
	for _, p := range r.agent.Ports {
		if p.Name == "metrics" {
			port = fmt.Sprint(p.ContainerPort)
		}
	}
	if !strings.HasSuffix(listen, ":"+port) {
		t.Errorf("the listener is %s, the metrics port %s", listen, port)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", r.agent.LivenessProbe, "/healthz"}, {"readiness", r.agent.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Host != host || g.Port.String() != "metrics" {
			t.Errorf("%s probe: GET %s:%s%s, want %q:metrics%s", p.name, g.Host, g.Port.String(), g.Path, host, p.path)
		}
	}
}

// checkRBAC checks that the ClusterRole is exactly what the informers
// need (k8s.PolicyRules), read-only, and bound to the DaemonSet's
// ServiceAccount alone.
func checkRBAC(t *testing.T, r rendered) {
	t.Helper()
	role := find[*rbacv1.ClusterRole](r, release)
	binding := find[*rbacv1.ClusterRoleBinding](r, release)
	sa := find[*corev1.ServiceAccount](r, release)
	if role == nil || binding == nil || sa == nil {
		t.Fatal("no ClusterRole, ClusterRoleBinding or ServiceAccount named " + release)
	}
	type grant struct{ group, resource, verb string }
	flatten := func(rules []rbacv1.PolicyRule) []grant {
		var gs []grant
		for _, r := range rules {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Errorf("rule %+v: non-resource URLs or resource names", r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						gs = append(gs, grant{g, res, v})
					}
				}
			}
		}
		slices.SortFunc(gs, func(a, b grant) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		return gs
	}
	got, want := flatten(role.Rules), flatten(k8s.PolicyRules())
	if !slices.Equal(got, want) {
		t.Errorf("ClusterRole grants %v, want exactly what the informers use (k8s.PolicyRules): %v", got, want)
	}
	for _, g := range got {
		if !slices.Contains([]string{"get", "list", "watch"}, g.verb) || strings.Contains(g.resource, "*") || g.group == "*" {
			t.Errorf("ClusterRole grants %v: not read-only, or a wildcard", g)
		}
	}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}) {
		t.Errorf("binding's role %+v, want the ClusterRole %s", binding.RoleRef, role.Name)
	}
	wantSubject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: namespace}}
	if !slices.Equal(binding.Subjects, wantSubject) || r.daemonSet.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("binding's subjects %+v, pods' service account %q; want %+v", binding.Subjects, r.daemonSet.Spec.Template.Spec.ServiceAccountName, wantSubject)
	}
}

// nonDefaultValues turns on every option: the control API behind a
// Service and its token, the metrics on the node's address with a
// ServiceMonitor, the bpffs init container, exporters, and keys the chart
// owns given by the user (which it must ignore).
const nonDefaultValues = `
image:
  repository: registry.example/loupe
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
control:
  service:
    enabled: true
    tokenSecret: loupe-control-token
metrics:
  expose: true
  serviceMonitor:
    enabled: true
bpffs:
  mount: true
config:
  listen: 0.0.0.0:1
  control: {listen: 0.0.0.0:2, socket: /tmp/elsewhere.sock}
  pin_dir: /tmp/pins
  export:
    - kafka://kafka-0.kafka:9092,kafka-1.kafka:9092/loupe-flows?format=json
    - otlp://otel-collector.observability:4317
    - ipfix+udp://collector.example:4739
  kafka: {compression: lz4, client_id: loupe-node}
  otlp: {compression: gzip}
  ipfix: {observation_domain: 7}
  prometheus: {keys: [dst_port], max_series: 2048}
  cache_active_timeout: 10s
`

// TestChartNonDefault renders the chart with every option on.
func TestChartNonDefault(t *testing.T) {
	r := render(t, nonDefaultValues)
	want := []string{
		"*v1.ClusterRole/loupe", "*v1.ClusterRoleBinding/loupe", "*v1.ConfigMap/loupe", "*v1.DaemonSet/loupe",
		"*v1.Service/loupe-control", "*v1.Service/loupe-metrics", "*v1.ServiceAccount/loupe", "ServiceMonitor/loupe",
	}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("objects %q, want %q", got, want)
	}
	checkAgentLeastPrivilege(t, r)
	checkRBAC(t, r)
	if r.agent.Image != "registry.example/loupe@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("image %s, want the digest", r.agent.Image)
	}

	// The one exception: the init container that mounts the bpf file
	// system, privileged because Bidirectional propagation must be.
	spec := r.daemonSet.Spec.Template.Spec
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the bpffs mount", len(spec.InitContainers))
	}
	ic := spec.InitContainers[0]
	if !slices.Equal(ic.Command, []string{"/usr/local/bin/loupe", "mount-bpffs", "--path", "/bpffs"}) || ic.Image != r.agent.Image {
		t.Errorf("init container runs %q from %s, want loupe mount-bpffs --path /bpffs from the agent's image", ic.Command, ic.Image)
	}
	if len(ic.VolumeMounts) != 1 || ic.VolumeMounts[0].Name != "bpffs" || ic.VolumeMounts[0].MountPath != "/bpffs" ||
		ic.VolumeMounts[0].MountPropagation == nil || *ic.VolumeMounts[0].MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("init container mounts %+v, want the bpffs volume alone on /bpffs, Bidirectional", ic.VolumeMounts)
	}
	if v := r.volume("bpffs"); v == nil || v.HostPath == nil || v.HostPath.Path != "/sys/fs/bpf" {
		t.Errorf("bpffs volume %+v, want the host's /sys/fs/bpf", v)
	}

	cfg := r.agentConfig(t, "10.1.2.3")
	// The listeners on the node's address; the token from the Secret.
	if cfg.Listen != "10.1.2.3:9464" || cfg.Control.Listen != "10.1.2.3:9465" {
		t.Errorf("listen %s, control.listen %s; want the pod's (node's) address, ports 9464 and 9465", cfg.Listen, cfg.Control.Listen)
	}
	checkProbes(t, r, "", cfg.Listen)
	podIP := false
	for _, e := range r.agent.Env {
		if e.Name == "POD_IP" {
			podIP = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}
	}
	if !podIP {
		t.Error("POD_IP is not the downward API's status.podIP")
	}
	tokenMount := mountAt(r.agent, cfg.Control.TokenFile)
	if cfg.Control.TokenFile == "" || tokenMount == nil || !tokenMount.ReadOnly {
		t.Fatalf("control.token_file %q on mount %+v, want a read-only Secret volume", cfg.Control.TokenFile, tokenMount)
	}
	tv := r.volume(tokenMount.Name)
	wantItems := []corev1.KeyToPath{{Key: "token", Path: filepath.Base(cfg.Control.TokenFile)}}
	if tv == nil || tv.Secret == nil || tv.Secret.SecretName != "loupe-control-token" || tv.Secret.DefaultMode == nil || *tv.Secret.DefaultMode != 0o400 ||
		!slices.Equal(tv.Secret.Items, wantItems) {
		t.Errorf("token volume %+v, want Secret loupe-control-token's key token, mode 0400 (the agent refuses a file group or others can read)", tv)
	}
	svc := find[*corev1.Service](r, "loupe-control")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9465 || svc.Spec.Ports[0].TargetPort.String() != "control" {
		t.Errorf("control Service %+v, want headless, port 9465 to the container's control port", svc.Spec)
	}
	for k, v := range svc.Spec.Selector {
		if r.daemonSet.Spec.Template.Labels[k] != v {
			t.Errorf("the control Service selects %s=%s, which the agents' pods do not have", k, v)
		}
	}

	// The user's values reach the agent; the keys the chart owns do not.
	if cfg.Control.Socket != "/run/loupe/loupe.sock" || cfg.PinDir != "/bpffs/loupe" {
		t.Errorf("control.socket %s, pin_dir %s: the chart's own keys were overridden by config", cfg.Control.Socket, cfg.PinDir)
	}
	wantExport := []string{"kafka://kafka-0.kafka:9092,kafka-1.kafka:9092/loupe-flows?format=json", "otlp://otel-collector.observability:4317", "ipfix+udp://collector.example:4739"}
	if !slices.Equal(cfg.Export, wantExport) || cfg.Kafka.Compression != "lz4" || cfg.Kafka.ClientID != "loupe-node" || cfg.OTLP.Compression != "gzip" ||
		cfg.IPFIX.ObservationDomain != 7 || !slices.Equal(cfg.Prometheus.Keys, []string{"dst_port"}) || cfg.Prometheus.MaxSeries != 2048 || cfg.CacheActiveTimeout.String() != "10s" {
		t.Errorf("exporter settings did not reach the agent: export %q kafka %+v otlp %+v ipfix %+v prometheus %+v timeout %s",
			cfg.Export, cfg.Kafka, cfg.OTLP, cfg.IPFIX, cfg.Prometheus, cfg.CacheActiveTimeout)
	}
}

// TestChartRefuses checks that the chart refuses what would leave the
// control API on the network without a token, or a ServiceMonitor that
// cannot scrape.
func TestChartRefuses(t *testing.T) {
	for values, want := range map[string]string{
		"control: {service: {enabled: true}}":                 "control.service.enabled needs control.service.tokenSecret",
		"metrics: {serviceMonitor: {enabled: true}}":          "metrics.serviceMonitor.enabled needs metrics.expose",
		"bpffs: {mount: true, pin: false}":                    "bpffs.mount needs bpffs.pin",
		"serviceAccount: {create: false}":                     "serviceAccount.name is required",
		"control: {service: {enabled: true, tokenSecret: x}}": "",
	} {
		_, err := helmTemplate(t, values)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", values, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", values, err, want)
		}
	}
}

// TestHelmLint runs helm lint --strict with the default values and with
// every option on.
func TestHelmLint(t *testing.T) {
	helm := requireHelm(t)
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, []byte(nonDefaultValues), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"lint", "--strict", chartDir}, {"lint", "--strict", chartDir, "--values", vf}} {
		if out, err := exec.Command(helm, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestManifestsAreRendered: deploy/manifests/ is the chart rendered with
// its defaults, byte for byte (scripts/manifests.sh --check).
func TestManifestsAreRendered(t *testing.T) {
	helm := requireHelm(t)
	cmd := exec.Command("../scripts/manifests.sh", "--check")
	cmd.Env = append(os.Environ(), helmBinEnv+"="+filepath.Dir(helm))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
