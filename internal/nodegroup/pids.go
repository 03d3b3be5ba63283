package nodegroup

import (
	"slices"
	"strings"
	"sync"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// pidIndex finds members by provider ID, canonical or alias. Aliases that
// are their cloud's ID forms ("sim://<id>", "datacrunch://<id>") are not
// kept as strings: such a member is indexed once by its cloud ID, a string
// it holds anyway, and a lookup checks the scheme. Every other provider ID
// is indexed whole.
type pidIndex struct {
	whole map[string]*member
	byID  map[string]*member
}

func newPIDIndex() pidIndex {
	return pidIndex{whole: map[string]*member{}, byID: map[string]*member{}}
}

// get returns the member a provider ID names.
func (x pidIndex) get(pid string) (*member, bool) {
	if mem, ok := x.whole[pid]; ok {
		return mem, true
	}
	scheme, id, ok := strings.Cut(pid, "://")
	if !ok {
		return nil, false
	}
	mem := x.byID[id]
	if mem == nil || !slices.Contains(mem.g.forms.of(mem.cloud()), scheme) {
		return nil, false
	}
	return mem, true
}

// index makes a member findable by all its provider IDs.
func (x pidIndex) index(mem *member) {
	x.whole[mem.providerID] = mem
	for _, pid := range mem.peek().aliases {
		x.whole[pid] = mem
	}
	x.indexID(mem)
}

// indexID indexes a member with ID-form aliases by its cloud ID.
func (x pidIndex) indexID(mem *member) {
	if mem.idForms && mem.id != "" {
		x.byID[mem.id] = mem
	}
}

// unindexID undoes indexID.
func (x pidIndex) unindexID(mem *member) {
	if mem.idForms && x.byID[mem.id] == mem {
		delete(x.byID, mem.id)
	}
}

// unindex forgets every provider ID that leads to the member.
func (x pidIndex) unindex(mem *member) {
	if x.whole[mem.providerID] == mem {
		delete(x.whole, mem.providerID)
	}
	for _, pid := range mem.peek().aliases {
		if x.whole[pid] == mem {
			delete(x.whole, pid)
		}
	}
	x.unindexID(mem)
}

// aliasForms holds, per cloud, the schemes of the ID-form aliases its
// instances carry, in the order the cloud lists them: ["sim"] for
// "sim://<id>", ["verda", "datacrunch"] for Verda's two forms.
type aliasForms struct {
	mu      sync.RWMutex
	schemes map[string][]string
}

// of returns one cloud's schemes; nil before its first instance with
// ID-form aliases.
func (f *aliasForms) of(cloudName string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.schemes[cloudName]
}

// match reports whether aliases are exactly the cloud's ID forms of id,
// learning the forms from the cloud's first instance that has them.
func (f *aliasForms) match(cloudName, id string, aliases []string) bool {
	schemes := make([]string, 0, len(aliases))
	for _, a := range aliases {
		scheme, rest, ok := strings.Cut(a, "://")
		if !ok || rest != id || scheme == "" {
			return false
		}
		schemes = append(schemes, scheme)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	known, ok := f.schemes[cloudName]
	if !ok {
		if f.schemes == nil {
			f.schemes = map[string][]string{}
		}
		f.schemes[cloudName] = schemes
		return true
	}
	return slices.Equal(known, schemes)
}

// render returns the ID-form aliases of one instance of a cloud.
func (f *aliasForms) render(cloudName, id string) []string {
	schemes := f.of(cloudName)
	out := make([]string, len(schemes))
	for i, scheme := range schemes {
		out[i] = cloud.ProviderID(scheme, id)
	}
	return out
}
