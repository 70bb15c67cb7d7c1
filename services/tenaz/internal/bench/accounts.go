package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/streams"
)

// child is a process of this binary in a serve mode (ServeNATS, ServeTenaz),
// so that the server's and the services' memory are measured apart.
type child struct {
	cmd    *exec.Cmd
	ready  string
	exited chan struct{} // closed once the process has exited
	err    error         // its exit error, valid after exited
}

func startChild(args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY"); ok {
				ready <- strings.TrimSpace(rest)
			}
		}
	}()
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	select {
	case c.ready = <-ready:
		return c, nil
	case <-c.exited:
		return nil, fmt.Errorf("%s exited before ready: %v", args[0], c.err)
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s not ready within 2m", args[0])
	}
}

// rssMB is the resident memory of the child.
// startNATSChild starts nats-server in its own process, its store in
// <dir>/nats of a new temporary directory named for name; cleanup stops
// it (SIGTERM, then a kill after stopWithin) and removes the directory.
func startNATSChild(name string, stopWithin time.Duration) (dir string, srv *child, cleanup func(), err error) {
	if dir, err = os.MkdirTemp("", "tenaz-bench-"+name+"-*"); err != nil {
		return "", nil, nil, err
	}
	if srv, err = startChild("serve-nats", filepath.Join(dir, "nats")); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, nil, err
	}
	return dir, srv, func() {
		_, _ = srv.stop(stopWithin)
		_ = os.RemoveAll(dir)
	}, nil
}

// startTenazChild starts tenaz in its own process on the config y, which it
// writes to dir/tenaz.yaml.
func startTenazChild(dir, y string) (*child, error) {
	f := filepath.Join(dir, "tenaz.yaml")
	if err := os.WriteFile(f, []byte(y), 0o600); err != nil {
		return nil, err
	}
	return startChild("serve-tenaz", f)
}

func (c *child) rssMB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// stop sends SIGTERM and returns how long the child took to exit
// (idempotent: a stopped child returns at once).
func (c *child) stop(timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return time.Since(t0), c.err
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return time.Since(t0), fmt.Errorf("did not exit within %s of SIGTERM", timeout)
	}
}

// accountsFor bounds the wait for the many-accounts run's deliveries and
// for EVENTS to drain: what is delivered by then is reported.
const accountsFor = 15 * time.Minute

// Accounts sends one event for each of n accounts through a tenaz running
// in its own process against a nats-server in another, and reports
// throughput, both processes' memory, and how long tenaz takes to stop,
// as figures named name_* (accounts_10k unless the count was set). With
// partitions > 0 the store has that many partitions, else a new store's.
func Accounts(ctx context.Context, n, partitions int, name string, r Report) error {
	dir, srv, cleanup, err := startNATSChild("accounts", 5*time.Minute)
	if err != nil {
		return err
	}
	defer cleanup()
	target, err := startNoop()
	if err != nil {
		return err
	}
	defer target.srv.Close()
	streamsYAML := ""
	if partitions > 0 {
		streamsYAML = fmt.Sprintf("streams: {partitions: %d}\n", partitions)
	}
	tz, err := startTenazChild(dir, configYAML(srv.ready, streamsYAML+`
accounts:
  "*": {concurrency: 2}
targets:
  noop: {url: %q, timeout: 5s}
kinds:
  order.create: {target: noop, attempts: 3, backoff: {initial: 1s}}
`, target.url+"/api/{{.Kind}}"))
	if err != nil {
		return err
	}
	defer func() { _, _ = tz.stop(2 * time.Minute) }() // on an error below: never leave it running
	nc, err := nats.Connect(srv.ready)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	start := time.Now()
	tz.toggleProfile() // BENCH_CHILD_PROFILE: from the first publish to the last delivery
	srv.toggleProfile()
	for i := range n {
		m := nats.NewMsg(fmt.Sprintf("tenaz.intake.acct%05d.order.create", i))
		m.Data = []byte(`{"order_id":"o","total":1}`)
		m.Header.Set("Idempotency-Key", "k")
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil { // a loaded server may lag the window
			return err
		}
	}
	<-js.PublishAsyncComplete()
	deadline := time.Now().Add(accountsFor)
	for target.calls.Load() < int64(n) && time.Now().Before(deadline) {
		if os.Getenv("BENCH_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "%s delivered %d of %d\n", time.Now().Format(time.TimeOnly), target.calls.Load(), n)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	el := time.Since(start) // to the last delivery, as the throughput runs count
	tz.toggleProfile()
	srv.toggleProfile()
	// Every message settled and trimmed (a store's work-queue EVENTS keeps
	// up to 8 keeper messages).
	for target.calls.Load() == int64(n) {
		// A busy server may not answer one stream info in time: ask again
		// until the deadline.
		n, err := streams.Partitions(ctx, js, "")
		left := 0
		for p := 0; err == nil && p < n; p++ {
			var st jetstream.Stream
			if st, err = js.Stream(ctx, streams.EventsStream("", p)); err == nil && st.CachedInfo().State.Msgs > 8 {
				left++
			}
		}
		if err == nil && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("accounts: EVENTS not drained within %s (last stream info: %v)", accountsFor, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	delivered := target.calls.Load()
	r.Figure(name+"_delivered", float64(delivered), "events")
	r.Figure(name+"_events_per_s", float64(delivered)/el.Seconds(), "events/s")
	r.Figure(name+"_server_rss_mb", srv.rssMB(), "MB")
	r.Figure(name+"_service_rss_mb", tz.rssMB(), "MB")
	d, err := tz.stop(2 * time.Minute)
	r.Figure(name+"_shutdown_s", d.Seconds(), "s")
	if err != nil {
		return fmt.Errorf("accounts: tenaz stop: %w", err)
	}
	d, _ = srv.stop(5 * time.Minute)
	r.Figure(name+"_server_shutdown_s", d.Seconds(), "s")
	r.Figure(name+"_accounts", float64(n), "accounts")
	return nil
}
