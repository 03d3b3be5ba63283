package nodegroup

import (
	"slices"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// pidStore is a store with a group on a cloud whose aliases are two ID
// forms (Verda's) and one on a cloud whose alias is not.
func pidStore(t *testing.T) (*store, *group, *group) {
	t.Helper()
	s := newStore(&config.Config{NodeGroups: []config.NodeGroup{
		{Name: "v", Cloud: "verda"},
		{Name: "k", Cloud: "kamatera"},
	}}, nil)
	return s, s.groups["v"], s.groups["k"]
}

// listed adds a member to g as a list that shows it would.
func listed(s *store, g *group, in cloud.Instance) *member {
	mem := &member{name: in.Name, g: g, phase: phaseCreated, providerID: in.ProviderID}
	s.setInstance(mem, in)
	s.add(g, mem)
	return mem
}

func find(s *store, pid string) string {
	mem, ok := s.pids.get(pid)
	if !ok {
		return ""
	}
	return mem.name
}

// Aliases that are the cloud's ID forms are found, rendered and forgotten
// like whole ones, without being kept as strings; a scheme the cloud does
// not use does not find the member.
func TestIDFormAliases(t *testing.T) {
	s, v, _ := pidStore(t)
	a := listed(s, v, cloud.Instance{ID: "u-1", Name: "a", ProviderID: "verda://a",
		Aliases: []string{"verda://u-1", "datacrunch://u-1"}, IP: "10.0.0.7"})
	if !a.idForms || a.x != nil {
		t.Fatalf("ID-form aliases kept as strings: idForms=%v extras=%+v", a.idForms, a.x)
	}
	for _, pid := range []string{"verda://a", "verda://u-1", "datacrunch://u-1"} {
		if got := find(s, pid); got != "a" {
			t.Errorf("get(%s) = %q, want a", pid, got)
		}
	}
	for _, pid := range []string{"sim://u-1", "verda://u-2", "u-1", "kamatera://a"} {
		if got := find(s, pid); got != "" {
			t.Errorf("get(%s) = %q, want none", pid, got)
		}
	}
	if got := a.aliases(); !slices.Equal(got, []string{"verda://u-1", "datacrunch://u-1"}) {
		t.Errorf("aliases() = %v", got)
	}
	if got := a.addr(); got != "10.0.0.7" {
		t.Errorf("addr() = %q", got)
	}
	if in := a.instance(); in.IP != "10.0.0.7" || len(in.Aliases) != 2 {
		t.Errorf("instance() = %+v", in)
	}

	// The cloud ID changes (the member now stands for another listed
	// instance): the aliases stay those first reported, as a Node may carry
	// them, kept whole.
	s.setInstance(a, cloud.Instance{ID: "u-9", Name: "a", State: cloud.StateRunning})
	if find(s, "verda://u-1") != "a" || find(s, "datacrunch://u-1") != "a" || find(s, "datacrunch://u-9") != "" || a.idForms {
		t.Errorf("after the ID changed: u-1 finds %q, u-9 finds %q, idForms %v", find(s, "verda://u-1"), find(s, "datacrunch://u-9"), a.idForms)
	}

	s.drop(v, a)
	if len(s.pids.whole)+len(s.pids.byID) != 0 {
		t.Errorf("dropped member still indexed: %v %v", s.pids.whole, s.pids.byID)
	}
}

// Aliases that are not ID forms, or that another member's ID already
// takes, are indexed whole.
func TestOtherAliasesAreKeptWhole(t *testing.T) {
	s, v, k := pidStore(t)
	listed(s, v, cloud.Instance{ID: "same", Name: "a", ProviderID: "verda://a", Aliases: []string{"verda://same"}})
	b := listed(s, k, cloud.Instance{ID: "x1", Name: "b", ProviderID: "kamatera://b", Aliases: []string{"kamatera://old-b"}})
	if b.idForms || !slices.Equal(b.aliases(), []string{"kamatera://old-b"}) || find(s, "kamatera://old-b") != "b" {
		t.Errorf("name-form alias: idForms=%v aliases=%v", b.idForms, b.aliases())
	}
	// Another cloud's instance with the same ID: found under its own
	// scheme, and the first keeps its alias.
	c := listed(s, k, cloud.Instance{ID: "same", Name: "c", ProviderID: "kamatera://c", Aliases: []string{"kamatera://same"}})
	if c.idForms || find(s, "kamatera://same") != "c" || find(s, "verda://same") != "a" {
		t.Errorf("ID taken: idForms=%v, kamatera://same finds %q, verda://same finds %q", c.idForms, find(s, "kamatera://same"), find(s, "verda://same"))
	}
	// An instance of the cloud whose aliases are not the forms its cloud's
	// first instance had: whole.
	d := listed(s, v, cloud.Instance{ID: "u-4", Name: "d", ProviderID: "verda://d", Aliases: []string{"datacrunch://u-4"}})
	if d.idForms || find(s, "datacrunch://u-4") != "d" || find(s, "verda://u-4") != "" {
		t.Errorf("other forms: idForms=%v", d.idForms)
	}
	if got := (&member{}).addr(); got != "" {
		t.Errorf("no address: %q", got)
	}
	d.setAddr("fd00::1")
	if d.addr() != "fd00::1" || d.ip4 != 0 {
		t.Errorf("IPv6 address: %q", d.addr())
	}
	d.setAddr("10.1.2.3")
	if d.addr() != "10.1.2.3" || d.x.ip != "" {
		t.Errorf("IPv4 after IPv6: %q (kept %q)", d.addr(), d.x.ip)
	}
}

// A placeholder provider ID replaced by the one the cloud assigns stays an
// alias, beside the ID forms.
func TestPlaceholderStaysAnAlias(t *testing.T) {
	s, v, _ := pidStore(t)
	mem := &member{name: "a", g: v, phase: phaseCreating, providerID: "verda://a", placeholder: true}
	s.add(v, mem)
	s.setInstance(mem, cloud.Instance{ID: "u-1", Name: "a", Aliases: []string{"verda://u-1"}})
	s.reindex(mem, "verda://zone/u-1")
	for _, pid := range []string{"verda://a", "verda://u-1", "verda://zone/u-1"} {
		if got := find(s, pid); got != "a" {
			t.Errorf("get(%s) = %q, want a", pid, got)
		}
	}
	if got := mem.providerIDs(); !slices.Equal(got, []string{"verda://zone/u-1", "verda://u-1", "verda://a"}) {
		t.Errorf("providerIDs() = %v", got)
	}
	s.drop(v, mem)
	if len(s.pids.whole)+len(s.pids.byID) != 0 {
		t.Errorf("dropped member still indexed: %v %v", s.pids.whole, s.pids.byID)
	}
}
