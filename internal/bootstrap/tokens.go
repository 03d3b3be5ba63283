package bootstrap

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
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

// Tokens mints kubeadm bootstrap tokens, one a node, and deletes them by
// name. The Secret of a node's token has a name that follows from the
// node's name (TokenSecretName), so gpuscaler finds every token it minted
// without listing or reading a Secret: its ServiceAccount may create and
// delete Secrets in kube-system, never get or list one, and the chart's
// admission policy refuses any Secret it would create or delete that is
// not a bootstrap token of gpuscaler's. One Tokens lives as long as the
// process, across reloads.
type Tokens struct {
	kube kubernetes.Interface

	mu sync.Mutex
	// expires is when each token this process minted expires, by node.
	expires map[string]time.Time
	// done are the joined nodes whose token was deleted, so a node is
	// deleted for once; pruned to the nodes Reap is given.
	done map[string]bool
}

// NewTokens mints and reaps tokens in kube.
func NewTokens(kube kubernetes.Interface) *Tokens {
	return &Tokens{kube: kube, expires: map[string]time.Time{}, done: map[string]bool{}}
}

// TokenID is the bootstrap token ID of a node: six characters of a-z0-9
// drawn from the SHA-256 of its name. IDs are public (the secret half is
// random); two nodes whose IDs meet share a Secret name, and the later
// mint replaces the earlier token (one in 2.2 billion a pair).
func TokenID(node string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	sum := sha256.Sum256([]byte("gpuscaler bootstrap token " + node))
	id := make([]byte, 6)
	for i := range id {
		id[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(id)
}

// TokenSecretName is the name of the Secret of a node's token.
func TokenSecretName(node string) string {
	return tokenutil.BootstrapTokenSecretName(TokenID(node))
}

// Mint creates the bootstrap token of a node, valid for ttl, and returns
// "<id>.<secret>". A token the node had (an order rendered again after a
// restart) is deleted and replaced.
func (t *Tokens) Mint(ctx context.Context, node string, ttl time.Duration, now time.Time) (string, error) {
	random, err := tokenutil.GenerateBootstrapToken()
	if err != nil {
		return "", fmt.Errorf("bootstrap token for %s: %w", node, err)
	}
	_, secret, _ := strings.Cut(random, ".")
	id := TokenID(node)
	expires := now.Add(ttl)
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
			tokenapi.BootstrapTokenExpirationKey:       expires.UTC().Format(time.RFC3339),
			tokenapi.BootstrapTokenUsageAuthentication: "true",
			tokenapi.BootstrapTokenUsageSigningKey:     "true",
			tokenapi.BootstrapTokenExtraGroupsKey:      kubeadmNodeGroup,
		},
	}
	secrets := t.kube.CoreV1().Secrets(tokenNamespace)
	_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if err = t.deleteSecret(ctx, node); err == nil {
			_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return "", fmt.Errorf("create bootstrap token for %s: %w", node, err)
	}
	t.mu.Lock()
	t.expires[node] = expires
	delete(t.done, node)
	t.mu.Unlock()
	return id + "." + secret, nil
}

// kubeadmNodeGroup is the group kubeadm's node tokens authenticate in,
// which kubeadm's RBAC lets create a node's certificate request.
const kubeadmNodeGroup = "system:bootstrappers:kubeadm:default-node-token"

// Delete deletes the token minted for a node, if there is one.
func (t *Tokens) Delete(ctx context.Context, node string) error {
	if err := t.deleteSecret(ctx, node); err != nil {
		return err
	}
	t.mu.Lock()
	delete(t.expires, node)
	t.mu.Unlock()
	return nil
}

func (t *Tokens) deleteSecret(ctx context.Context, node string) error {
	err := t.kube.CoreV1().Secrets(tokenNamespace).Delete(ctx, TokenSecretName(node), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the bootstrap token of %s: %w", node, err)
	}
	return nil
}

// Reap deletes the tokens of the nodes that joined (joined: the Nodes
// registered within the longest token lifetime, whose tokens may live,
// whichever process minted them) and the expired tokens this process
// minted. It returns how many it deleted, and stops at the first error.
func (t *Tokens) Reap(ctx context.Context, now time.Time, joined []string) (int, error) {
	t.mu.Lock()
	var due []string
	keep := make(map[string]bool, len(joined))
	for _, node := range joined {
		keep[node] = true
		if !t.done[node] {
			due = append(due, node)
		}
	}
	for node, exp := range t.expires {
		if now.After(exp) && !keep[node] {
			due = append(due, node)
		}
	}
	for node := range t.done {
		if !keep[node] {
			delete(t.done, node)
		}
	}
	t.mu.Unlock()
	sort.Strings(due)
	for i, node := range due {
		if err := t.Delete(ctx, node); err != nil {
			return i, err
		}
		t.mu.Lock()
		if keep[node] {
			t.done[node] = true
		}
		t.mu.Unlock()
	}
	return len(due), nil
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
