package natstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Proc is a service binary running as its own process against a test's
// server, for the tests that scale a service out or kill a replica.
type Proc struct {
	Name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

// StartProc runs binary (from Binary) with a config file holding yaml and
// env added to the test's environment (NATS_URL=…), its output in a log
// file. It dies with the test process; when the test ends it is stopped
// with SIGTERM (SIGKILL after 30 s), and the tail of its log is printed if
// the test failed.
func StartProc(tb testing.TB, name, binary, yaml string, env ...string) *Proc {
	tb.Helper()
	dir := tb.TempDir()
	cfgPath := filepath.Join(dir, "tenaz.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	p := &Proc{Name: name, cmd: exec.Command(binary, "--config", cfgPath), logPath: filepath.Join(dir, "log"), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(p.logPath)
	if err != nil {
		tb.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// A test binary that dies (a timeout's panic) takes its replicas along.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		tb.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if tb.Failed() {
			log := p.Log()
			if len(log) > 8000 {
				log = log[len(log)-8000:]
			}
			tb.Logf("%s (pid %d) log:\n%s", name, p.Pid(), log)
		}
	})
	return p
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill kills the process with SIGKILL, as a crash or an OOM kill would,
// and waits until it is gone.
func (p *Proc) Kill(tb testing.TB) {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	<-p.done
}

// Signal sends sig to the process: SIGSTOP and SIGCONT stall it and
// wake it, as a long pause of the machine or the runtime would.
func (p *Proc) Signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
}

// Log is what the process has written so far.
func (p *Proc) Log() []byte {
	b, _ := os.ReadFile(p.logPath)
	return b
}
