package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process that the run keeps alive: started again after
// every kill (by the monkey, after its chosen delay) and after every exit
// of its own (a crash, or a start while nats-server was down).
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	addr    string // HTTP address of a service; "" for nats-server
	logPath string
	ready   func(ctx context.Context) error

	op sync.Mutex // serialises start and stop

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	expect    bool      // the running process's exit is ours
	downUntil time.Time // the keeper does not restart it before
	final     bool      // stopped for good
	starts    int
	kills     int         // SIGKILL by the monkey
	terms     int         // SIGTERM by the monkey
	stops     []time.Time // when the monkey killed or stopped it
	pids      []int       // of each of its lifetimes
	crashes   []string
}

// start starts the process; p.op must be held.
func (p *proc) start() error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args...)
	p.mu.Lock()
	instance := fmt.Sprintf("%s#%d", p.name, p.starts+1)
	p.mu.Unlock()
	cmd.Env = append(slices.Clone(p.env), envInstance+"="+instance)
	cmd.Stdout, cmd.Stderr = f, f
	// The run's children die with it, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.expect = cmd, exited, false
	p.starts++
	p.pids = append(p.pids, cmd.Process.Pid)
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		if !p.expect {
			p.crashes = append(p.crashes, fmt.Sprintf("%s exited by itself: %v", time.Now().Format(time.TimeOnly), err))
		}
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// running reports whether the process is up.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop signals the process and waits for it to exit (SIGKILL after 30s);
// p.op must be held.
func (p *proc) stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.expect = true
	switch sig {
	case syscall.SIGKILL:
		p.kills++
	case syscall.SIGTERM:
		p.terms++
	}
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// restart stops the process with sig and starts it again after down.
func (p *proc) restart(ctx context.Context, sig syscall.Signal, down time.Duration) {
	p.op.Lock()
	p.mu.Lock()
	p.downUntil = time.Now().Add(down)
	p.stops = append(p.stops, time.Now())
	p.mu.Unlock()
	p.stop(sig)
	p.op.Unlock()
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return
	}
	p.op.Lock()
	defer p.op.Unlock()
	if !p.running() && !p.isFinal() {
		_ = p.start()
	}
}

func (p *proc) isFinal() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.final
}

// keep restarts the process whenever it is down and not meant to be, a
// second after it exited by itself.
func (p *proc) keep(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var downSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.running() {
			downSince = time.Time{}
			continue
		}
		if downSince.IsZero() {
			downSince = time.Now()
		}
		p.mu.Lock()
		wait := p.final || time.Now().Before(p.downUntil) || time.Since(downSince) < time.Second
		p.mu.Unlock()
		if wait {
			continue
		}
		p.op.Lock()
		if !p.running() && !p.isFinal() {
			_ = p.start()
		}
		p.op.Unlock()
	}
}

// shutdown stops the process for good with SIGTERM (a graceful drain).
func (p *proc) shutdown() {
	p.op.Lock()
	defer p.op.Unlock()
	p.mu.Lock()
	p.final = true
	p.mu.Unlock()
	if p.running() {
		p.stop(syscall.SIGTERM)
		p.mu.Lock()
		p.terms-- // not a fault of the run
		p.mu.Unlock()
	}
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// waitReady waits until the process is up and ready, or ctx ends.
func (p *proc) waitReady(ctx context.Context) error {
	for {
		if p.running() {
			if err := p.ready(ctx); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", p.name, context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// httpReady is the readiness of a service: GET /readyz answers 200.
func httpReady(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %d", resp.StatusCode)
		}
		return nil
	}
}

// tcpReady is the readiness of nats-server: it accepts connections.
func tcpReady(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// freePort returns a loopback address with a port nobody listens on.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// rssMB is the resident memory of a process, from /proc.
func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// logFindings scans a process's log for what must never appear: a panic,
// a fatal runtime error, a data race.
func logFindings(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "WARNING: DATA RACE") {
			out = append(out, fmt.Sprintf("%s: %s", filepath.Base(path), line))
		}
	}
	return out, sc.Err()
}

// repoRoot finds the directory holding go.work, from the working
// directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("chaos: no go.work above the working directory; run from the tenaz tree")
		}
		dir = parent
	}
}

// buildServices builds the four service binaries of this tree into dir.
func buildServices(ctx context.Context, root, dir string, race bool) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	for _, s := range services {
		args = append(args, "./services/"+s+"/cmd/tenaz-"+s)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

var services = []string{"ingest", "dispatcher", "poller", "deadletter"}
