package kubeapi_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"loupe/internal/testutil/kubeapi"
)

// TestCluster checks the harness itself: the administrator can write, the
// agent's user can do nothing it was not granted, and the API server
// restarts on its port with what etcd holds.
func TestCluster(t *testing.T) {
	c := kubeapi.Start(t)
	ctx := context.Background()
	c.Objects(t).Namespace("lk8-harness")
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	agent := kubernetes.NewForConfigOrDie(rc)
	if _, err := agent.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("agent listing pods without a role: got %v, want forbidden", err)
	}
	c.RestartAPIServer(t)
	if _, err := c.Client(t).CoreV1().Namespaces().Get(ctx, "lk8-harness", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace after restart: %v", err)
	}
}
