package nodegroup

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// ErrForeignInstall classes a start refused because a cloud holds
// instances of this cluster name that another gpuscaler install ordered
// (see ForeignInstallError).
var ErrForeignInstall = errors.New("another gpuscaler install holds instances of this cluster name")

// ForeignInstallError is a cloud holding instances of this cluster name
// that another gpuscaler install ordered: two installs that share a
// clusterName on one account would take, scale down and delete each
// other's instances.
type ForeignInstallError struct {
	Cloud, ClusterName string
	// Install is this install's ID.
	Install string
	// Others are the other installs' instances, by install ID.
	Others map[string][]string
}

func (e *ForeignInstallError) Error() string {
	ids := slices.Sorted(maps.Keys(e.Others))
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		names := slices.Sorted(slices.Values(e.Others[id]))
		shown := names[:min(3, len(names))]
		more := ""
		if n := len(names) - len(shown); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		parts = append(parts, fmt.Sprintf("install %s (%s%s)", id, strings.Join(shown, ", "), more))
	}
	return fmt.Sprintf("cloud %q holds instances of cluster %q that another gpuscaler ordered: %s; this install is %s. "+
		"Two installs sharing a clusterName on one cloud account take and delete each other's instances: give this cluster "+
		"its own clusterName, or, if that install is gone for good, list its ID under ownership.takeOver",
		e.Cloud, e.ClusterName, strings.Join(parts, "; "), e.Install)
}

func (e *ForeignInstallError) Unwrap() error { return ErrForeignInstall }

// owners tells this install's instances from those another install
// ordered.
type owners struct {
	// install is this install's ID; empty when unknown, and then every
	// instance is taken as this install's, as before install IDs.
	install string
	// takeOver are the IDs of gone installs whose instances are this
	// install's now.
	takeOver map[string]bool
}

func newOwners(install string, takeOver []string) owners {
	o := owners{install: install, takeOver: map[string]bool{}}
	for _, id := range takeOver {
		o.takeOver[id] = true
	}
	return o
}

// foreign reports whether another install ordered in. An instance
// ordered without an install ID (by an earlier version, or a seed
// system) is this install's: the clusterName alone marks it.
func (o owners) foreign(in cloud.Instance) bool {
	return o.install != "" && in.Install != "" && in.Install != o.install && !o.takeOver[in.Install]
}

// split returns the instances of this install and, by install ID, the
// names of the others.
func (o owners) split(insts []cloud.Instance) ([]cloud.Instance, map[string][]string) {
	var others map[string][]string
	own := insts
	for i, in := range insts {
		if !o.foreign(in) {
			if others != nil {
				own = append(own, in)
			}
			continue
		}
		if others == nil {
			others = map[string][]string{}
			own = slices.Clone(insts[:i])
		}
		others[in.Install] = append(others[in.Install], in.Name)
	}
	return own, others
}
