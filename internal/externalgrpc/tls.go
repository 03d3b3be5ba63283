package externalgrpc

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// TLSFiles name the PEM files of mTLS, with the upstream cloud-config's
// meaning: the server's certificate and key, and the CA that signs client
// certificates. Files are re-read when they change on disk, so rotated
// certificates (cert-manager) are served without a restart.
type TLSFiles struct {
	CertFile   string
	KeyFile    string
	CACertFile string
	// ClientNames, when set, are the identities a client certificate must
	// carry (common name or DNS name) besides the CA's signature.
	ClientNames []string
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool {
	return f.CertFile != "" || f.KeyFile != "" || f.CACertFile != ""
}

func (f TLSFiles) serverConfig() (*tls.Config, error) {
	var missing []string
	for name, v := range map[string]string{"cert": f.CertFile, "key": f.KeyFile, "CA cert": f.CACertFile} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("mTLS needs a cert, key and CA cert file; missing: %s", strings.Join(missing, ", "))
	}
	r := &reloader{files: f}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st, err := r.load()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{st.cert},
				ClientCAs:    st.pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					return checkClientName(cs, f.ClientNames)
				},
			}, nil
		},
	}, nil
}

// ErrClientName is why a client certificate the CA signed is refused: it
// names no identity of TLSFiles.ClientNames.
var ErrClientName = errors.New("client certificate names no allowed client")

// checkClientName accepts the verified client certificate when names is
// empty or it carries one of them as its common name or a DNS name.
func checkClientName(cs tls.ConnectionState, names []string) error {
	if len(names) == 0 {
		return nil
	}
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ErrClientName
	}
	leaf := cs.VerifiedChains[0][0]
	for _, n := range names {
		if leaf.Subject.CommonName == n || slices.Contains(leaf.DNSNames, n) {
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrClientName, leaf.Subject.CommonName)
}

// reloader caches the parsed files and re-reads them when any file's
// modification time or size changes.
type reloader struct {
	files TLSFiles
	mu    sync.Mutex
	stamp string
	state *tlsState
}

type tlsState struct {
	cert tls.Certificate
	pool *x509.CertPool
}

func (r *reloader) load() (*tlsState, error) {
	stamp, err := r.stampNow()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != nil && stamp == r.stamp {
		return r.state, nil
	}
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		if r.state != nil {
			return r.state, nil // mid-rotation: keep serving the last good pair
		}
		return nil, fmt.Errorf("load TLS key pair: %w", err)
	}
	caPEM, err := os.ReadFile(r.files.CACertFile)
	if err != nil {
		return nil, fmt.Errorf("read CA cert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		if r.state != nil {
			return r.state, nil
		}
		return nil, errors.New("CA cert file holds no PEM certificate")
	}
	r.state, r.stamp = &tlsState{cert: cert, pool: pool}, stamp
	return r.state, nil
}

func (r *reloader) stampNow() (string, error) {
	var b strings.Builder
	for _, p := range []string{r.files.CertFile, r.files.KeyFile, r.files.CACertFile} {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("TLS file: %w", err)
		}
		fmt.Fprintf(&b, "%s:%d:%d;", p, st.ModTime().UnixNano(), st.Size())
	}
	return b.String(), nil
}
