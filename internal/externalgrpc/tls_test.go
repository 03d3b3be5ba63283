package externalgrpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/serve"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// ca is a throwaway certificate authority.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by the CA.
func (c *ca) issue(t *testing.T, cn string, serial int64, server bool, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"ca-external-grpc-cloud-provider-service"}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = dnsNames
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// staticCore answers NodeGroups for the TLS tests; the wire under test is TLS.
type staticCore struct{ Core }

func (staticCore) Groups() []nodegroup.Info { return []nodegroup.Info{{Name: "g", MaxSize: 1}} }
func (staticCore) Group(string) (nodegroup.Info, bool) {
	return nodegroup.Info{Name: "g", MaxSize: 1}, true
}
func (staticCore) AutoscalingOptions(string) (*config.AutoscalingOptions, bool) {
	return nil, false
}

// serverFiles writes the server's certificate and key, signed by root,
// and root as the client CA, into a fresh folder.
func serverFiles(t *testing.T, root *ca, clientNames ...string) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	files := TLSFiles{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CACertFile: filepath.Join(dir, "ca.crt"),
		ClientNames: clientNames}
	sc, sk := root.issue(t, "server", 2, true)
	write(t, files.CertFile, sc)
	write(t, files.KeyFile, sk)
	write(t, files.CACertFile, root.pem)
	return files
}

// serveMTLS serves the provider with files until the test ends, and
// returns a call of NodeGroups by a client that trusts serverCA and shows
// the given certificate (none when nil).
func serveMTLS(t *testing.T, files TLSFiles) func(serverCA *ca, clientCert, clientKey []byte) error {
	t.Helper()
	dial, _ := serveMTLSWith(t, Options{TLS: files})
	return dial
}

// serveMTLSWith is serveMTLS with more options, and the address served.
func serveMTLSWith(t *testing.T, opts Options) (func(serverCA *ca, clientCert, clientKey []byte) error, string) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := NewServer(inforce.Fixed[Core](staticCore{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	return func(serverCA *ca, clientCert, clientKey []byte) error {
		pool := x509.NewCertPool()
		pool.AddCert(serverCA.cert)
		tc := &tls.Config{RootCAs: pool, ServerName: "ca-external-grpc-cloud-provider-service", MinVersion: tls.VersionTLS12}
		if clientCert != nil {
			pair, err := tls.X509KeyPair(clientCert, clientKey)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer ccancel()
		_, err = pb.NewCloudProviderClient(conn).NodeGroups(cctx, &pb.NodeGroupsRequest{})
		return err
	}, lis.Addr().String()
}

// Connections that never start their handshake push out only each other:
// cluster-autoscaler still gets in behind 200 of them, and every eviction
// and refused handshake is counted.
func TestSilentFloodBeforeTheHandshakeLocksNoOneOut(t *testing.T) {
	root := newCA(t, "gpuscaler-ca")
	reg := prometheus.NewRegistry()
	ev, err := serve.NewEvictions(reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dial, addr := serveMTLSWith(t, Options{TLS: serverFiles(t, root, "cluster-autoscaler"), Registerer: reg, Evictions: ev})
	var silent []net.Conn
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	cc, ck := root.issue(t, "cluster-autoscaler", 3, false)
	if err := dial(root, cc, ck); err != nil {
		t.Fatalf("cluster-autoscaler behind 200 silent connections: %v", err)
	}
	ic, ik := root.issue(t, "intruder", 4, false)
	if err := dial(root, ic, ik); err == nil {
		t.Fatal("a certificate for another name was served")
	}
	if got := counter(t, reg, "gpuscaler_connections_evicted_total", "reason", serve.EvictUnauthenticated); got < 200-MaxUnauthenticated {
		t.Errorf("%v unauthenticated connections counted as evicted, want at least %d", got, 200-MaxUnauthenticated)
	}
	deadline := time.Now().Add(5 * time.Second)
	for counter(t, reg, "gpuscaler_grpc_handshakes_refused_total", "reason", "failed") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the intruder's refused handshake was not counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counter is the value of a counter series of g with the label value.
func counter(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// With clientNames, a certificate the same CA signed for another name is
// refused: a shared issuer does not make every holder cluster-autoscaler.
func TestMTLSPinsTheClientName(t *testing.T) {
	root := newCA(t, "shared-issuer")
	dial := serveMTLS(t, serverFiles(t, root, "cluster-autoscaler"))

	cc, ck := root.issue(t, "cluster-autoscaler", 3, false)
	if err := dial(root, cc, ck); err != nil {
		t.Fatalf("cluster-autoscaler's certificate: %v", err)
	}
	ic, ik := root.issue(t, "someone-with-a-certificate", 4, false)
	if err := dial(root, ic, ik); err == nil {
		t.Fatal("a certificate of the same CA for another name was served")
	}
	sanc, sank := root.issue(t, "cluster-autoscaler-client", 5, false, "cluster-autoscaler")
	if err := dial(root, sanc, sank); err != nil {
		t.Fatalf("a certificate naming cluster-autoscaler as its DNS name: %v", err)
	}
}

func TestMTLS(t *testing.T) {
	root, other := newCA(t, "gpuscaler-ca"), newCA(t, "stranger-ca")
	files := serverFiles(t, root)
	dial := serveMTLS(t, files)

	cc, ck := root.issue(t, "cluster-autoscaler", 3, false)
	if err := dial(root, cc, ck); err != nil {
		t.Fatalf("client with a certificate from the CA: %v", err)
	}
	if err := dial(root, nil, nil); err == nil {
		t.Fatal("client without a certificate was served")
	}
	oc, ok := other.issue(t, "intruder", 4, false)
	if err := dial(root, oc, ok); err == nil {
		t.Fatal("client with a certificate from another CA was served")
	}

	// Rotation: a new CA and server pair on disk are used without a restart.
	rotated := newCA(t, "gpuscaler-ca-2")
	sc2, sk2 := rotated.issue(t, "server", 5, true)
	time.Sleep(10 * time.Millisecond) // a new modification time
	write(t, files.CertFile, sc2)
	write(t, files.KeyFile, sk2)
	write(t, files.CACertFile, rotated.pem)
	cc2, ck2 := rotated.issue(t, "cluster-autoscaler", 6, false)
	if err := dial(rotated, cc2, ck2); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if err := dial(root, cc, ck); err == nil {
		t.Fatal("old CA still trusted after rotation")
	}
}

func TestIncompleteTLS(t *testing.T) {
	_, err := NewServer(inforce.Fixed[Core](staticCore{}), Options{TLS: TLSFiles{CertFile: "a.crt"}})
	if err == nil {
		t.Fatal("incomplete TLS accepted")
	}
	for _, want := range []string{"key", "CA cert"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
