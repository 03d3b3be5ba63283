package cloud

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A credential file is bounded, regular and not writable by anyone: a path
// that names /dev/zero, a directory, a huge file or a world-writable file
// fails at once, naming the file and never its content.
func TestReadSecretFileRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "s3cr3t-value\n", 0o400)
	if v, err := ReadCredential(nil, good, nil, "clouds.verda"); err != nil || v != "s3cr3t-value" {
		t.Fatalf("a good file: %q, %v", v, err)
	}
	for name, path := range map[string]string{
		"/dev/zero":      "/dev/zero",
		"a directory":    dir,
		"a huge file":    write("huge", strings.Repeat("s3cr3t-value", MaxSecretFile), 0o400),
		"world-writable": write("open", "s3cr3t-value", 0o666),
	} {
		_, err := ReadCredential(nil, path, nil, "clouds.verda")
		if err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: %v, want an error naming the file and not its content", name, err)
		}
	}
	if why := LoosePermissions(write("readable", "x", 0o644)); !strings.Contains(why, "anyone") {
		t.Errorf("a 0644 file: %q, want it called readable by anyone", why)
	}
	if why := LoosePermissions(good); why != "" {
		t.Errorf("a 0400 file: %q, want nothing", why)
	}
}
