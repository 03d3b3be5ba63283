// Package configmap keeps forecasts in a ConfigMap: a gzipped JSON
// document per name under binaryData, in one object whose fixed name lets
// RBAC grant get and update on it alone.
package configmap

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// maxStored bounds what the forecasts take in their ConfigMap, below the
// 1 MiB an object may hold in etcd.
const maxStored = 900 << 10

// Store is a forecast.Store in the ConfigMap Name of a namespace's
// ConfigMaps (read from the API server: a cache would watch every
// ConfigMap of the cluster).
type Store struct {
	ConfigMaps corev1client.ConfigMapInterface
	Name       string
}

// Load implements forecast.Store; a ConfigMap not there holds nothing.
func (s *Store) Load(ctx context.Context) (map[string][]byte, error) {
	cm, err := s.ConfigMaps.Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return map[string][]byte{}, nil
		}
		return nil, fmt.Errorf("configmap %s: %w", s.Name, err)
	}
	out := make(map[string][]byte, len(cm.BinaryData))
	for name, b := range cm.BinaryData {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("configmap %s: %s: %w", s.Name, name, err)
		}
		data, err := io.ReadAll(io.LimitReader(zr, 16<<20))
		if err != nil {
			return nil, fmt.Errorf("configmap %s: %s: %w", s.Name, name, err)
		}
		out[name] = data
	}
	return out, nil
}

// Save implements forecast.Store: it creates the ConfigMap or replaces its
// data. Forecasts past maxStored are refused whole, with what they take.
func (s *Store) Save(ctx context.Context, demands map[string][]byte) error {
	data := make(map[string][]byte, len(demands))
	size := 0
	for name, b := range demands {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(b); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		data[name] = buf.Bytes()
		size += buf.Len()
	}
	if size > maxStored {
		return fmt.Errorf("configmap %s: %d forecasts take %d KiB, more than the %d KiB kept", s.Name, len(demands), size>>10, maxStored>>10)
	}
	cm, err := s.ConfigMaps.Get(ctx, s.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = s.ConfigMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: map[string]string{
			"app.kubernetes.io/name": "gpuscaler", "app.kubernetes.io/component": "forecast"}}, BinaryData: data}, metav1.CreateOptions{})
	case err == nil:
		cm.BinaryData = data
		_, err = s.ConfigMaps.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("configmap %s: %w", s.Name, err)
	}
	return nil
}
