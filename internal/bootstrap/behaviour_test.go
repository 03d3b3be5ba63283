package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// standIns puts recording stand-ins for the commands a script runs on PATH:
// each appends its name and arguments to calls.log; kubeadm also keeps the
// join config it was given (the script deletes it afterwards).
func standIns(t *testing.T, dir string) (root, calls string, env []string) {
	t.Helper()
	bin, root := filepath.Join(dir, "bin"), filepath.Join(dir, "root")
	calls = filepath.Join(dir, "calls.log")
	for _, d := range []string{bin, filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	record := "#!/bin/bash\necho \"$(basename \"$0\") $*\" >> " + calls + "\n"
	for _, name := range []string{"curl", "k3s", "nvidia-smi", "systemctl", "rmmod"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(record), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kubeadm := record + "if [ \"$1\" = join ]; then cp \"$3\" " + filepath.Join(dir, "join-seen.yaml") + "; fi\n"
	if err := os.WriteFile(filepath.Join(bin, "kubeadm"), []byte(kubeadm), 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin", "GPUSCALER_ROOT="+root)
	return root, calls, env
}

func runScript(t *testing.T, script string, env []string, dir string) {
	t.Helper()
	path := filepath.Join(dir, "bootstrap.sh")
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestK3sScriptJoinsAsTheTemplate(t *testing.T) {
	r, err := New(testConfig(t), Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root, calls, env := standIns(t, dir)
	runScript(t, render(t, r, "k3s-mig"), env, dir)

	unit := read(t, filepath.Join(root, "etc/systemd/system/k3s-agent.service"))
	for _, want := range []string{
		"--server https://10.0.0.1:6443",
		"--kubelet-arg=provider-id=sim://k3s-mig-0123456789",
		"--kubelet-arg=node-labels=gpuscaler.dev/accelerator=h100,gpuscaler.dev/capacity-type=on-demand,gpuscaler.dev/node-group=k3s-mig,",
		"nvidia.com/mig.config=all-1g.10gb",
		"--kubelet-arg=register-with-taints=nvidia.com/gpu=present:NoSchedule",
		"--token-file /etc/rancher/k3s/gpuscaler-token",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	if strings.Contains(unit, k3sToken) {
		t.Error("the join token is on the command line")
	}
	if tok := strings.TrimSpace(read(t, filepath.Join(root, "etc/rancher/k3s/gpuscaler-token"))); tok != k3sToken {
		t.Errorf("token file holds %q", tok)
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/rancher/k3s/gpuscaler-token")); st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v", st.Mode().Perm())
	}
	log := read(t, calls)
	for _, want := range []string{
		"nvidia-smi -i 0 -mig 1", "nvidia-smi mig -i 0 -cgi 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb -C",
		"nvidia-smi -i 1 -mig 1", "nvidia-smi mig -i 1 -cgi", "systemctl enable --now k3s-agent.service",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("no %q in the calls:\n%s", want, log)
		}
	}
	if strings.Contains(log, "curl") {
		t.Error("k3s was present, yet the installer was fetched")
	}
}

func TestKubeadmScriptJoinsAsTheTemplate(t *testing.T) {
	r, err := New(testConfig(t), Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	for _, group := range []string{"kubeadm-plain", "kubeadm-mig"} {
		t.Run(group, func(t *testing.T) {
			dir := t.TempDir()
			root, calls, env := standIns(t, dir)
			runScript(t, render(t, r, group), env, dir)
			args := read(t, filepath.Join(root, "etc/default/kubelet"))
			for _, want := range []string{"--hostname-override=" + group + "-0123456789", "--provider-id=sim://" + group + "-0123456789", "--node-labels=", "gpuscaler.dev/node-group=" + group,
				"--register-with-taints=nvidia.com/gpu=present:NoSchedule"} {
				if !strings.Contains(args, want) {
					t.Errorf("kubelet args lack %q: %s", want, args)
				}
			}
			join := read(t, filepath.Join(dir, "join-seen.yaml"))
			for _, want := range []string{`token: "` + joinToken + `"`, `apiServerEndpoint: "10.0.0.1:6443"`, caHash, `name: "` + group + `-0123456789"`} {
				if !strings.Contains(join, want) {
					t.Errorf("join config lacks %q:\n%s", want, join)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "etc/kubernetes/gpuscaler-join.yaml")); !os.IsNotExist(err) {
				t.Error("the join config (with its token) was left on disk")
			}
			log := read(t, calls)
			if !strings.Contains(log, "kubeadm join --config") || strings.Contains(log, joinToken) {
				t.Errorf("kubeadm calls: %s", log)
			}
			mig := strings.Contains(log, "nvidia-smi mig -i 0 -cgi 1g.10gb,1g.10gb,2g.20gb,3g.40gb -C")
			if mig != (group == "kubeadm-mig") {
				t.Errorf("MIG commands ran: %v, for %s:\n%s", mig, group, log)
			}
		})
	}
}

// withoutK3s is standIns for an image without k3s: curl serves the files
// of release (by the URL's last segment) and records each URL.
func withoutK3s(t *testing.T, dir string, release map[string]string) (root, calls string, env []string) {
	t.Helper()
	root, calls, env = standIns(t, dir)
	bin := filepath.Join(dir, "bin")
	if err := os.Remove(filepath.Join(bin, "k3s")); err != nil {
		t.Fatal(err)
	}
	files := filepath.Join(dir, "release")
	if err := os.MkdirAll(files, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range release {
		if err := os.WriteFile(filepath.Join(files, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	curl := `#!/bin/bash
url=""; out=""
while [ $# -gt 0 ]; do case "$1" in -o) out="$2"; shift 2 ;; --retry) shift 2 ;; -*) shift ;; *) url="$1"; shift ;; esac; done
echo "curl $url" >> ` + calls + `
cp "` + files + `/${url##*/}" "$out"
`
	if err := os.WriteFile(filepath.Join(bin, "curl"), []byte(curl), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmpdir")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	return root, calls, append(env, "TMPDIR="+tmp)
}

// sha256Line is a line of a k3s release's sha256sum file.
func sha256Line(content, name string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:]) + "  " + name + "\n"
}

// A node without k3s installs the server's k3s release, pinned by version
// and checked against the release's sums, from a private temporary folder
// that is gone afterwards; no installer script is fetched or run.
func TestK3sInstallIsPinnedAndChecked(t *testing.T) {
	r, err := New(testConfig(t), Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	script := render(t, r, "k3s-plain")
	if strings.Contains(script, "get.k3s.io") || strings.Contains(script, "/tmp/") {
		t.Errorf("the script fetches an unpinned installer or uses a predictable path:\n%s", script)
	}
	const binary = "k3s agent binary\n"
	dir := t.TempDir()
	root, calls, env := withoutK3s(t, dir, map[string]string{
		"k3s": binary,
		"sha256sum-amd64.txt": sha256Line("airgap", "k3s-airgap-images-amd64.tar.gz") + sha256Line(binary, "k3s") +
			sha256Line("other", "k3s-arm64"),
	})
	runScript(t, script, env, dir)
	base := K3sReleases + "/" + strings.ReplaceAll(serverK3s, "+", "%2B")
	log := read(t, calls)
	for _, want := range []string{"curl " + base + "/k3s\n", "curl " + base + "/sha256sum-amd64.txt\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("no %q in:\n%s", want, log)
		}
	}
	installed := filepath.Join(root, "usr/local/bin/k3s")
	if got := read(t, installed); got != binary {
		t.Errorf("installed %q", got)
	}
	if st, err := os.Stat(installed); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("installed k3s: %v %v", st, err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "tmpdir")); len(left) != 0 {
		t.Errorf("the download folder is left behind: %v", left)
	}
}

// A download that does not match the release's sum, or a release with no
// sum for it, stops the script before anything is installed.
func TestK3sInstallRefusesABadDownload(t *testing.T) {
	r, err := New(testConfig(t), Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	script := render(t, r, "k3s-plain")
	for name, sums := range map[string]string{
		"tampered":  sha256Line("the real binary", "k3s"),
		"no sum":    sha256Line("x", "k3s-arm64"),
		"empty sum": "",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			root, _, env := withoutK3s(t, dir, map[string]string{"k3s": "something else\n", "sha256sum-amd64.txt": sums})
			path := filepath.Join(dir, "bootstrap.sh")
			if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", path)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Fatalf("the script went on:\n%s", out)
			}
			if _, err := os.Stat(filepath.Join(root, "usr/local/bin/k3s")); err == nil {
				t.Error("k3s was installed")
			}
			if _, err := os.Stat(filepath.Join(root, "etc/systemd/system/k3s-agent.service")); err == nil {
				t.Error("the agent unit was written")
			}
		})
	}
}
