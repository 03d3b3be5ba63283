package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// clouds are the configured cloud accounts and what runs beside them.
type clouds struct {
	providers map[string]cloud.Provider
	// background runs until its context is done (for example the simulated
	// cloud's node registrar).
	background []func(ctx context.Context) error
	// registered reports whether a Node with a provider ID joined the
	// cluster; nil when gpuscaler has no cluster access.
	registered func(providerID string) bool
	// kube reaches the cluster named by the config's kubeconfig; nil without.
	kube kubernetes.Interface
}

// buildClouds builds one Provider per configured cloud.
func buildClouds(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger) (*clouds, error) {
	out := &clouds{providers: map[string]cloud.Provider{}}
	if cfg.Kubeconfig != "" {
		kube, err := kubeClient(cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		out.kube = kube
		out.registered = nodeIndex(ctx, kube, &out.background)
	}
	if s := cfg.Clouds.Sim; s != nil {
		acct, err := sim.New(*s, cfg.ClusterName, sim.Options{})
		if err != nil {
			return nil, fmt.Errorf("clouds.sim: %w", err)
		}
		out.providers[sim.Name] = acct
		if s.Kubeconfig != "" {
			kube, err := kubeClient(s.Kubeconfig)
			if err != nil {
				return nil, fmt.Errorf("clouds.sim.kubeconfig: %w", err)
			}
			reg := sim.NewRegistrar(acct, kube, sim.RegistrarOptions{Kwok: *s.Kwok, Logger: log.With("component", "sim-registrar")})
			out.background = append(out.background, reg.Run)
			if out.registered == nil {
				out.registered = nodeIndex(ctx, kube, &out.background)
			}
		}
	}
	if v := cfg.Clouds.Verda; v != nil {
		id, secret, err := verda.Credentials(getenv, v.ClientIDFile, v.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("clouds.verda: %w", err)
		}
		baseURL := v.BaseURL
		if baseURL == "" {
			baseURL = getenv("VERDA_BASE_URL") // as the Verda autoscaler reads it
		}
		api, err := verda.NewClient(verda.ClientOptions{
			BaseURL: baseURL, ClientID: id, ClientSecret: secret,
			RequestsPerSecond: cfg.Sync.RequestsPerSecond, Logger: log.With("cloud", verda.Name),
		})
		if err != nil {
			return nil, fmt.Errorf("clouds.verda: %w", err)
		}
		var legacy []string
		if v.AdoptLegacyInstances {
			for _, g := range cfg.NodeGroups {
				if g.Cloud == verda.Name {
					legacy = append(legacy, g.Name)
				}
			}
		}
		out.providers[verda.Name] = verda.New(api, verda.Options{
			ClusterName: cfg.ClusterName, Image: v.Image, SSHKeyIDs: v.SSHKeyIDs, LegacyGroups: legacy,
			ScriptFetchURL: v.StartupScriptFetchURL,
			Logger:         log.With("cloud", verda.Name),
		})
	}
	return out, nil
}

// restConfig reads a kubeconfig path, or the pod's service account for
// "in-cluster".
func restConfig(path string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if path == "in-cluster" {
		rc, err = rest.InClusterConfig()
	} else {
		if strings.HasPrefix(path, "~/") {
			home, _ := os.UserHomeDir()
			path = filepath.Join(home, path[2:])
		}
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "gpuscaler"
	return rc, nil
}

// kubeClient builds a clientset from a kubeconfig path or "in-cluster".
func kubeClient(path string) (kubernetes.Interface, error) {
	rc, err := restConfig(path)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// nodeIndex watches Nodes and answers, from memory, whether a provider ID
// has registered. The informer runs as a background task.
func nodeIndex(_ context.Context, kube kubernetes.Interface, background *[]func(context.Context) error) func(string) bool {
	factory := informers.NewSharedInformerFactory(kube, 0)
	inf := factory.Core().V1().Nodes().Informer()
	var mu sync.RWMutex
	pidOf := map[string]string{}  // node name -> provider ID
	nodeOf := map[string]string{} // provider ID -> node name
	forget := func(name string) {
		if pid, ok := pidOf[name]; ok && nodeOf[pid] == name {
			delete(nodeOf, pid)
		}
		delete(pidOf, name)
	}
	set := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			mu.Lock()
			forget(n.Name)
			pidOf[n.Name], nodeOf[n.Spec.ProviderID] = n.Spec.ProviderID, n.Name
			mu.Unlock()
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				mu.Lock()
				forget(n.Name)
				mu.Unlock()
			}
		},
	})
	*background = append(*background, func(ctx context.Context) error {
		factory.Start(ctx.Done())
		cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
		<-ctx.Done()
		factory.Shutdown()
		return nil
	})
	return func(providerID string) bool {
		if !inf.HasSynced() {
			return true // unknown yet: never call an instance leaked on an empty cache
		}
		mu.RLock()
		defer mu.RUnlock()
		_, ok := nodeOf[providerID]
		return ok
	}
}
