package cloud

import (
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxErrorText bounds how much of a cloud's answer goes into an error: an
// API that echoes a request, or a proxy's HTML page, must not fill logs.
const MaxErrorText = 256

// minSecretLength is the shortest value a Redactor hides: shorter ones
// would blank out ordinary words.
const minSecretLength = 6

// Redactor cleans text a cloud sent back before it goes into an error or a
// log: every secret the client holds (credentials, tokens) is replaced,
// control characters are dropped and the text is cut to MaxErrorText. It
// is safe for concurrent use; clients add tokens as they receive them.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string
}

// NewRedactor returns a Redactor hiding the given secrets.
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		r.Add(s)
	}
	return r
}

// Add hides one more secret from now on; values shorter than six bytes are
// ignored.
func (r *Redactor) Add(secret string) {
	if len(secret) < minSecretLength {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.secrets {
		if s == secret {
			return
		}
	}
	r.secrets = append(r.secrets, secret)
	// Longest first, so that a secret containing another is hidden whole.
	for i := len(r.secrets) - 1; i > 0 && len(r.secrets[i]) > len(r.secrets[i-1]); i-- {
		r.secrets[i], r.secrets[i-1] = r.secrets[i-1], r.secrets[i]
	}
}

// Text returns s with the secrets replaced by "[redacted]", control
// characters dropped, and at most MaxErrorText bytes kept.
func (r *Redactor) Text(s string) string {
	r.mu.RLock()
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	r.mu.RUnlock()
	return Truncate(clean(s), MaxErrorText)
}

// clean puts one line of s: new lines and tabs become spaces, other
// control characters and invalid bytes are dropped.
func clean(s string) string {
	return strings.Map(func(c rune) rune {
		switch {
		case c == '\n' || c == '\t':
			return ' '
		case unicode.IsControl(c) || c == utf8.RuneError:
			return -1
		}
		return c
	}, strings.TrimSpace(s))
}

// Truncate cuts s to at most n bytes on a rune boundary, saying how much
// was cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)-cut) + " more bytes)"
}
