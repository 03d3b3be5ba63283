package scaleway

import (
	"errors"
	"fmt"
	"os"

	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Environment variables read, as Scaleway's tools (and seed 004's
// Secret) name them.
const (
	AccessKeyEnv = "SCW_ACCESS_KEY"
	SecretKeyEnv = "SCW_SECRET_KEY"
	ProjectEnv   = "SCW_DEFAULT_PROJECT_ID"
	APIURLEnv    = "SCW_API_URL"
	ConfigEnv    = "SCW_CONFIG_PATH"
	ProfileEnv   = "SCW_PROFILE"
)

// Source says where the credentials are: files, else the environment,
// else a profile of the Scaleway config file. Explicit values
// (ProjectID, APIURL) win over the environment and the profile.
type Source struct {
	AccessKeyFile, SecretKeyFile string
	Profile                      string
	ProjectID, APIURL            string
}

// Credentials reads the API keys, project and API URL. The error never
// holds a key.
func Credentials(getenv func(string) string, src Source) (ClientOptions, error) {
	opts := ClientOptions{ProjectID: src.ProjectID, APIURL: src.APIURL}
	if opts.ProjectID == "" {
		opts.ProjectID = getenv(ProjectEnv)
	}
	if opts.APIURL == "" {
		opts.APIURL = getenv(APIURLEnv)
	}
	var err error
	switch {
	case src.AccessKeyFile != "" || src.SecretKeyFile != "":
		if opts.AccessKey, err = cloud.ReadCredential(getenv, src.AccessKeyFile, []string{AccessKeyEnv}, "clouds.scaleway"); err != nil {
			return ClientOptions{}, fmt.Errorf("scaleway access key: %w", err)
		}
		if opts.SecretKey, err = cloud.ReadCredential(getenv, src.SecretKeyFile, []string{SecretKeyEnv}, "clouds.scaleway"); err != nil {
			return ClientOptions{}, fmt.Errorf("scaleway secret key: %w", err)
		}
	case getenv(AccessKeyEnv) != "" && getenv(SecretKeyEnv) != "" && src.Profile == "":
		opts.AccessKey, opts.SecretKey = getenv(AccessKeyEnv), getenv(SecretKeyEnv)
	default:
		p, where, err := profile(getenv, src.Profile)
		if err != nil {
			return ClientOptions{}, err
		}
		if p.AccessKey == nil || p.SecretKey == nil || *p.AccessKey == "" || *p.SecretKey == "" {
			return ClientOptions{}, fmt.Errorf("scaleway: the profile in %s has no access_key and secret_key", where)
		}
		opts.AccessKey, opts.SecretKey = *p.AccessKey, *p.SecretKey
		if opts.ProjectID == "" && p.DefaultProjectID != nil {
			opts.ProjectID = *p.DefaultProjectID
		}
		if opts.APIURL == "" && p.APIURL != nil {
			opts.APIURL = *p.APIURL
		}
	}
	if opts.ProjectID == "" {
		return ClientOptions{}, fmt.Errorf("scaleway: no project: set clouds.scaleway.projectID or %s", ProjectEnv)
	}
	return opts, nil
}

// profile reads a profile of the Scaleway config file: the named one,
// else SCW_PROFILE, else the file's active one.
func profile(getenv func(string) string, name string) (*scw.Profile, string, error) {
	path := getenv(ConfigEnv)
	if path == "" {
		path = scw.GetConfigPath()
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, path, fmt.Errorf("scaleway: set %s and %s (or name files in clouds.scaleway, or keep a profile in %s)", AccessKeyEnv, SecretKeyEnv, path)
	}
	cfg, err := scw.LoadConfigFromPath(path)
	if err != nil {
		return nil, path, fmt.Errorf("scaleway: config file %s: %w", path, err)
	}
	if name == "" {
		name = getenv(ProfileEnv)
	}
	var p *scw.Profile
	if name != "" {
		p, err = cfg.GetProfile(name)
	} else {
		p, err = cfg.GetActiveProfile()
	}
	if err != nil {
		return nil, path, fmt.Errorf("scaleway: config file %s: %w", path, err)
	}
	return p, path, nil
}
