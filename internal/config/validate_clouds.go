package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Cloud names, as node groups' cloud field takes them.
const (
	CloudSim      = "sim"
	CloudVerda    = "verda"
	CloudKamatera = "kamatera"
	CloudScaleway = "scaleway"
	CloudGCP      = "gcp"
)

// cloudNames are the clouds a config may name.
func cloudNames() []string {
	return []string{CloudSim, CloudVerda, CloudKamatera, CloudScaleway, CloudGCP}
}

// gcpZone is the form of a GCP zone (us-central1-a).
var gcpZone = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)

// gcpRegion is the form of a GCP region (us-central1).
var gcpRegion = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)

// scalewayZone is the form of a Scaleway zone (fr-par-2, nl-ams-1).
var scalewayZone = regexp.MustCompile(`^[a-z]{2}-[a-z]{3}-[0-9]+$`)

// kamateraMaxName is the longest cluster or group name on Kamatera: both
// go into 24-character server tags.
const kamateraMaxName = 15

// providerIDPrefix is the form of clouds.kamatera.providerIDPrefix.
var providerIDPrefix = regexp.MustCompile(`^[a-z][a-z0-9+.-]*://$`)

// simCapacityTypes are the values clouds.sim.capacity[*].capacityType takes.
func simCapacityTypes() []string { return []string{"spot", "on-demand"} }

// Configured lists the clouds with a section in the file.
func (c Clouds) Configured() []string {
	var names []string
	if c.Sim != nil {
		names = append(names, CloudSim)
	}
	if c.Verda != nil {
		names = append(names, CloudVerda)
	}
	if c.Kamatera != nil {
		names = append(names, CloudKamatera)
	}
	if c.Scaleway != nil {
		names = append(names, CloudScaleway)
	}
	if c.GCP != nil {
		names = append(names, CloudGCP)
	}
	return names
}

func validateClouds(p *field.Path, c Clouds) field.ErrorList {
	if len(c.Configured()) == 0 {
		return field.ErrorList{field.Required(p, "configure at least one cloud ("+strings.Join(cloudNames(), ", ")+")")}
	}
	var errs field.ErrorList
	if c.Sim != nil {
		errs = append(errs, validateSim(p.Child(CloudSim), c.Sim)...)
	}
	if c.Verda != nil {
		errs = append(errs, validateVerda(p.Child(CloudVerda), c.Verda)...)
	}
	if c.Kamatera != nil {
		errs = append(errs, validateKamatera(p.Child(CloudKamatera), c.Kamatera)...)
	}
	if c.GCP != nil && c.GCP.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.GCP.Endpoint); err != nil {
			errs = append(errs, field.Invalid(p.Child(CloudGCP, "endpoint"), c.GCP.Endpoint, err.Error()))
		}
	}
	if c.GCP != nil && c.GCP.Zone != "" && !gcpZone.MatchString(c.GCP.Zone) {
		errs = append(errs, field.Invalid(p.Child(CloudGCP, "zone"), c.GCP.Zone, "a GCP zone, such as us-central1-a"))
	}
	if c.GCP != nil {
		for i, ref := range c.GCP.AdoptInstanceGroups {
			if _, _, err := ParseInstanceGroup(ref, c.GCP.Zone); err != nil {
				errs = append(errs, field.Invalid(p.Child(CloudGCP, "adoptInstanceGroups").Index(i), ref, err.Error()))
			}
		}
	}
	if c.Scaleway != nil && c.Scaleway.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.Scaleway.Endpoint); err != nil {
			errs = append(errs, field.Invalid(p.Child(CloudScaleway, "endpoint"), c.Scaleway.Endpoint, err.Error()))
		}
	}
	// The default images of the clouds that have one.
	if c.Scaleway != nil && c.Scaleway.Image != "" {
		errs = append(errs, validateText(p.Child(CloudScaleway, "image"), c.Scaleway.Image)...)
	}
	if c.Kamatera != nil && c.Kamatera.Image != "" {
		errs = append(errs, validateText(p.Child(CloudKamatera, "image"), c.Kamatera.Image)...)
	}
	if c.Verda != nil && c.Verda.Image != "" {
		errs = append(errs, validateText(p.Child(CloudVerda, "image"), c.Verda.Image)...)
	}
	return errs
}

// validateScalewayGroups checks what Scaleway asks of its groups: zones
// as locations, and no spot.
func validateScalewayGroups(c *Config) field.ErrorList {
	var errs field.ErrorList
	for i, g := range c.NodeGroups {
		if g.Cloud != CloudScaleway {
			continue
		}
		p := field.NewPath("nodeGroups").Index(i)
		for j, z := range g.Locations {
			if !scalewayZone.MatchString(z) {
				errs = append(errs, field.Invalid(p.Child("locations").Index(j), z, "a Scaleway zone, such as fr-par-2 or nl-ams-1"))
			}
		}
		if g.CapacityPolicy == PolicySpotOnly {
			errs = append(errs, field.Invalid(p.Child("capacityPolicy"), g.CapacityPolicy, "Scaleway has no spot servers"))
		}
	}
	migs := map[string]int{} // zone/MIG → the group that orders into it
	for i, g := range c.NodeGroups {
		if g.Cloud != CloudGCP {
			continue
		}
		p := field.NewPath("nodeGroups").Index(i)
		if g.Name != "" && (g.Name[0] < 'a' || g.Name[0] > 'z') {
			errs = append(errs, field.Invalid(p.Child("name"), g.Name, "GCP instance names start with the group's name, which must then start with a letter"))
		}
		mig := g.CloudOptions["instanceGroup"]
		if mig == "" {
			mig = g.Name
		}
		for j, z := range g.Locations {
			switch {
			case gcpRegion.MatchString(z):
				// A regional MIG: GCP picks each instance's zone.
				if g.Bootstrap != nil {
					errs = append(errs, field.Invalid(p.Child("locations").Index(j), z,
						"a regional managed instance group picks each instance's zone, so its provider ID is not known before the order; nodes join with the template's startup script (drop bootstrap, or use zones)"))
				}
				if _, ok := g.CloudOptions["instanceTemplate"]; ok {
					errs = append(errs, field.Invalid(p.Child("locations").Index(j), z, "cloudOptions.instanceTemplate creates zonal managed instance groups only; create the regional one yourself"))
				}
			case !gcpZone.MatchString(z):
				errs = append(errs, field.Invalid(p.Child("locations").Index(j), z, "a GCP zone (us-central1-a), or a region (us-central1) for a regional managed instance group"))
			}
			if other, dup := migs[z+"/"+mig]; dup {
				errs = append(errs, field.Duplicate(p.Child("locations").Index(j), fmt.Sprintf("%s: nodeGroups[%d] orders into managed instance group %s there too", z, other, mig)))
			}
			migs[z+"/"+mig] = i
		}
		if g.CapacityPolicy == PolicySpotOnly {
			errs = append(errs, field.Invalid(p.Child("capacityPolicy"), g.CapacityPolicy, "spot managed instance groups are not supported yet"))
		}
		if g.Bootstrap != nil && g.Bootstrap.Delivery != DeliveryServer {
			errs = append(errs, field.Invalid(p.Child("bootstrap", "delivery"), g.Bootstrap.Delivery,
				"a GCP instance keeps its per-instance startup script for as long as it lives: use delivery: server (it then holds only a spent one-time token)"))
		}
	}
	return errs
}

func validateKamatera(p *field.Path, k *KamateraConfig) field.ErrorList {
	var errs field.ErrorList
	if k.Endpoint != "" {
		if err := cloud.CheckEndpoint(k.Endpoint); err != nil {
			errs = append(errs, field.Invalid(p.Child("endpoint"), k.Endpoint, err.Error()))
		}
	}
	if k.ProviderIDPrefix != "" && !providerIDPrefix.MatchString(k.ProviderIDPrefix) {
		errs = append(errs, field.Invalid(p.Child("providerIDPrefix"), k.ProviderIDPrefix, "must be a scheme and ://, e.g. kamatera://"))
	}
	return errs
}

// validateKamateraGroups checks what Kamatera asks of its groups: the
// cluster's and the groups' names fit server tags (at most 15 characters),
// no spot, an image, and startup scripts that hold no secret.
func validateKamateraGroups(c *Config) field.ErrorList {
	if c.Clouds.Kamatera == nil {
		return nil
	}
	var errs field.ErrorList
	if len(c.ClusterName) > kamateraMaxName {
		errs = append(errs, field.Invalid(field.NewPath("clusterName"), c.ClusterName, fmt.Sprintf("at most %d characters with Kamatera: it goes into the k8sca- server tag", kamateraMaxName)))
	}
	for i, g := range c.NodeGroups {
		if g.Cloud != CloudKamatera {
			continue
		}
		p := field.NewPath("nodeGroups").Index(i)
		if len(g.Name) > kamateraMaxName {
			errs = append(errs, field.Invalid(p.Child("name"), g.Name, fmt.Sprintf("at most %d characters on Kamatera: it goes into the k8scang- server tag", kamateraMaxName)))
		}
		if g.CapacityPolicy == PolicySpotOnly {
			errs = append(errs, field.Invalid(p.Child("capacityPolicy"), g.CapacityPolicy, "Kamatera has no spot servers"))
		}
		if f := c.Clouds.Kamatera.FilterNamePrefix; f != "" {
			prefix, path := g.Name, p.Child("name")
			if np := g.CloudOptions["namePrefix"]; np != "" {
				prefix, path = np, p.Child("cloudOptions").Key("namePrefix")
			}
			if !strings.HasPrefix(prefix, f) {
				errs = append(errs, field.Invalid(path, prefix, fmt.Sprintf(
					"server names start with it, and clouds.kamatera.filterNamePrefix (%q) hides every server whose name does not start with that: set a namePrefix that does", f)))
			}
		}
		if g.Bootstrap != nil && g.Bootstrap.Delivery == DeliveryInline {
			errs = append(errs, field.Invalid(p.Child("bootstrap", "delivery"), g.Bootstrap.Delivery,
				"Kamatera's API has no call to remove a server's script after boot, so the join secrets would stay there: use delivery: server (the server gets a one-time stub)"))
		}
		if g.Image == "" && c.Clouds.Kamatera.Image == "" {
			errs = append(errs, field.Required(p.Child("image"), "Kamatera needs an image (or set clouds.kamatera.image)"))
		}
	}
	return errs
}

func validateVerda(p *field.Path, v *VerdaConfig) field.ErrorList {
	var errs field.ErrorList
	if v.Endpoint != "" {
		if err := cloud.CheckEndpoint(v.Endpoint); err != nil {
			errs = append(errs, field.Invalid(p.Child("endpoint"), v.Endpoint, err.Error()))
		}
	}
	switch u := v.StartupScriptFetchURL; {
	case u == "":
	case !isHTTPURL(u):
		errs = append(errs, field.Invalid(p.Child("startupScriptFetchURL"), u, "must be an https URL"))
	case isPlainHTTP(u) && !urlOnLoopback(u):
		// Its answer picks the script every new node runs as root.
		errs = append(errs, field.Invalid(p.Child("startupScriptFetchURL"), u,
			"must be https: its answer picks the startup script every new node runs as root (plain http only on loopback)"))
	}
	return errs
}

func validateSim(p *field.Path, s *SimConfig) field.ErrorList {
	var errs field.ErrorList
	if !slices.Contains(SimCatalogs(), s.Catalog) {
		errs = append(errs, field.NotSupported(p.Child("catalog"), s.Catalog, SimCatalogs()))
	}
	errs = append(errs, uniqueStrings(p.Child("locations"), s.Locations)...)
	if s.DefaultCapacity != nil && *s.DefaultCapacity < 0 {
		errs = append(errs, field.Invalid(p.Child("defaultCapacity"), *s.DefaultCapacity, "must be >= 0"))
	}
	for i, c := range s.Capacity {
		cp := p.Child("capacity").Index(i)
		if c.Location != "" && !slices.Contains(s.Locations, c.Location) {
			errs = append(errs, field.NotSupported(cp.Child("location"), c.Location, s.Locations))
		}
		if c.CapacityType != "" && !slices.Contains(simCapacityTypes(), c.CapacityType) {
			errs = append(errs, field.NotSupported(cp.Child("capacityType"), c.CapacityType, simCapacityTypes()))
		}
		if c.Count < 0 {
			errs = append(errs, field.Invalid(cp.Child("count"), c.Count, "must be >= 0"))
		}
	}
	errs = append(errs, nonNegative(p.Child("bootDelay"), s.BootDelay)...)
	errs = append(errs, p95(p.Child("bootDelayP95"), s.BootDelayP95, s.BootDelay)...)
	errs = append(errs, p95(p.Child("startDelayP95"), s.StartDelayP95, s.StartDelay)...)
	errs = append(errs, nonNegative(p.Child("deleteDelay"), s.DeleteDelay)...)
	errs = append(errs, nonNegative(p.Child("apiLatency"), s.APILatency)...)
	errs = append(errs, fraction(p.Child("faultRate"), s.FaultRate, true)...)
	errs = append(errs, fraction(p.Child("spotReclaimRate"), s.SpotReclaimRate, true)...)
	errs = append(errs, nonNegative(p.Child("gpuReadyDelay"), s.GPUReadyDelay)...)
	errs = append(errs, nonNegative(p.Child("migReadyDelay"), s.MIGReadyDelay)...)
	switch {
	case s.ReadyFlaps < 0:
		errs = append(errs, field.Invalid(p.Child("readyFlaps"), s.ReadyFlaps, "must be >= 0"))
	case s.ReadyFlaps > 0 && (s.GPUReadyDelay == nil || s.GPUReadyDelay.Duration <= 0):
		errs = append(errs, field.Invalid(p.Child("readyFlaps"), s.ReadyFlaps, "flaps happen during gpuReadyDelay, which is not set"))
	}
	if s.GPUFailures < 0 {
		errs = append(errs, field.Invalid(p.Child("gpuFailures"), s.GPUFailures, "must be >= 0"))
	}
	return errs
}

// p95 checks a delay's 95th percentile: at least its median, when both
// are set.
func p95(path *field.Path, p95, median *metav1.Duration) field.ErrorList {
	if p95 == nil {
		return nil
	}
	if median != nil && p95.Duration < median.Duration {
		return field.ErrorList{field.Invalid(path, p95.Duration.String(), "must be at least the median, "+median.Duration.String())}
	}
	return nonNegative(path, p95)
}

// instanceGroupRef is the long form of an instance group's name, with an
// optional API prefix (https://www.googleapis.com/compute/v1/projects/<p>/).
var instanceGroupRef = regexp.MustCompile(`^(?:(?:https://www\.googleapis\.com/compute/v1/)?projects/[^/]+/)?zones/([a-z]+-[a-z]+[0-9]+-[a-z])/(?:instanceGroupManagers|instanceGroups)/([^/]+)$`)

// ParseInstanceGroup reads an existingInstanceGroupNames or
// clouds.gcp.adoptInstanceGroups entry:
// "zones/<zone>/instanceGroupManagers/<name>" (or its URL), or a bare
// name in zone.
func ParseInstanceGroup(ref, zone string) (string, string, error) {
	name := ref
	if m := instanceGroupRef.FindStringSubmatch(ref); m != nil {
		zone, name = m[1], m[2]
	} else if strings.Contains(ref, "/") {
		return "", "", errors.New("not zones/<zone>/instanceGroupManagers/<name> nor a bare name")
	} else if zone == "" {
		return "", "", errors.New("a bare name needs clouds.gcp.zone in gpuscaler's config")
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return "", "", fmt.Errorf("instance group name %q: %s", name, strings.Join(msgs, "; "))
	}
	return zone, name, nil
}
