package cloud

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// MaxSecretFile bounds a file that holds a credential or a key: a key is
// bytes to kilobytes (a GCP service-account key about 2 KiB), and a path
// that names /dev/zero or a log must fail at once.
const MaxSecretFile = 64 << 10

// ReadSecretFile reads a file that holds a credential or a key: a regular
// file of at most MaxSecretFile bytes that no one but its owner and group
// may write. The error names the file, never its content.
func ReadSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	switch {
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	case st.Mode().Perm()&0o002 != 0:
		return nil, fmt.Errorf("%s is writable by anyone (mode %04o): whoever can write it chooses the credential", path, st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxSecretFile {
		return nil, fmt.Errorf("%s is larger than %d KiB; not a credential", path, MaxSecretFile>>10)
	}
	return data, nil
}

// LoosePermissions says why a secret file is readable beyond the process,
// or "" when it is not: readable by anyone, or by a group the process is
// not of (a Kubernetes Secret volume is 0644 unless its defaultMode says
// otherwise; the chart mounts 0440 with gpuscaler's own group).
func LoosePermissions(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	perm := st.Mode().Perm()
	if perm&0o004 != 0 {
		return fmt.Sprintf("readable by anyone (mode %04o)", perm)
	}
	if perm&0o040 != 0 {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && !inGroup(int(sys.Gid)) {
			return fmt.Sprintf("readable by group %d, which gpuscaler is not of (mode %04o)", sys.Gid, perm)
		}
	}
	return ""
}

func inGroup(gid int) bool {
	if gid == os.Getgid() || gid == os.Getegid() {
		return true
	}
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if g == gid {
			return true
		}
	}
	return false
}

// ReadCredential reads one API credential from file when it is named, else
// from the first of envs that getenv finds set. The value is trimmed; the
// error names where it looked (section is the config section that can
// name a file, e.g. "clouds.verda") and never holds the value.
func ReadCredential(getenv func(string) string, file string, envs []string, section string) (string, error) {
	if file != "" {
		b, err := ReadSecretFile(file)
		if err != nil {
			return "", err
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%s is empty", file)
	}
	for _, e := range envs {
		if v := strings.TrimSpace(getenv(e)); v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("set %s (or name a file in %s)", strings.Join(envs, " or "), section)
}
