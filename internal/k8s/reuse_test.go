package k8s_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"loupe/internal/k8s"
	"loupe/internal/testutil/kubeapi"
)

// TestIPReuse gives pod IPs to new pods of other workloads in the three
// ways a cluster does, and checks that a record resolved after the switch
// (an eviction still in flight) names the pod that held the address at the
// record's time, and a record of the new pod the new pod:
//
//   - the old pod is deleted, then its IP goes to a new pod;
//   - a Job's pod completes (its object stays, with its IP in its status)
//     and its IP goes to a new pod;
//   - the new pod gets the IP while the old pod's object is still listed
//     (it is terminating: its sandbox is gone, the kubelet has not yet
//     removed it).
func TestIPReuse(t *testing.T) {
	c := kubeapi.Start(t)
	o := c.Objects(t)
	o.Node(thisNode, nodeAIP)
	o.Namespace("lk8-shop")
	web := o.Workload("ReplicaSet", "lk8-shop", "web-7d9f", o.Workload("Deployment", "lk8-shop", "web", nil))
	db := o.Workload("StatefulSet", "lk8-shop", "db", nil)
	report := o.Workload("Job", "lk8-shop", "report-1", o.Workload("CronJob", "lk8-shop", "report", nil))
	cache := o.Workload("StatefulSet", "lk8-shop", "cache", nil)
	r := startResolver(t, c, k8s.Options{})

	type step struct {
		ip     string
		oldPod kubeapi.Pod
		old    k8s.Names
		reuse  func(old *corev1.Pod) // hands the IP over
		newPod kubeapi.Pod
		new    k8s.Names
	}
	steps := []step{{
		ip:     "10.244.1.20",
		oldPod: kubeapi.Pod{Name: "web-7d9f-aaaa", Owner: web},
		old:    pod("lk8-shop", "web-7d9f-aaaa", "Deployment", "web", "", thisNode),
		reuse: func(old *corev1.Pod) {
			o.DeletePod(old.Namespace, old.Name)
			waitNames(t, r, "10.244.1.20", k8s.Names{Kind: k8s.KindExternal})
		},
		newPod: kubeapi.Pod{Name: "db-0", Owner: db},
		new:    pod("lk8-shop", "db-0", "StatefulSet", "db", "", thisNode),
	}, {
		ip:     "10.244.1.21",
		oldPod: kubeapi.Pod{Name: "report-1-bbbb", Owner: report},
		old:    pod("lk8-shop", "report-1-bbbb", "CronJob", "report", "", thisNode),
		reuse: func(old *corev1.Pod) {
			o.PodStatus(old, kubeapi.Pod{IP: "10.244.1.21", Phase: corev1.PodSucceeded})
			waitNames(t, r, "10.244.1.21", k8s.Names{Kind: k8s.KindExternal})
		},
		newPod: kubeapi.Pod{Name: "web-7d9f-cccc", Owner: web},
		new:    pod("lk8-shop", "web-7d9f-cccc", "Deployment", "web", "", thisNode),
	}, {
		ip:     "10.244.1.22",
		oldPod: kubeapi.Pod{Name: "cache-0", Owner: cache},
		old:    pod("lk8-shop", "cache-0", "StatefulSet", "cache", "", thisNode),
		reuse: func(old *corev1.Pod) {
			// A graceful deletion: the object stays, terminating, with
			// its IP, until a kubelet (there is none) removes it.
			grace := int64(300)
			if err := c.Client(t).CoreV1().Pods(old.Namespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
				t.Fatal(err)
			}
		},
		newPod: kubeapi.Pod{Name: "db-1", Owner: db},
		new:    pod("lk8-shop", "db-1", "StatefulSet", "db", "", thisNode),
	}}
	for _, s := range steps {
		s.oldPod.Namespace, s.oldPod.Node, s.oldPod.IP, s.oldPod.NetworkReady = "lk8-shop", thisNode, s.ip, time.Now()
		old := o.Pod(s.oldPod)
		waitNames(t, r, s.ip, s.old)
		// A record of the old pod, counted now, resolved later.
		oldRecord := time.Now()
		s.reuse(old)
		s.newPod.Namespace, s.newPod.Node, s.newPod.IP, s.newPod.NetworkReady = "lk8-shop", thisNode, s.ip, time.Now()
		o.Pod(s.newPod)
		waitNames(t, r, s.ip, s.new)
		newRecord := time.Now()
		a := addr(t, s.ip)
		if got := r.Resolve(a, oldRecord); got != s.old {
			t.Errorf("%s: a record of %s resolved after %s took the address:\n got  %+v\n want %+v", s.ip, s.oldPod.Name, s.newPod.Name, got, s.old)
		}
		if got := r.Resolve(a, newRecord); got != s.new {
			t.Errorf("%s: a record of %s:\n got  %+v\n want %+v", s.ip, s.newPod.Name, got, s.new)
		}
	}
	// The terminating pod's removal, seen after its IP moved on, changes
	// neither side.
	o.DeletePod("lk8-shop", "cache-0")
	eventually(t, 10*time.Second, func() (bool, string) {
		n := r.Status().Objects["pods"]
		return n == 4, fmt.Sprintf("%d pods watched, want 4 once cache-0 is gone", n)
	})
	if got := r.Resolve(addr(t, "10.244.1.22"), time.Now()); got != steps[2].new {
		t.Errorf("after cache-0's removal: %+v, want %+v", got, steps[2].new)
	}
}
