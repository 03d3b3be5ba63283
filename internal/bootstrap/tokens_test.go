package bootstrap

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	tokenutil "k8s.io/cluster-bootstrap/token/util"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestMintedTokensOnARealAPIServer mints per-node kubeadm bootstrap tokens
// on a real kube-apiserver, proves one authenticates as a bootstrapper, and
// checks they are deleted once their node registers or its order fails.
func TestMintedTokensOnARealAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := testConfig(t)
	b := cfg.NodeGroups[2].Bootstrap
	b.TokenSecretRef, b.MintToken = nil, true
	var logs bytes.Buffer
	tokens := NewTokens(env.Client)
	r, err := New(cfg, Options{Kube: env.Client, Tokens: tokens, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	script, err := r.UserData(ctx, spec("kubeadm-plain"))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := env.Client.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: LabelNode + "=kubeadm-plain-0123456789"})
	if err != nil || len(secrets.Items) != 1 {
		t.Fatalf("minted secrets: %v, %v", secrets, err)
	}
	s := secrets.Items[0]
	if s.Name != TokenSecretName("kubeadm-plain-0123456789") {
		t.Fatalf("the token's Secret is %s, want the name that follows from the node's, %s", s.Name, TokenSecretName("kubeadm-plain-0123456789"))
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
	if s.Type != corev1.SecretTypeBootstrapToken || err != nil || time.Until(exp) > time.Hour || time.Until(exp) < 55*time.Minute {
		t.Fatalf("token secret %s type %s expiration %s", s.Name, s.Type, s.Data["expiration"])
	}
	token := string(s.Data["token-id"]) + "." + string(s.Data["token-secret"])
	if !strings.Contains(script, `token: "`+token+`"`) {
		t.Fatal("the script does not carry the minted token")
	}
	// The token is a real credential: the API server authenticates it.
	bootCfg := rest.CopyConfig(env.Config)
	bootCfg.BearerToken = token
	bootClient, err := kubernetes.NewForConfig(bootCfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := bootClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the minted token does not authenticate: %v", err)
	}
	if u := review.Status.UserInfo.Username; u != "system:bootstrap:"+string(s.Data["token-id"]) {
		t.Fatalf("authenticated as %q", u)
	}

	// Not registered yet: the reaper keeps it.
	if n, err := tokens.Reap(ctx, time.Now(), nil); err != nil || n != 0 {
		t.Fatalf("reaped %d, %v before registration", n, err)
	}
	// Registered: the reaper deletes it, by name, once; a process that
	// restarted (a Tokens of its own) deletes it too.
	joined := []string{"kubeadm-plain-0123456789"}
	if n, err := NewTokens(env.Client).Reap(ctx, time.Now(), joined); err != nil || n != 1 {
		t.Fatalf("reaped %d, %v after registration, by a restarted process", n, err)
	}
	if _, err := env.Client.CoreV1().Secrets("kube-system").Get(ctx, s.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the joined node's token is still there: %v", err)
	}
	if n, err := tokens.Reap(ctx, time.Now(), joined); err != nil || n != 1 {
		t.Fatalf("reaped %d, %v after registration", n, err)
	}
	if n, err := tokens.Reap(ctx, time.Now(), joined); err != nil || n != 0 {
		t.Fatalf("reaped %d, %v a second time", n, err)
	}
	// An order rendered again (after a restart) replaces its node's token.
	again := spec("kubeadm-plain")
	again.Name = "kubeadm-plain-eeeeeeeeee"
	for range 2 {
		if _, err := NewTokens(env.Client).Mint(ctx, again.Name, time.Hour, time.Now()); err != nil {
			t.Fatalf("minting a node's token again: %v", err)
		}
	}
	if err := tokens.Delete(ctx, again.Name); err != nil {
		t.Fatal(err)
	}

	// A failed order releases its token at once.
	other := spec("kubeadm-plain")
	other.Name = "kubeadm-plain-ffffffffff"
	if _, err := r.UserData(ctx, other); err != nil {
		t.Fatal(err)
	}
	r.Release(ctx, other.Name)
	left, _ := env.Client.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=gpuscaler"})
	if len(left.Items) != 0 {
		t.Fatalf("%d tokens left", len(left.Items))
	}
	// An expired token goes even if its node never came.
	if _, err := r.UserData(ctx, other); err != nil {
		t.Fatal(err)
	}
	if n, err := tokens.Reap(ctx, time.Now().Add(2*time.Hour), nil); err != nil || n != 1 {
		t.Fatalf("reaped %d, %v past expiry", n, err)
	}
	if strings.Contains(logs.String(), string(s.Data["token-secret"])) {
		t.Fatal("a token secret reached the logs")
	}
}

// Token characters are drawn uniformly (cluster-bootstrap's generator, on
// which the tokens' strength rests): over 220,000 draws every character of
// the alphabet comes up within 5 % of its fair share (a % 36 draw gives the
// first four about 14 % more).
func TestTokenCharactersAreUniform(t *testing.T) {
	counts := map[rune]int{}
	for range 10000 {
		s, err := tokenutil.GenerateBootstrapToken()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range strings.Replace(s, ".", "", 1) {
			counts[r]++
		}
	}
	fair := 10000.0 * 22 / 36
	for _, r := range "abcdefghijklmnopqrstuvwxyz0123456789" {
		if d := float64(counts[r])/fair - 1; d > 0.05 || d < -0.05 {
			t.Errorf("%q drawn %d times, fair share %.0f", r, counts[r], fair)
		}
	}
}

// A renderer whose groups only read a tokenSecretRef makes no call on
// kube-system's Secrets when an order is released: it has no token to
// delete, and the chart grants such a config no list there.
func TestReleaseWithoutMintingListsNoSecrets(t *testing.T) {
	kube := secrets() // testConfig's groups all name a tokenSecretRef
	r, err := New(testConfig(t), Options{Kube: kube})
	if err != nil {
		t.Fatal(err)
	}
	render(t, r, "k3s-plain")
	kube.ClearActions()
	r.Release(context.Background(), spec("k3s-plain").Name)
	for _, a := range kube.Actions() {
		t.Errorf("released with a call on the cluster: %s %s", a.GetVerb(), a.GetResource().Resource)
	}
}
