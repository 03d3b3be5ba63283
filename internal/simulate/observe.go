package simulate

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// observe folds the core's instances into the cluster: a Node for each
// new one (Ready its boot and GPU start-up after its creation), a lost
// Node for each gone, and what the pool holds and costs now. The core
// changes only when it syncs or is asked for something, so a loop that
// did neither since the last observe skips it.
func (r *run) observe() {
	r.observed = true
	seen := map[string]bool{}
	r.heldGPUs, r.spend = 0, 0
	clear(r.failed)
	for _, g := range r.groups {
		tmpl, err := r.core.Template(g)
		if err != nil {
			continue
		}
		gpus := plan.GPUEquivalents(tmpl.Status.Allocatable)
		r.spend += r.core.GroupSpend(g)
		var fresh []nodegroup.Instance
		r.instances[g] = r.instances[g][:0]
		_ = r.core.EachInstance(g, func(in nodegroup.Instance) {
			if in.ErrorCode != "" && in.State != nodegroup.StateRunning {
				r.instances[g] = append(r.instances[g], in)
				if in.State != nodegroup.StateDeleting {
					r.failed[g] = append(r.failed[g], in.ProviderID)
				}
				return // a failed order: nothing is paid for
			}
			r.heldGPUs += gpus
			if in.State == nodegroup.StateDeleting {
				r.instances[g] = append(r.instances[g], in)
				return
			}
			seen[in.Name] = true
			if _, ok := r.cl.nodes[in.Name]; !ok {
				fresh = append(fresh, in)
			}
		})
		slices.Sort(r.failed[g])
		slices.SortFunc(r.instances[g], func(a, b nodegroup.Instance) int { return cmp.Compare(a.Name, b.Name) })
		for _, in := range fresh {
			r.dirty = true
			obj := tmpl.DeepCopy()
			obj.Name, obj.Spec.ProviderID = in.Name, in.ProviderID
			// Ready once it runs (the cloud's draw of its boot, or of its
			// start for one started from standby, which warmed up once
			// already) and its GPUs have started.
			gpuStartup, ordered := r.opts.GPUStartup, in.CreatedAt
			byCount, counted := r.opts.GPUStartupByGPUs[r.gpusOf[g]]
			if counted {
				gpuStartup = byCount
			}
			var images map[string]time.Duration
			if !in.StartedAt.IsZero() {
				ordered = in.StartedAt
				if !counted {
					gpuStartup = r.opts.StandbyGPUStartup
				}
				r.standbyJoins++
				// It pulled its pool's images while it warmed.
				images = map[string]time.Duration{}
				for _, img := range r.prePull[g] {
					images[img] = ordered.Sub(epoch)
				}
			}
			running, ok := r.engine.RunningAt(in.Name)
			if !ok {
				running = in.CreatedAt.Add(r.bootDelay)
			}
			if in.StartedAt.IsZero() && len(r.joinPull[g]) > 0 {
				// It pulls the group's images from its Node's registration,
				// one after the other, while its GPUs start.
				images = map[string]time.Duration{}
				done := running.Sub(epoch)
				for _, img := range r.joinPull[g] {
					done += pullTime(r.imageGB[img], r.opts.PullRate)
					images[img] = done
				}
			}
			if !in.StartedAt.IsZero() && ordered.Sub(epoch) >= r.opts.MeasureFrom {
				r.res.standbyStarts = append(r.res.standbyStarts, running.Sub(ordered)+gpuStartup)
			}
			r.cl.join(&node{
				name: in.Name, group: g, providerID: in.ProviderID, obj: obj, gpus: gpus,
				orderedAt: ordered.Sub(epoch), registeredAt: running.Sub(epoch), readyAt: running.Sub(epoch) + gpuStartup,
				images: images, free: obj.Status.Allocatable.DeepCopy(), emptySince: -1, unneededSince: -1,
			})
		}
	}
	var lost []string
	for name := range r.cl.nodes {
		if !seen[name] {
			lost = append(lost, name)
		}
	}
	slices.Sort(lost) // their pods go back to pending in a repeatable order
	for _, name := range lost {
		if n := r.cl.nodes[name]; n != nil {
			r.dirty = true
			r.res.NodesLost++
			r.res.PodsRequeued += r.cl.lose(n, r.now)
		}
	}
	r.running = slices.DeleteFunc(r.running, func(p *pod) bool { return p.node == nil })
}

// instancesOf answers the planner's question for the core's instances of
// a group from what observe read last: the core has done nothing since
// (observe follows every change the run asks for). Every other instance
// has a Node, made by observe, so it holds only those without one (failed
// or being deleted): the planner passes over instances a Node carries,
// and the run need not copy and sort the pool's every instance each loop.
func (r *run) instancesOf(group string) ([]nodegroup.Instance, error) {
	return r.instances[group], nil
}
