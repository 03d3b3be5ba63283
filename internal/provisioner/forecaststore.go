package provisioner

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxStored bounds what the forecasts take in their ConfigMap, below the
// 1 MiB an object may hold in etcd.
const maxStored = 900 << 10

// ConfigMapStore keeps the pools' forecasts in one ConfigMap of the
// process's namespace: a pool's forecast.Demand, gzipped JSON, under its
// name in binaryData. One fixed name lets RBAC grant get and update on
// that ConfigMap alone.
type ConfigMapStore struct {
	// Reader reads the ConfigMap from the API server (uncached: a cache
	// would watch every ConfigMap of the cluster); Writer creates and
	// updates it.
	Reader          client.Reader
	Writer          client.Writer
	Namespace, Name string
}

// Load implements ForecastStore; a ConfigMap not there holds nothing.
func (s *ConfigMapStore) Load(ctx context.Context) (map[string][]byte, error) {
	var cm corev1.ConfigMap
	if err := s.Reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return map[string][]byte{}, nil
		}
		return nil, fmt.Errorf("configmap %s/%s: %w", s.Namespace, s.Name, err)
	}
	out := make(map[string][]byte, len(cm.BinaryData))
	for pool, b := range cm.BinaryData {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("configmap %s/%s: pool %s: %w", s.Namespace, s.Name, pool, err)
		}
		data, err := io.ReadAll(io.LimitReader(zr, 16<<20))
		if err != nil {
			return nil, fmt.Errorf("configmap %s/%s: pool %s: %w", s.Namespace, s.Name, pool, err)
		}
		out[pool] = data
	}
	return out, nil
}

// Save implements ForecastStore: it creates the ConfigMap or replaces its
// data. Forecasts past maxStored are refused whole, with what they take.
func (s *ConfigMapStore) Save(ctx context.Context, pools map[string][]byte) error {
	data := make(map[string][]byte, len(pools))
	size := 0
	for pool, b := range pools {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(b); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		data[pool] = buf.Bytes()
		size += buf.Len()
	}
	if size > maxStored {
		return fmt.Errorf("configmap %s/%s: the forecasts of %d pools take %d KiB, more than the %d KiB kept", s.Namespace, s.Name, len(pools), size>>10, maxStored>>10)
	}
	var cm corev1.ConfigMap
	err := s.Reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: map[string]string{
			"app.kubernetes.io/name": "gpuscaler", "app.kubernetes.io/component": "forecast"}}, BinaryData: data}
		err = s.Writer.Create(ctx, &cm)
	case err == nil:
		cm.BinaryData = data
		err = s.Writer.Update(ctx, &cm)
	}
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}
