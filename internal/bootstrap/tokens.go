package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	tokenapi "k8s.io/cluster-bootstrap/token/api"
	tokenutil "k8s.io/cluster-bootstrap/token/util"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Labels on the bootstrap-token Secrets gpuscaler mints.
const (
	LabelManagedBy = "gpuscaler.dev/managed-by"
	LabelNode      = "gpuscaler.dev/node"
	managedBy      = "gpuscaler"
	tokenNamespace = "kube-system"
)

// mintToken creates a kubeadm bootstrap token for one node, valid for ttl,
// and returns "<id>.<secret>".
func mintToken(ctx context.Context, kube kubernetes.Interface, node string, ttl time.Duration, now time.Time) (string, error) {
	token, err := tokenutil.GenerateBootstrapToken()
	if err != nil {
		return "", fmt.Errorf("bootstrap token for %s: %w", node, err)
	}
	id, secret, _ := strings.Cut(token, ".")
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: tokenutil.BootstrapTokenSecretName(id), Namespace: tokenNamespace,
			Labels: map[string]string{LabelManagedBy: managedBy, LabelNode: node},
		},
		Type: tokenapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			tokenapi.BootstrapTokenDescriptionKey:      "gpuscaler join token for node " + node,
			tokenapi.BootstrapTokenIDKey:               id,
			tokenapi.BootstrapTokenSecretKey:           secret,
			tokenapi.BootstrapTokenExpirationKey:       now.Add(ttl).UTC().Format(time.RFC3339),
			tokenapi.BootstrapTokenUsageAuthentication: "true",
			tokenapi.BootstrapTokenUsageSigningKey:     "true",
			tokenapi.BootstrapTokenExtraGroupsKey:      "system:bootstrappers:kubeadm:default-node-token",
		},
	}
	if _, err := kube.CoreV1().Secrets(tokenNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create bootstrap token for %s: %w", node, err)
	}
	return token, nil
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

// secretToken reads a join token from a Secret key, without the white
// space around it (a Secret made with kubectl --from-file ends in a
// newline), and checks it is a token of method. An error names the
// Secret and the key, never any byte of the value.
func secretToken(ctx context.Context, kube kubernetes.Interface, ref *config.SecretKeyRef, method string) (string, error) {
	s, err := kube.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("join token Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	token := strings.TrimSpace(string(v))
	if !ok || token == "" {
		return "", fmt.Errorf("join token Secret %s/%s has no key %q, or only white space in it", ref.Namespace, ref.Name, ref.Key)
	}
	if err := checkToken(token, method); err != nil {
		return "", fmt.Errorf("join token Secret %s/%s, key %q: %w", ref.Namespace, ref.Name, ref.Key, err)
	}
	return token, nil
}

// checkToken checks a join token's shape for its join method; the error
// says what is wrong without any byte of the token.
func checkToken(token, method string) error {
	if _, err := secret(token); err != nil {
		return err
	}
	if method == config.BootstrapKubeadm && !tokenutil.IsValidBootstrapToken(token) {
		return errNotBootstrapToken
	}
	return nil
}

// errNotBootstrapToken is why a kubeadm join token is refused.
var errNotBootstrapToken = errors.New("not a kubeadm bootstrap token (six and sixteen characters of a-z and 0-9, joined by a dot)")

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
