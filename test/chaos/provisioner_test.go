package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// provisionerDelay is the scale-down delay the campaigns' NodeProvisioner
// plays with: five syncs.
const provisionerDelay = 500 * time.Millisecond

// checkScaleDown plays the NodeProvisioner's scale-down over the first
// group once the campaign has settled, as the controller plays it
// (provisioner/scaledown.go): a pool with a warm buffer of one idle node,
// planned (plan.Compute) each sync over the group's Nodes in an order the
// seed shuffles anew each pass, as the informer's cache gives them; a node
// the plan removes is marked unneeded, unmarked when a pass keeps it, and
// deleted once marked for the delay. With every node idle, no node beyond
// what the pool keeps (the buffer, or minSize) may live past the delay and
// two syncs, and no marked node may lose its mark while it stays idle (its
// clock would start again, and the surplus be paid for by chance).
func (c *campaign) checkScaleDown() {
	c.t.Helper()
	ctx := context.Background()
	g := c.cfg.NodeGroups[0]
	keep := max(1, g.MinSize)
	if g.MaxSize <= keep {
		return
	}
	_ = c.mgr.IncreaseSize(ctx, g.Name, min(3, g.MaxSize-keep)) // the caps may refuse: fine
	deadline := time.Now().Add(30 * time.Second)
	for c.disagreement() != "" || c.b.leftovers() != "" {
		if time.Now().After(deadline) {
			c.t.Fatalf("the scale-up before the scale-down check never settled: %s", c.disagreement())
		}
		c.sample()
		time.Sleep(20 * time.Millisecond)
	}
	period := c.cfg.Sync.Period.Duration
	marked := map[string]time.Time{}
	idleSince := time.Now()
	var unmarked []string
	for end := time.Now().Add(provisionerDelay + 2*period + 10*period); time.Now().Before(end); {
		c.sample()
		nodes, pids := c.servingNodes(g.Name)
		if len(nodes) > keep && time.Since(idleSince) > provisionerDelay+2*period+2*period {
			// Two more syncs than the rule for the passes' own spacing.
			c.t.Errorf("group %s keeps %d idle nodes past scaleDownDelay and two syncs, want %d: %v", g.Name, len(nodes), keep, nodes)
			return
		}
		if len(nodes) <= keep {
			return
		}
		p, err := c.plan(g, nodes, marked)
		if err != nil {
			c.t.Fatal(err)
		}
		remove := map[string]bool{}
		for _, n := range p.Remove {
			remove[n] = true
		}
		var doomed []string
		now := time.Now()
		for _, n := range nodes {
			since, ok := marked[n.Name]
			switch {
			case !remove[n.Name] && ok:
				delete(marked, n.Name)
				unmarked = append(unmarked, n.Name)
			case remove[n.Name] && !ok:
				marked[n.Name] = now
			case remove[n.Name] && now.Sub(since) >= provisionerDelay:
				doomed = append(doomed, pids[n.Name])
			}
		}
		if len(unmarked) > 0 {
			c.t.Errorf("group %s: idle nodes %v lost their unneeded mark: their clocks start again", g.Name, unmarked)
			return
		}
		if len(doomed) > 0 {
			slices.Sort(doomed)
			c.deleteNodes(ctx, g.Name, doomed)
		}
		time.Sleep(period)
	}
}

// servingNodes are the group's running members whose Nodes are Ready and
// serve (not a standby pool's), in an order the campaign's seed draws, as
// an informer's cache gives them; pids their provider IDs by name.
func (c *campaign) servingNodes(group string) (out []plan.Node, pids map[string]string) {
	pids = map[string]string{}
	for _, in := range c.members(group) {
		if in.State != nodegroup.StateRunning {
			continue
		}
		st, ok := c.nodes.Startup(append([]string{in.ProviderID}, in.Aliases...)...)
		if !ok || st.Ready.IsZero() || st.Standby || st.Leaving {
			continue
		}
		out = append(out, plan.Node{Name: in.Name, Group: group, GPUs: 1, Removable: true})
		pids[in.Name] = in.ProviderID
	}
	c.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, pids
}

// plan is the controller's plan for a pool of the one group with a warm
// buffer of one node, over the nodes given, those in marked carrying the
// unneeded mark.
func (c *campaign) plan(g config.NodeGroup, nodes []plan.Node, marked map[string]time.Time) (plan.Plan, error) {
	tmpl, err := c.mgr.Template(g.Name)
	if err != nil {
		return plan.Plan{}, fmt.Errorf("template of %s: %w", g.Name, err)
	}
	target, _ := c.mgr.TargetSize(g.Name)
	pool, err := provisioner.Pool(v1alpha1.NodeProvisionerSpec{MinUnutilizedGPUNodes: ptr(int32(1))},
		[]plan.Group{{Name: g.Name, Template: tmpl, Nodes: target, MinSize: g.MinSize, MaxSize: g.MaxSize}})
	if err != nil {
		return plan.Plan{}, err
	}
	for i := range nodes {
		_, nodes[i].Unneeded = marked[nodes[i].Name]
	}
	return plan.Compute(pool, nodes, nil), nil
}
