package deploy

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"loupe/internal/k8s"
	"loupe/internal/testutil/kubeapi"
)

// createAll creates the rendered objects a real API server knows (the
// ServiceMonitor's CRD is not installed), through its validation and
// admission; dryRun checks them without storing them (under other names,
// since those of the stored objects are taken).
func createAll(t *testing.T, cs kubernetes.Interface, r rendered, dryRun bool) {
	t.Helper()
	ctx := context.Background()
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range r.objects {
		if dryRun {
			// Beside the stored objects of the same names.
			m := obj.(metav1.Object)
			m.SetName(m.GetName() + "-dry-run")
		}
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
		case *corev1.ConfigMap:
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
		case *corev1.Service:
			_, err = cs.CoreV1().Services(o.Namespace).Create(ctx, o, opts)
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, opts)
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
		default:
			t.Fatalf("no create for %T", obj)
		}
		if err != nil {
			t.Fatalf("the API server refuses %T %s (dry run %v): %v", obj, obj.(metav1.Object).GetName(), dryRun, err)
		}
	}
}

// TestChartOnAPIServer hands the rendered objects to a real kube-apiserver
// (scripts/peers/kube.sh), which validates what no linter does (for one,
// that only a privileged container may propagate mounts both ways), then
// asks its authorizer what the agent's ServiceAccount may do: exactly the
// informers' reads, and nothing else.
func TestChartOnAPIServer(t *testing.T) {
	defaults := render(t, "")
	everything := render(t, nonDefaultValues)
	c := kubeapi.Start(t)
	cs := c.Client(t)
	c.Objects(t).Namespace(namespace)
	createAll(t, cs, defaults, false)
	createAll(t, cs, everything, true)

	sa := find[*corev1.ServiceAccount](defaults, release)
	user := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, sa.Name)
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	allowed := func(group, resource, verb string) bool {
		t.Helper()
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &authzv1.ResourceAttributes{
				Group: group, Resource: resource, Verb: verb,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	for _, rule := range k8s.PolicyRules() {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					if !allowed(g, res, v) {
						t.Errorf("%s may not %s %s.%s, which the informers need", user, v, res, g)
					}
				}
			}
		}
	}
	for _, deny := range []struct{ group, resource, verb string }{
		{"", "secrets", "list"}, {"", "secrets", "get"}, {"", "configmaps", "list"},
		{"", "pods", "create"}, {"", "pods", "delete"}, {"", "pods", "update"}, {"", "pods/exec", "create"},
		{"", "nodes", "update"}, {"", "services", "patch"},
		{"apps", "deployments", "list"}, {"apps", "daemonsets", "update"},
		{"rbac.authorization.k8s.io", "clusterroles", "list"},
	} {
		if allowed(deny.group, deny.resource, deny.verb) {
			t.Errorf("%s may %s %s.%s: more than the informers need", user, deny.verb, deny.resource, deny.group)
		}
	}

	// What admission made of the DaemonSet: the agent's container as
	// rendered, with nothing added by the server.
	ds, err := cs.AppsV1().DaemonSets(namespace).Get(context.Background(), release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := rendered{objects: []runtime.Object{ds}, daemonSet: ds, agent: ds.Spec.Template.Spec.Containers[0]}
	checkAgentLeastPrivilege(t, stored)
}
