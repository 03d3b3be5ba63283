package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one component the environment started.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProcess starts a binary in its own process group with its output in
// a log file. The process is killed if the test binary dies.
func startProcess(name, logPath, bin string, environ []string, args ...string) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(environ) > 0 {
		cmd.Env = append(os.Environ(), environ...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after a grace period.
func (p *process) stop(grace time.Duration) {
	if ok, _ := p.exited(); ok {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything the component forked into its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// tail returns the last n lines of a log file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		lines = append(lines, "(log read error: "+err.Error()+")")
	}
	return strings.Join(lines, "\n")
}

// GPUScaler returns the gpuscaler binary for test packages' TestMain:
// $GPUSCALER_BIN, which `make test` builds before any test binary runs, or
// else (a package tested on its own with go test) one built into dir now.
// Either way it is built once, before any test starts its clock, and as the
// image ships it (static, stripped), so that what the tests and benchmarks
// measure is what runs.
func GPUScaler(dir string) (string, error) {
	if bin := os.Getenv("GPUSCALER_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("GPUSCALER_BIN: %w", err)
		}
		return bin, nil
	}
	bin := filepath.Join(dir, "gpuscaler")
	cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", bin, "github.com/gpuscaler/gpuscaler/cmd/gpuscaler")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build gpuscaler: %w\n%s", err, out)
	}
	return bin, nil
}
