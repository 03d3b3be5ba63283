package bootstrap

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Labels on the bootstrap-token Secrets gpuscaler mints.
const (
	LabelManagedBy = "gpuscaler.dev/managed-by"
	LabelNode      = "gpuscaler.dev/node"
	managedBy      = "gpuscaler"
	tokenNamespace = "kube-system"
)

// tokenAlphabet is kubeadm's token alphabet.
const tokenAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// randomString draws n characters of tokenAlphabet uniformly: a random
// byte past the largest multiple of the alphabet's size is drawn again, so
// no character is likelier than another (a plain b % 36 favours the first
// 4 of them).
func randomString(n int) (string, error) {
	const limit = 256 - 256%len(tokenAlphabet)
	out := make([]byte, 0, n)
	buf := make([]byte, n)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, tokenAlphabet[int(b)%len(tokenAlphabet)])
			}
		}
	}
	return string(out), nil
}

// mintToken creates a kubeadm bootstrap token for one node, valid for ttl,
// and returns "<id>.<secret>".
func mintToken(ctx context.Context, kube kubernetes.Interface, node string, ttl time.Duration, now time.Time) (string, error) {
	id, err := randomString(6)
	if err != nil {
		return "", err
	}
	secret, err := randomString(16)
	if err != nil {
		return "", err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "bootstrap-token-" + id, Namespace: tokenNamespace,
			Labels: map[string]string{LabelManagedBy: managedBy, LabelNode: node},
		},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "gpuscaler join token for node " + node,
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     now.Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              "system:bootstrappers:kubeadm:default-node-token",
		},
	}
	if _, err := kube.CoreV1().Secrets(tokenNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create bootstrap token for %s: %w", node, err)
	}
	return id + "." + secret, nil
}

// deleteTokens deletes the tokens minted for a node.
func deleteTokens(ctx context.Context, kube kubernetes.Interface, node string) error {
	list, err := kube.CoreV1().Secrets(tokenNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: LabelManagedBy + "=" + managedBy + "," + LabelNode + "=" + node,
	})
	if err != nil {
		return err
	}
	for _, s := range list.Items {
		if err := kube.CoreV1().Secrets(tokenNamespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// secretToken reads a join token from a Secret key.
func secretToken(ctx context.Context, kube kubernetes.Interface, ref *config.SecretKeyRef) (string, error) {
	s, err := kube.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("join token Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	if !ok || len(v) == 0 {
		return "", fmt.Errorf("join token Secret %s/%s has no key %q", ref.Namespace, ref.Name, ref.Key)
	}
	return string(v), nil
}

// ReapTokens deletes the minted tokens whose node has registered or that
// have expired. Run it periodically; kube-controller-manager's token
// cleaner would also remove expired ones, but not the used ones.
func ReapTokens(ctx context.Context, kube kubernetes.Interface, now time.Time) (int, error) {
	list, err := kube.CoreV1().Secrets(tokenNamespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy})
	if err != nil {
		return 0, err
	}
	reaped := 0
	for _, s := range list.Items {
		expired := false
		if exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"])); err == nil && now.After(exp) {
			expired = true
		}
		_, err := kube.CoreV1().Nodes().Get(ctx, s.Labels[LabelNode], metav1.GetOptions{})
		registered := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return reaped, err
		}
		if !expired && !registered {
			continue
		}
		if err := kube.CoreV1().Secrets(tokenNamespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return reaped, err
		}
		reaped++
	}
	return reaped, nil
}
