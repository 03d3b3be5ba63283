package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// MTLSFiles are the PEM files of a mutual-TLS pair issued by one test CA.
type MTLSFiles struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// IssueMTLS writes into dir a CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate whose common name is clientName, as
// the chart's cert-manager objects issue them.
func IssueMTLS(dir, clientName string) (MTLSFiles, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return MTLSFiles{}, err
	}
	caTpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuscaler test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		return MTLSFiles{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return MTLSFiles{}, err
	}
	f := MTLSFiles{CA: filepath.Join(dir, "ca.crt")}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return MTLSFiles{}, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string, ips []net.IP, dns []string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: ips, DNSNames: dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "EC PRIVATE KEY", keyDER)
	}
	f.ServerCert, f.ServerKey = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := issue(2, "gpuscaler", x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey,
		[]net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}); err != nil {
		return MTLSFiles{}, fmt.Errorf("server certificate: %w", err)
	}
	f.ClientCert, f.ClientKey = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := issue(3, clientName, x509.ExtKeyUsageClientAuth, f.ClientCert, f.ClientKey, nil, []string{clientName}); err != nil {
		return MTLSFiles{}, fmt.Errorf("client certificate: %w", err)
	}
	return f, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
