package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// binDir is the folder of test binaries: $GPUSCALER_TESTBINS, or what the
// builder prints (it builds on first use and answers at once afterwards).
func binDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("GPUSCALER_TESTBINS"); d != "" {
		return d
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("GPUSCALER_TESTBINS is unset and the module root is not found: %v", err)
	}
	cmd := exec.Command("go", "run", "./hack/testbins")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build test binaries (go run ./hack/testbins): %v", err)
	}
	return strings.TrimSpace(string(out))
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "testbins")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no hack/testbins above %s", dir)
		}
		dir = parent
	}
}

func (e *Env) startEtcd(ctx context.Context) (string, error) {
	client, err := freePort()
	if err != nil {
		return "", err
	}
	peer, err := freePort()
	if err != nil {
		return "", err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	p, err := e.run("etcd", "etcd",
		"--name=testenv", "--data-dir="+filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testenv="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return "", err
	}
	return clientURL, waitFor(ctx, p, "etcd health", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, clientURL+"/health", "")
	})
}

func (e *Env) startAPIServer(ctx context.Context, etcdURL string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	keyPath, pubPath, err := e.serviceAccountKeys()
	if err != nil {
		return err
	}
	token := randomToken()
	tokens := filepath.Join(e.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	certDir := filepath.Join(e.Dir, "apiserver-certs")
	e.api = apiServer{token: token, host: fmt.Sprintf("https://127.0.0.1:%d", port), args: []string{
		"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir, "--token-auth-file=" + tokens, "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pubPath, "--service-account-signing-key-file=" + keyPath,
		"--service-cluster-ip-range=10.0.0.0/24", "--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true", "--enable-bootstrap-token-auth=true", "--v=1"}}
	if err := e.launchAPIServer(ctx, "kube-apiserver"); err != nil {
		return err
	}
	host, token := e.api.host, e.api.token
	caPEM, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("apiserver serving certificate: %w", err)
	}
	e.Config = &rest.Config{Host: host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, QPS: 200, Burst: 400}
	if e.Client, err = kubernetes.NewForConfig(e.Config); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: caPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	kc.CurrentContext = "testenv"
	return clientcmd.WriteToFile(*kc, e.Kubeconfig)
}

// apiServer is how kube-apiserver is run, to run it again.
type apiServer struct {
	proc        *process
	args        []string
	host, token string
	restarts    int
}

// launchAPIServer runs kube-apiserver (logging as name) and waits until
// it is ready.
func (e *Env) launchAPIServer(ctx context.Context, name string) error {
	p, err := e.run(name, "kube-apiserver", e.api.args...)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.api.proc = p
	e.mu.Unlock()
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness probe of a local test server
	return waitFor(ctx, p, "kube-apiserver /readyz", func(ctx context.Context) error {
		return httpOK(ctx, insecure, e.api.host+"/readyz", e.api.token)
	})
}

// RestartAPIServer stops kube-apiserver, keeps it down for down, and runs
// it again on the same address, certificates and etcd, as a control-plane
// upgrade or crash would: the cluster's objects survive; watches and
// requests in flight fail.
func (e *Env) RestartAPIServer(ctx context.Context, down time.Duration) error {
	e.mu.Lock()
	p := e.api.proc
	e.api.restarts++
	name := fmt.Sprintf("kube-apiserver-%d", e.api.restarts+1)
	e.mu.Unlock()
	p.stop(10 * time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return e.launchAPIServer(ctx, name)
}

// serviceAccountKeys writes the key pair kube-apiserver signs and checks
// service-account tokens with (kube-controller-manager gets the same).
func (e *Env) serviceAccountKeys() (keyPath, pubPath string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyPath, pubPath = filepath.Join(e.Dir, "sa.key"), filepath.Join(e.Dir, "sa.pub")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return "", "", err
	}
	return keyPath, pubPath, os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func (e *Env) startControllerManager(ctx context.Context) error {
	p, err := e.run("kube-controller-manager", "kube-controller-manager",
		"--kubeconfig="+e.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file="+filepath.Join(e.Dir, "sa.key"),
		"--use-service-account-credentials=false", "--controllers=*,-serviceaccount-token",
		"--node-monitor-period=1s", "--v=1")
	if err != nil {
		return err
	}
	// The service-account controller creating "default" shows the
	// controllers run.
	return waitFor(ctx, p, "the default service account", func(ctx context.Context) error {
		_, err := e.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (e *Env) startScheduler(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	p, err := e.run("kube-scheduler", "kube-scheduler",
		"--kubeconfig="+e.Kubeconfig, "--authentication-kubeconfig="+e.Kubeconfig, "--authorization-kubeconfig="+e.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--v=1")
	if err != nil {
		return err
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // local probe
	return waitFor(ctx, p, "kube-scheduler /healthz", func(ctx context.Context) error {
		return httpOK(ctx, insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), "")
	})
}

func (e *Env) startKwok(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + e.Kubeconfig, "--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-ip=10.1.0.1", "--cidr=10.2.0.0/16", "--server-address=127.0.0.1:" + strconv.Itoa(port),
	}
	stages, err := filepath.Glob(filepath.Join(e.bins, "kwok-stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stage files in %s/kwok-stages", e.bins)
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	p, err := e.run("kwok", "kwok", args...)
	if err != nil {
		return err
	}
	return waitFor(ctx, p, "kwok /healthz", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), "")
	})
}

func httpOK(ctx context.Context, c *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Bin returns the path of one of the test binaries (helm, etcd, ...),
// building them on first use; the test fails if it is not among them.
func Bin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(binDir(t), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no %s among the test binaries: %v", name, err)
	}
	return p
}
