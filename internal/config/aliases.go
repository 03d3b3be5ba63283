package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// alias is a key of the clouds section renamed so that every cloud says
// the same thing the same way (endpoint, secretFile, project): the old key
// still reads, into the new one, with a note.
type alias struct {
	cloud, old, new string
	from, to        *string
}

// aliases are c's renamed keys.
func aliases(c *Config) []alias {
	var out []alias
	if g := c.Clouds.GCP; g != nil {
		out = append(out, alias{CloudGCP, "credentialsFile", "secretFile", &g.CredentialsFile, &g.SecretFile})
	}
	if s := c.Clouds.Scaleway; s != nil {
		out = append(out,
			alias{CloudScaleway, "projectID", "project", &s.ProjectID, &s.Project},
			alias{CloudScaleway, "apiURL", "endpoint", &s.APIURL, &s.Endpoint},
			alias{CloudScaleway, "secretKeyFile", "secretFile", &s.SecretKeyFile, &s.SecretFile})
	}
	if k := c.Clouds.Kamatera; k != nil {
		out = append(out, alias{CloudKamatera, "baseURL", "endpoint", &k.BaseURL, &k.Endpoint})
	}
	if v := c.Clouds.Verda; v != nil {
		out = append(out,
			alias{CloudVerda, "baseURL", "endpoint", &v.BaseURL, &v.Endpoint},
			alias{CloudVerda, "clientSecretFile", "secretFile", &v.ClientSecretFile, &v.SecretFile})
	}
	return out
}

// migrateAliases moves each old key's value to its new key and notes it
// in c.Deprecated; both keys set to different values is an error naming
// them. Afterwards only the new keys are set, so a config written back
// (config convert) uses them.
func migrateAliases(c *Config) field.ErrorList {
	var errs field.ErrorList
	for _, a := range aliases(c) {
		if *a.from == "" {
			continue
		}
		p := field.NewPath("clouds", a.cloud)
		if *a.to != "" && *a.to != *a.from {
			errs = append(errs, field.Invalid(p.Child(a.old), *a.from, fmt.Sprintf("%s is the old name of %s, which is set to another value: keep %s only", a.old, a.new, a.new)))
			continue
		}
		*a.to, *a.from = *a.from, ""
		c.Deprecated = append(c.Deprecated, fmt.Sprintf("%s is deprecated: use %s (gpuscaler config convert writes it)", p.Child(a.old), p.Child(a.new)))
	}
	return errs
}
