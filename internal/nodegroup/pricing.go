package nodegroup

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// NodePrice returns what a node costs between start and end: the price of
// the offering its instance runs on, or, for a node the core has no
// instance for (a template node), the group's cheapest offering, found by
// the node-group label.
func (m *Manager) NodePrice(providerID string, labels map[string]string, start, end time.Time) (float64, error) {
	hours := end.Sub(start).Hours()
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	if mem, ok := s.pids.get(providerID); ok && mem.price > 0 {
		return mem.price * hours, nil
	}
	name := labels[LabelNodeGroup]
	if mem, ok := s.pids.get(providerID); ok {
		name = mem.group()
	}
	g, ok := s.groups[name]
	if !ok {
		return 0, fmt.Errorf("%w: node %q (group label %q)", ErrNotInGroup, providerID, labels[LabelNodeGroup])
	}
	return m.offerings.estimate(g) * hours, nil
}

// PodPrice returns what running the pod costs between start and end: its
// share of the cheapest group node it fits on, where the share is its
// largest fraction of any resource it requests (GPUs included). Groups
// with no offering available now are left out.
func (m *Manager) PodPrice(pod *corev1.Pod, start, end time.Time) (float64, error) {
	requests := podRequests(pod)
	hours := end.Sub(start).Hours()
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	best := math.Inf(1)
	for _, name := range s.order {
		g := s.groups[name]
		if g.itype.Name == "" {
			continue
		}
		capacity, err := m.templater.capacity(g)
		if err != nil {
			continue
		}
		alloc := allocatable(capacity)
		share, fits := 0.0, true
		for res, q := range requests {
			a, ok := alloc[res]
			if !ok || a.IsZero() {
				fits = false
				break
			}
			share = math.Max(share, float64(q.MilliValue())/float64(a.MilliValue()))
		}
		if !fits || share > 1 {
			continue
		}
		if price, ok, _ := m.offerings.groupPrices(g); ok {
			best = math.Min(best, share*price)
		}
	}
	if math.IsInf(best, 1) {
		return 0, fmt.Errorf("pod %s/%s fits no node group", pod.Namespace, pod.Name)
	}
	return best * hours, nil
}

// podRequests sums a pod's container requests, taking the larger of the
// sum and each init container, as the scheduler does.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range pod.Spec.Containers {
		for res, q := range c.Resources.Requests {
			cur := out[res]
			cur.Add(q)
			out[res] = cur
		}
	}
	for _, c := range pod.Spec.InitContainers {
		for res, q := range c.Resources.Requests {
			if cur, ok := out[res]; !ok || q.Cmp(cur) > 0 {
				out[res] = q.DeepCopy()
			}
		}
	}
	for res, q := range pod.Spec.Overhead {
		cur := out[res]
		cur.Add(q)
		out[res] = cur
	}
	for res, q := range out {
		if q.IsZero() {
			delete(out, res)
		}
	}
	return out
}

// GroupPrice returns the hourly price of the next instance of a group: its
// cheapest offering available now; ok is false when none is.
func (m *Manager) GroupPrice(name string) (float64, bool) {
	usable, ok, _ := m.groupPrices(name)
	return usable, ok
}

// CheapestPrice returns the lowest hourly price of any offering a group
// may order, available or not; false when it knows none.
func (m *Manager) CheapestPrice(name string) (float64, bool) {
	_, _, cheapest := m.groupPrices(name)
	return cheapest, cheapest > 0
}

// groupPrices is offerings.groupPrices of the group named name; zeros for
// no such group.
func (m *Manager) groupPrices(name string) (usable float64, ok bool, cheapest float64) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, found := s.groups[name]
	if !found {
		return 0, false, 0
	}
	return m.offerings.groupPrices(g)
}

// GroupSpend returns a group's hourly spend now.
func (m *Manager) GroupSpend(name string) float64 {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[name]
	if !ok {
		return 0
	}
	return m.cost.groupSpend(g)
}
