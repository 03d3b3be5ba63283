package cloud

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
)

// userinfo matches the user[:password]@ part of URLs in a text, parsable
// or not.
var userinfo = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)[^/?#\s]*@`)

// RedactUserinfo hides the user and password of every URL in s: a key
// passed as the user name is a credential too.
func RedactUserinfo(s string) string {
	return userinfo.ReplaceAllString(s, "${1}[redacted]@")
}

// CheckEndpoint accepts the base URL of an API that receives credentials:
// https, or plain http to a loopback address only (a test's fake), so that
// a stray setting cannot send a secret across a network in clear. The URL
// may carry no user or password: credentials have settings of their own.
// Errors show the URL with any password hidden.
func CheckEndpoint(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Host == "":
		return fmt.Errorf("%s: no host", RedactUserinfo(raw))
	case u.User != nil:
		return fmt.Errorf("%s: credentials go in the cloud's credential settings (environment or files), not in the URL", RedactUserinfo(raw))
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && IsLoopbackHost(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return fmt.Errorf("%s: plain http would send credentials in clear; use https (http is accepted for loopback addresses only)", RedactUserinfo(raw))
	default:
		return fmt.Errorf("%s: scheme must be https", RedactUserinfo(raw))
	}
}

// IsLoopbackHost reports whether a host is localhost or a loopback IP.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
