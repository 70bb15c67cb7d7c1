package tenaz_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// cliRun is one run of an operator command.
type cliRun struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r cliRun) String() string {
	return fmt.Sprintf("tenaz %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// decode reads the --json output into v.
func (r cliRun) decode(t *testing.T, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("want one JSON document on stdout, got %v\n%s", err, r)
	}
}

// operator runs the CLI's command functions in-process, with only the
// environment given (plus an empty config dir, so that no real natscli
// context is read).
type operator struct {
	t   *testing.T
	env map[string]string
	// stdin is what a command reads (the answer to a confirmation).
	stdin string
}

func newOperator(t *testing.T, url string) *operator {
	return &operator{t: t, env: map[string]string{"NATS_URL": url, "USER": "alice", "XDG_CONFIG_HOME": t.TempDir()}}
}

func (o *operator) run(args ...string) cliRun {
	o.t.Helper()
	var out, errb bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errb, Stdin: strings.NewReader(o.stdin), Getenv: func(k string) string { return o.env[k] }}
	code := cli.Main(&cli.Commands{}, args, env)
	return cliRun{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// runBinary runs the tenaz binary bin with only the environment env and
// returns its exit code, stdout and stderr; it fails the test if the
// binary does not run.
func runBinary(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("tenaz %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// must runs and fails the test unless the exit code is want.
func (o *operator) must(want int, args ...string) cliRun {
	o.t.Helper()
	r := o.run(args...)
	if r.code != want {
		o.t.Fatalf("want exit %d, got\n%s", want, r)
	}
	return r
}

// events get, history and cancel against `tenaz run`'s services: tables
// for people, JSON that decodes strictly into the API's types, and exit
// codes 3 (unknown event), 4 (cancel a done event), 2 (not an id).
func TestCLIEvents(t *testing.T) {
	t.Parallel()
	_, tz, base := running(t)
	op := newOperator(t, tz.NATSURL())

	_, v := post(t, base, "cli-1", `{"account":"acme","kind":"order.create","payload":{"order_id":"cli-1"}}`)
	waitStatus(t, base, v.ID, "done")

	r := op.must(cli.ExitOK, "events", "get", v.ID)
	for _, want := range []string{"ID ", v.ID, "STATUS ", "done", "ACCOUNT ", "acme", "ATTEMPTS ", "1"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("events get: want %q in the table, got\n%s", want, r)
		}
	}
	var got ingest.View
	op.must(cli.ExitOK, "events", "get", v.ID, "--json").decode(t, &got)
	if got.ID != v.ID || got.Status != state.Done || got.Account != "acme" || got.Kind != "order.create" || got.Attempts != 1 {
		t.Fatalf("events get --json: want {%s done acme order.create 1 attempt}, got %+v", v.ID, got)
	}

	var h ingest.HistoryView
	op.must(cli.ExitOK, "events", "history", v.ID, "--json").decode(t, &h)
	var actions []string
	for _, e := range h.History {
		actions = append(actions, string(e.Action))
	}
	if h.ID != v.ID || strings.Join(actions, ",") != "accept,claim,succeed" {
		t.Fatalf("events history --json: want accept,claim,succeed for %s, got %v (%+v)", v.ID, actions, h)
	}
	r = op.must(cli.ExitOK, "events", "history", v.ID)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "AT ") || !strings.Contains(lines[3], "succeed") {
		t.Fatalf("events history: want a header and 3 rows ending with succeed, got\n%s", r)
	}

	// Cancel: a delayed event can be, a done one cannot (4), an unknown one is 3.
	due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	_, d := post(t, base, "cli-2", fmt.Sprintf(`{"account":"acme","kind":"order.create","not_before":%q,"payload":{"order_id":"cli-2"}}`, due))
	var c ingest.View
	op.must(cli.ExitOK, "events", "cancel", d.ID, "-m", "customer withdrew", "--json").decode(t, &c)
	if c.ID != d.ID || c.Status != state.Cancelled {
		t.Fatalf("events cancel: want %s cancelled, got %+v", d.ID, c)
	}
	op.must(cli.ExitOK, "events", "history", d.ID, "--json").decode(t, &h)
	last := h.History[len(h.History)-1]
	if last.Action != state.Cancel || last.Actor != "anonymous" || last.Detail != "customer withdrew" {
		t.Fatalf("history after cancel: want {cancel anonymous customer withdrew}, got %+v", last)
	}
	r = op.must(cli.ExitConflict, "events", "cancel", v.ID)
	if !strings.Contains(r.stderr, "not_cancellable") {
		t.Fatalf("cancel a done event: want the service's reason on stderr, got\n%s", r)
	}
	unknown := "ev_" + strings.Repeat("0", 26)
	op.must(cli.ExitNotFound, "events", "get", unknown)
	op.must(cli.ExitNotFound, "events", "history", unknown)
	r = op.must(cli.ExitNotFound, "events", "cancel", unknown, "--json")
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Exit    int    `json:"exit"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e.Error.Code != "not_found" || e.Error.Exit != cli.ExitNotFound || r.stdout != "" {
		t.Fatalf("--json error: want {error: {code not_found, exit 3}} on stderr and nothing on stdout, got\n%s", r)
	}
	op.must(cli.ExitUsage, "events", "get", "not-an-id")
	op.must(cli.ExitUsage, "events", "frobnicate")
	// Nothing answers under another prefix; no server at all: both 5.
	r = op.must(cli.ExitUnavailable, "events", "get", v.ID, "--prefix", "other")
	if !strings.Contains(r.stderr, "other.api.ingest.get") {
		t.Fatalf("want the subject nobody answers named, got\n%s", r)
	}
	op.must(cli.ExitUnavailable, "events", "get", v.ID, "-s", "nats://127.0.0.1:1", "--timeout", "1s")
}

// streams status and apply on a bare server that wants a password, with
// the connection taken from the selected natscli context: status finds
// nothing (3), apply creates the layout, status then shows every stream,
// consumer and bucket; a wrong password from a flag overrides the context
// and is refused (1).
func TestCLIStreamsWithContext(t *testing.T) {
	t.Parallel()
	srv, err := natsd.Start(natsd.Options{StoreDir: t.TempDir(), Configure: func(o *server.Options) {
		o.Username, o.Password = "ops", "s3cret"
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsd.Shutdown(srv) })

	home := t.TempDir()
	ctxDir := filepath.Join(home, ".config", "nats", "context")
	if err := os.MkdirAll(ctxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctxJSON := fmt.Sprintf(`{"description":"test","url":%q,"user":"ops","password":"s3cret"}`, srv.ClientURL())
	if err := os.WriteFile(filepath.Join(ctxDir, "tz.json"), []byte(ctxJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "nats", "context.txt"), []byte("tz"), 0o600); err != nil {
		t.Fatal(err)
	}
	op := &operator{t: t, env: map[string]string{"HOME": home, "USER": "alice"}}

	r := op.must(cli.ExitNotFound, "streams", "status")
	if !strings.Contains(r.stdout, "INTAKE") || !strings.Contains(r.stdout, "missing") || !strings.Contains(r.stderr, "tenaz streams apply") {
		t.Fatalf("status before apply: want INTAKE missing and a hint to apply, got\n%s", r)
	}
	var applied cli.AppliedLayout
	op.must(cli.ExitOK, "streams", "apply", "--json").decode(t, &applied)
	if applied.Prefix != "tenaz" || applied.Replicas != 1 || len(applied.Streams) < 4 || len(applied.Buckets) < 4 {
		t.Fatalf("apply: want prefix tenaz, 1 replica, every stream and bucket, got %+v", applied)
	}
	op.must(cli.ExitOK, "streams", "apply") // idempotent

	var st cli.Status
	op.must(cli.ExitOK, "streams", "status", "--json").decode(t, &st)
	streams := map[string]cli.StreamStatus{}
	for _, s := range st.Streams {
		streams[s.Name] = s
	}
	for _, name := range []string{names.StreamIntake, names.StreamEvents, names.StreamDead} {
		if s, ok := streams[name]; !ok || s.Missing || s.Replicas != 1 {
			t.Fatalf("status: want stream %s present with 1 replica, got %+v", name, st.Streams)
		}
	}
	var ingestConsumer bool
	for _, c := range st.Consumers {
		ingestConsumer = ingestConsumer || (c.Stream == names.StreamIntake && c.Name == "ingest")
	}
	buckets := map[string]bool{}
	for _, b := range st.Buckets {
		buckets[b.Bucket] = !b.Missing
	}
	if !ingestConsumer || !buckets[names.BucketState] || !buckets[names.BucketBreakers] {
		t.Fatalf("status: want the ingest consumer and the state and breaker buckets, got %+v", st)
	}

	// A submission published to INTAKE shows in its count and as the ingest consumer's pending.
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("ops", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("tenaz.intake.acme.order.create", []byte(`{"order_id":"s-1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var intake cli.StreamStatus
	var pending uint64
	natstest.Eventually(t, 5*time.Second, func() bool {
		op.must(cli.ExitOK, "streams", "status", "--json").decode(t, &st)
		for _, s := range st.Streams {
			if s.Name == names.StreamIntake {
				intake = s
			}
		}
		for _, c := range st.Consumers {
			if c.Name == "ingest" {
				pending = c.Pending
			}
		}
		return intake.Messages == 1 && pending == 1
	}, "want INTAKE with 1 message and the ingest consumer with 1 pending, got %v", natstest.Lazy(func() any {
		return fmt.Sprintf("%d messages and %d pending", intake.Messages, pending)
	}))
	r = op.must(cli.ExitOK, "streams", "status")
	for _, want := range []string{"STREAM", "CONSUMER", "BUCKET", "tenaz_state"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("status table: want %q, got\n%s", want, r)
		}
	}

	r = op.must(cli.ExitError, "streams", "status", "--password", "wrong")
	if !strings.Contains(strings.ToLower(r.stderr), "authorization") {
		t.Fatalf("wrong password: want the server's authorization error, got\n%s", r)
	}
	op.must(cli.ExitUsage, "streams", "status", "--context", "nosuch")
	op.must(cli.ExitUsage, "streams", "apply", "--replicas", "2")
}

// The built binary wires the operator commands: --help documents the exit
// codes, and the process exits with them (3 for an unknown event, 2 for a
// bad argument, 0 with JSON for a known one).
func TestCLIBinaryExitCodes(t *testing.T) {
	t.Parallel()
	bin := tenazBinary(t)
	tz := start(t, testConfig(t.TempDir(), "http://127.0.0.1:1", ""))
	_, v := post(t, "http://"+tz.HTTPAddr(), "bin-1", `{"account":"acme","kind":"order.create","payload":{"order_id":"bin-1"}}`)

	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runBinary(t, bin, []string{"NATS_URL=" + tz.NATSURL(), "XDG_CONFIG_HOME=" + t.TempDir(), "HOME=" + t.TempDir(), "USER=alice"}, args...)
	}
	code, out, _ := run("--help")
	if code != 0 || !strings.Contains(out, "Exit codes: 0 ok, 1 error, 2 usage") || !strings.Contains(out, "dead replay") {
		t.Fatalf("--help: want exit 0 with the exit codes and the commands, got %d\n%s", code, out)
	}
	if code, _, errOut := run("events", "get", "ev_"+strings.Repeat("0", 26)); code != cli.ExitNotFound || !strings.Contains(errOut, "no event") {
		t.Fatalf("unknown event: want exit 3 and the reason, got %d: %s", code, errOut)
	}
	if code, _, _ := run("events", "get", "nope"); code != cli.ExitUsage {
		t.Fatalf("bad id: want exit 2, got %d", code)
	}
	code, out, errOut := run("events", "get", v.ID, "--json")
	var got ingest.View
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.ID != v.ID {
		t.Fatalf("known event: want exit 0 and its JSON, got %d\n%s\n%s", code, out, errOut)
	}
}
