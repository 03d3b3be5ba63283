// Package cloud defines the contract every GPU cloud backend implements: a
// catalog of instance types, the offerings that can be had now, the
// instances this cluster owns, and the two orders, create and delete.
// Backends live in sub-packages (sim, verda, kamatera, scaleway, gcp).
// Nothing in this package talks to a network; it holds only types, error
// classes and provider IDs.
//
// # The contract, in one place
//
// Provider is what every cloud implements. The core (internal/nodegroup)
// calls it from background workers only, never under its lock and never
// on a read path, so a method may take as long as the cloud does; each
// honours its context.
//
//   - InstanceTypes and Offerings are read at start and refreshed in the
//     background; an offering's absence means it cannot be had now.
//   - List returns every instance of this cluster (by the cloud's tags,
//     labels or naming), in any state, each with its group or owner. It
//     is the core's only source of truth: an order whose answer was lost
//     is resolved by a List that started cloud.ListLagger's lag (or the
//     core's ResolveAfter) after it.
//   - Create orders one instance under CreateSpec.Name and returns once
//     the cloud accepted it. Its errors carry a class (errors.go):
//     ErrCapacity (try the next offering), ErrQuota, ErrInvalid,
//     ErrTransient (did not take effect: may be sent again), and
//     ErrOutcomeUnknown (may have taken effect: never sent again before a
//     List says). A backend that made part of an instance and deleted it
//     before failing marks the error ErrRolledBack: nothing is left (gone,
//     not only being deleted), even if the context ended meanwhile.
//   - Delete deletes an instance; one already gone is success. It may
//     return before the instance is gone (List then shows it deleting).
//   - CheckOptions validates a group's cloudOptions at start-up.
//
// Optional interfaces, for what only some clouds have (the core finds
// them by type assertion):
//
//   - RequestLimiter: the client holds the cloud's request budget, so the
//     core adds no limiter (Verda, Kamatera, Scaleway).
//   - Namer: instance names and provider IDs by a seed autoscaler's rules
//     (Kamatera's prefixes).
//   - IDAssigner: provider IDs hold an ID the cloud assigns at create; the
//     core passes CreateSpec.RenderUserData instead of a rendered script
//     (Scaleway, GCP).
//   - ImageChooser: the image an order of a type will use (Verda).
//   - ListLagger: how long a list may leave an accepted order out; only the
//     simulated cloud knows its own, the others get ResolveAfter.
//   - Stopper: instances stopped and started again, billing less while
//     stopped, for standby pools (the simulated cloud, Scaleway, GCP).
//   - Transferer: a stopped instance renamed and re-owned in one write, so
//     a standby pool can hand it to the launch API (the simulated cloud,
//     Scaleway; a GCP MIG member's name is fixed).
//   - GroupDescriber, Advisor, Topology: existing instance groups made node
//     groups, online config advice, and nested locations (GCP).
//
// Every backend runs the conformance suite (internal/nodegroup/conformance) over an
// in-process fake of its cloud's REST API, written from answers the cloud
// was recorded giving.
package cloud
