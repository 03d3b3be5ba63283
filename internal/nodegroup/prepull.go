package nodegroup

import "time"

// joinedPullsLocked has the serving members of g whose Nodes joined pull
// the group's prePullImages (config.NodeGroup.PrePullImages) while their
// GPUs start: it files each pull to start in out.prePull, and the pulls
// that are done, failed or past prePullTimeout in out.endPull, whose pods
// go. A pull is asked for once a member's Node registered, and only
// within prePullTimeout of that: the Nodes that joined before the process
// watched them (a restart) ran their pods long ago. A member started from
// the standby pool pulled while it warmed. Callers hold the store's lock.
func (y *syncer) joinedPullsLocked(g *group, now time.Time, out *afterLock) {
	images := g.cfg.PrePullImages
	pp, ok := y.nodes.(PrePuller)
	if len(images) == 0 || !ok {
		return
	}
	for _, mem := range g.members {
		if mem.standby != standbyNone || !mem.running() {
			continue
		}
		if x := mem.peek(); x.pulled || !x.startedAt.IsZero() {
			continue
		}
		ids := mem.providerIDs()
		st, joined := y.nodes.Startup(ids...)
		if !joined {
			continue
		}
		p := pp.PrePulled(images, ids...)
		late := now.Sub(st.Registered) > prePullTimeout
		switch {
		case p.Failed != "":
			y.log.Warn("a node could not pull its group's images; its pods pull them", "group", g.cfg.Name, "instance", mem.name, "error", p.Failed)
			y.orderer().events.warn(g.cfg.Name, mem.name, mem.providerID, "PrePullFailed", "node of instance "+mem.name+" could not pull "+p.Failed)
		case p.Done, late:
		default:
			if !p.Started {
				out.prePull = append(out.prePull, prePull{group: g.cfg.Name, images: images, ids: ids})
			}
			continue
		}
		mem.extras().pulled = true
		if p.Started {
			out.endPull = append(out.endPull, ids)
		}
	}
}
