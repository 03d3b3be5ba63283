package nodeindex

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// On a real API server: Unready names the Nodes of one cloud whose Ready
// condition is False or Unknown, and no other; DeleteUnready deletes such
// a Node with an Event that says why, and leaves one that is Ready again.
func TestUnreadyOnARealCluster(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := New(env.Client, slog.New(slog.DiscardHandler), "")
	go func() { _ = x.Run(ctx) }()
	mk := func(name, cloudName string, ready corev1.ConditionStatus) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "verda://" + name}}
		if cloudName != "" {
			n.Labels = map[string]string{nodegroup.LabelCloud: cloudName}
		}
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ready != "" {
			setStatus(t, ctx, env, name, func(st *corev1.NodeStatus) {
				st.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.Now()}}
			})
		}
	}
	mk("gone", "verda", corev1.ConditionUnknown)   // its kubelet went with the instance
	mk("sick", "verda", corev1.ConditionFalse)     // a kubelet that reports NotReady
	mk("fine", "verda", corev1.ConditionTrue)      // Ready
	mk("fresh", "verda", "")                       // no Ready condition yet
	mk("other", "scaleway", corev1.ConditionFalse) // another cloud's
	mk("theirs", "", corev1.ConditionFalse)        // a Node gpuscaler did not make
	wait(t, ctx, "every Node indexed", func() bool { return len(x.informer.GetStore().List()) == 6 })
	wait(t, ctx, "the statuses seen", func() bool { return len(x.Unready("verda")) == 2 })
	got := x.Unready("verda")
	slices.Sort(got)
	if want := []string{"verda://gone", "verda://sick"}; !slices.Equal(got, want) {
		t.Fatalf("Unready(verda) = %v, want %v", got, want)
	}

	for _, pid := range []string{"verda://fine", "verda://fresh", "verda://nothing"} {
		if deleted, err := x.DeleteUnready(ctx, pid); deleted || err != nil {
			t.Errorf("DeleteUnready(%s) = %v, %v: want nothing deleted", pid, deleted, err)
		}
	}
	// The kubelet of "sick" reports Ready before the delete: it stays,
	// whatever the index saw.
	setStatus(t, ctx, env, "sick", func(st *corev1.NodeStatus) { st.Conditions[0].Status = corev1.ConditionTrue })
	if deleted, err := x.DeleteUnready(ctx, "verda://sick"); deleted || err != nil {
		t.Errorf("DeleteUnready of a Node Ready again = %v, %v", deleted, err)
	}
	if deleted, err := x.DeleteUnready(ctx, "verda://gone"); !deleted || err != nil {
		t.Fatalf("DeleteUnready(verda://gone) = %v, %v", deleted, err)
	}
	for _, name := range []string{"fine", "fresh", "sick", "other", "theirs"} {
		if _, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Node %s: %v", name, err)
		}
	}
	if _, err := env.Client.CoreV1().Nodes().Get(ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the NotReady Node after DeleteUnready: %v", err)
	}
	wait(t, ctx, "the Event that says why", func() bool {
		evs, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=gone"})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Reason == "InstanceGone"
	})
}

// An Event about an instance no Node carries (an order every offering
// refused) goes to the process's pod, naming the group and instance; one
// about an instance with a Node goes to the Node. Before, the first was
// dropped: `kubectl get events` showed nothing of a failed scale-up.
func TestEventsWithoutANodeGoToThePod(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := New(env.Client, slog.New(slog.DiscardHandler), "")
	x.SetFallback(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpuscaler-0", Namespace: "default", UID: "7f6c2a8e-1b1d-4c55-9b0e-2f1f3b6a9c01"}})
	go func() { _ = x.Run(ctx) }()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec: corev1.NodeSpec{ProviderID: "verda://up"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the Node indexed", func() bool { return len(x.informer.GetStore().List()) == 1 })
	x.Event(nodegroup.Event{Type: corev1.EventTypeWarning, Reason: "ScaleUpFailed", Group: "h100", Instance: "h100-x7",
		ProviderID: "verda://h100-x7", Message: "every offering is out of stock"})
	x.Event(nodegroup.Event{Type: corev1.EventTypeNormal, Reason: "GPUsReady", Group: "h100", Instance: "up", ProviderID: "verda://up", Message: "GPUs allocatable"})
	var onPod, onNode bool
	wait(t, ctx, "both Events recorded", func() bool {
		list, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			switch {
			case e.Regarding.Kind == "Pod" && e.Regarding.Name == "gpuscaler-0" && e.Reason == "ScaleUpFailed":
				onPod = strings.Contains(e.Note, "group h100, instance h100-x7: every offering is out of stock")
			case e.Regarding.Kind == "Node" && e.Regarding.Name == "up" && e.Reason == "GPUsReady":
				onNode = true
			}
		}
		return onPod && onNode
	})
}

// A group with an object (a NodeProvisioner's pool, cluster-autoscaler's
// status ConfigMap) has the Events of its instances without a Node on
// it, where `kubectl describe` finds them (the object's UID in the
// reference); a group without one still has them on the pod.
func TestEventsWithoutANodeGoToTheGroupsObject(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cm, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-autoscaler-status"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x := New(env.Client, slog.New(slog.DiscardHandler), "")
	x.SetFallback(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpuscaler-0", Namespace: "default", UID: "7f6c2a8e-1b1d-4c55-9b0e-2f1f3b6a9c01"}})
	x.SetGroupObject(func(group string) *corev1.ObjectReference {
		if group != "h100" {
			return nil
		}
		return &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID}
	})
	go func() { _ = x.Run(ctx) }()
	// Recorded once Run records to the API server: its Nodes listed.
	wait(t, ctx, "the Nodes listed", x.informer.HasSynced)
	x.Event(nodegroup.Event{Type: corev1.EventTypeWarning, Reason: "ScaleUpFailed", Group: "h100", Instance: "h100-x7",
		ProviderID: "verda://h100-x7", Message: "every offering is out of stock"})
	x.Event(nodegroup.Event{Type: corev1.EventTypeWarning, Reason: "CostLimit", Group: "a100", Message: "maxHourlyCost reached"})
	var onMap, onPod bool
	wait(t, ctx, "both Events recorded", func() bool {
		list, err := env.Client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			switch {
			case e.Regarding.Kind == "ConfigMap" && e.Regarding.UID == cm.UID && e.Reason == "ScaleUpFailed":
				onMap = strings.Contains(e.Note, "group h100, instance h100-x7: every offering is out of stock")
			case e.Regarding.Kind == "Pod" && e.Reason == "CostLimit":
				onPod = strings.Contains(e.Note, "group a100: maxHourlyCost reached")
			}
		}
		return onMap && onPod
	})
}
