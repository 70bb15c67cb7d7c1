package deploy

// The NATS users of nats/values.yaml on a real nats-server: the
// authorization block is rendered the way the chart renders config.merge,
// parsed by nats-server's own config parser and enforced by an embedded
// server that the four services run on, each connected as its own user
// exactly as its pod connects (natsconn.Connect, NATS_USER/NATS_PASSWORD),
// and a producer's `tenaz outbox relay` too, as a process on a throwaway
// PostgreSQL.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/pgtest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/deadletter"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/poller"
	"github.com/tenaz/tenaz/streams"
)

// natsAuthorization mirrors config.merge.authorization of nats/values.yaml
// (nats-server's authorization block).
type natsAuthorization struct {
	Users []natsUser `yaml:"users"`
}

// natsUser is one user of the authorization block.
type natsUser struct {
	User        string `yaml:"user"`
	Password    string `yaml:"password"`
	Permissions struct {
		Publish        natsSubjects `yaml:"publish"`
		Subscribe      natsSubjects `yaml:"subscribe"`
		AllowResponses bool         `yaml:"allow_responses"`
	} `yaml:"permissions"`
}

type natsSubjects struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
}

// helmEnv is a value of the chart's container.env map: a literal, or a
// secretKeyRef.
type helmEnv struct {
	Value  string
	Secret string // secretKeyRef name
	Key    string // secretKeyRef key
}

func (e *helmEnv) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		e.Value = n.Value
		return nil
	}
	var v struct {
		ValueFrom struct {
			SecretKeyRef struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	}
	var raw map[string]any
	if err := n.Decode(&raw); err != nil {
		return err
	}
	if err := strict(raw, &v); err != nil { // refuses what is not a secretKeyRef
		return fmt.Errorf("env value %v: want a string or valueFrom.secretKeyRef: %w", raw, err)
	}
	e.Secret, e.Key = v.ValueFrom.SecretKeyRef.Name, v.ValueFrom.SecretKeyRef.Key
	return nil
}

// The NATS users of the deployment besides one per service (its pod's
// NATS_USER, serviceUser): the operator's (the tenaz CLI, nats-box), an
// upstream producer's, and a producer outbox relay's (tenaz outbox relay,
// whose connection name, and so inbox prefix, is the user's name).
const (
	userOperator = "tenaz-operator"
	userProducer = "tenaz-producer"
	userOutbox   = "tenaz-outbox"
)

// otherUsers are the users that are not a service's.
var otherUsers = []string{userOperator, userProducer, userOutbox}

// serviceUser is the NATS user of a service and its connection's name, so
// its replies arrive under natsconn.InboxPrefix(serviceUser(svc)).
func serviceUser(svc string) string { return "tenaz-" + svc }

// passwordRef is the chart's form of a value written unquoted into
// nats.conf: here a variable of the NATS container's environment.
var passwordRef = regexp.MustCompile(`^<<\s*\$([A-Za-z_][A-Za-z0-9_]*)\s*>>$`)

// unquoted is the chart's rule for config.merge: a string "<< x >>" is
// written to nats.conf as x.
var unquoted = regexp.MustCompile(`"<<\s*(.*?)\s*>>"`)

// newPassword makes a password as docs/deploy.md does: a letter, then
// random hex (nats.conf would read an all-digit value as a number).
func newPassword(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("p%x", b)
}

// natsValuesRaw is nats/values.yaml as generic YAML.
func natsValuesRaw(t *testing.T) obj {
	t.Helper()
	data, err := os.ReadFile("nats/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v obj
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("nats/values.yaml: %v", err)
	}
	return v
}

// natsServerUsers renders the authorization block of the values as the
// chart does (JSON, "<< $X >>" unquoted), sets each password's variable in
// the environment with a new password, as the NATS container's env does
// from the Secret, and has nats-server parse the result. It returns the
// users as the server holds them and each user's password.
func natsServerUsers(t *testing.T) ([]*server.User, map[string]string) {
	t.Helper()
	v := natsValues(t)
	authz := get(natsValuesRaw(t), "config", "merge", "authorization")
	if authz == nil {
		t.Fatal("nats/values.yaml: no config.merge.authorization: the servers would take any client")
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as the chart's toRawJson: ">" stays ">"
	if err := enc.Encode(map[string]any{"authorization": authz}); err != nil {
		t.Fatal(err)
	}
	passwords := map[string]string{}
	for _, u := range v.Config.Merge.Authorization.Users {
		m := passwordRef.FindStringSubmatch(u.Password)
		if m == nil {
			t.Fatalf("user %s: password %q, want << $VARIABLE >>: from a Secret through the NATS container's env, never in the values", u.User, u.Password)
		}
		passwords[u.User] = newPassword(t)
		t.Setenv(m[1], passwords[u.User])
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(unquoted.ReplaceAllString(b.String(), "$1")), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the rendered authorization block: %v", err)
	}
	if len(opts.Users) != len(passwords) {
		t.Fatalf("nats-server read %d users, the values define %d", len(opts.Users), len(passwords))
	}
	for _, u := range opts.Users {
		if u.Password != passwords[u.Username] {
			t.Fatalf("user %s: nats-server did not read the password its variable holds", u.Username)
		}
	}
	return opts.Users, passwords
}

// serverLog keeps what an embedded server logs as an error or warning:
// among them every permission violation, naming the user.
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// violations returns the permission violations of user.
func (l *serverLog) violations(user string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, "Violation") && strings.Contains(s, "/user:"+user+`"`) { // the client's "$G/user:<name>" tag
			out = append(out, s)
		}
	}
	return out
}

func (l *serverLog) Noticef(string, ...any)         {}
func (l *serverLog) Debugf(string, ...any)          {}
func (l *serverLog) Tracef(string, ...any)          {}
func (l *serverLog) Warnf(format string, a ...any)  { l.add(format, a...) }
func (l *serverLog) Errorf(format string, a ...any) { l.add(format, a...) }
func (l *serverLog) Fatalf(format string, a ...any) { l.add(format, a...) }

// startNATS starts an embedded JetStream server that admits users only.
func startNATS(t *testing.T, users []*server.User) (*server.Server, *serverLog) {
	t.Helper()
	log := &serverLog{}
	srv, err := natsd.Start(natsd.Options{StoreDir: t.TempDir(), Configure: func(o *server.Options) { o.Users = users }})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetLoggerV2(log, false, false, false)
	t.Cleanup(func() { natsd.Shutdown(srv) })
	return srv, log
}

// ------------------------------------------------------------- the world

// Keys of the HTTP API in the world's config.
var (
	acmeKey, acmeHash   = mustKey()
	brkKey, brkHash     = mustKey()
	aliceKey, aliceHash = mustKey()
)

func mustKey() (string, string) {
	k, h, err := auth.NewKey()
	if err != nil {
		panic(err)
	}
	return k, h
}

// cbSecret is bureau A's (and C's) webhook secret.
const cbSecret = "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="

// worldConfig is the tenaz.yaml of the world; ${...} are the targets' URLs
// and, per service, NATS_USER and NATS_PASSWORD as its pod's env sets them.
const worldConfig = `
prefix: tenaz
nats: {url: "${NATS_URL}"}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
streams: {ack_wait: 2s}
sealing_key: "dGVuYXotdGVzdC1zZWFsaW5nLWtleS0zMi1ieXRlcyE="
auth:
  keys:
    acme-shop: {account: acme, scopes: [submit, read], hash: "${ACME_HASH}", rate: 1000/s}
    brk-shop: {account: brk, scopes: [submit, read], hash: "${BRK_HASH}"}
  operators:
    alice: {hash: "${ALICE_HASH}"}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
  brk: {concurrency: 1, breaker: {failures: 2, cooldown: 1h}}
  rep: {repeats: {pulse: {kind: order.create, every: 1s, payload: {n: 0}}}}
poller: {grace: 1s, reconcile_every: 2s}
deadletter:
  digest: {schedule: "@every 1s"}
targets:
  erp: {url: "${ERP}/api/{{.Kind}}", timeout: 5s, rate: 1000/s, concurrency: 16}
  flaky: {url: "${FLAKY}/ping", timeout: 2s}
  bureau_a: {url: "${A}/proposals", timeout: 3s, callback_secret: "` + cbSecret + `"}
  bureau_b:
    url: "${B}/evaluations"
    timeout: 3s
    rate: 1000/s # its polls take tokens and slots in tenaz_quotas too
    concurrency: 16
    poll: {url: "${B}/evaluations/{{.Reference}}", interval: 1s, done_when: {field: status, in: [approved, rejected]}}
  bureau_c: {url: "${C}/proposals", timeout: 3s, callback_secret: "` + cbSecret + `"}
kinds:
  order.create: {target: erp, attempts: 3, backoff: {initial: 1s, max: 1s, jitter: 0}}
  ping.flaky: {target: flaky, attempts: 20, backoff: {initial: 1s, max: 1s, jitter: 0}}
  credit.evaluate: {target: bureau_a, completion: callback}
  credit.check: {target: bureau_b, completion: poll}
  credit.slow: {target: bureau_c, completion: callback, callback_sla: 1s}
  credit.hold: {target: bureau_c, completion: callback, callback_sla: 1h}
`

// world is tenaz as deploy/ ships it: the users of nats/values.yaml on one
// nats-server, the four services each connected as its own user, real
// targets behind real HTTP servers.
type world struct {
	t         *testing.T
	ctx       context.Context
	srv       *server.Server
	log       *serverLog
	passwords map[string]string
	env       map[string]string // what every pod's env holds
	erp       *recorder         // the erp target
	a         *provider.Provider
	api       *httptest.Server // ingest's HTTP (submissions, status, callbacks)
	ops       *httptest.Server // deadletter's HTTP (the operator's API)
	disp      *dispatcher.Service
}

// recorder is a target: 200 unless the payload asks for a failure. It
// records every call by event id.
type recorder struct {
	mu     sync.Mutex
	calls  map[string]int
	reject atomic.Bool // answer {"reject": true} payloads 422
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var p struct {
		Reject    bool `json:"reject"`
		FailFirst bool `json:"fail_first"`
	}
	_ = json.NewDecoder(req.Body).Decode(&p)
	id := req.Header.Get(names.HeaderEventID)
	r.mu.Lock()
	r.calls[id]++
	n := r.calls[id]
	r.mu.Unlock()
	switch {
	case p.Reject && r.reject.Load():
		w.WriteHeader(http.StatusUnprocessableEntity)
	case p.FailFirst && n == 1:
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id]
}

func newWorld(t *testing.T) *world {
	t.Helper()
	users, passwords := natsServerUsers(t)
	w := &world{t: t, passwords: passwords, erp: &recorder{calls: map[string]int{}}}
	w.erp.reject.Store(true)
	var cancel context.CancelFunc
	w.ctx, cancel = context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	w.srv, w.log = startNATS(t, users)

	// ingest's HTTP server exists before bureau A, which calls back to it.
	var apiMux http.Handler = http.NotFoundHandler()
	w.api = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { apiMux.ServeHTTP(rw, r) }))
	t.Cleanup(w.api.Close)
	w.a = provider.New(provider.Faults{}, provider.WithIdempotent(), provider.WithCallbacks(w.api.URL+"/v1/callbacks/bureau_a", cbSecret, 0))
	b := provider.New(provider.Faults{}, provider.WithIdempotent())
	c := provider.New(provider.Faults{}, provider.WithIdempotent()) // never calls back
	flaky := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusServiceUnavailable) })
	urls := map[string]string{}
	for name, h := range map[string]http.Handler{"ERP": w.erp, "FLAKY": flaky, "A": w.a, "B": b, "C": c} {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		urls[name] = s.URL
	}
	t.Cleanup(func() { _ = w.a.Close(); _ = b.Close(); _ = c.Close() })
	w.env = map[string]string{"NATS_URL": w.srv.ClientURL(), "ACME_HASH": acmeHash, "BRK_HASH": brkHash, "ALICE_HASH": aliceHash}
	for k, v := range urls {
		w.env[k] = v
	}

	// Consumers of a stage start before its producers, as tenaz run does.
	dl := w.service("deadletter", func(p daemon.Process) (daemon.Component, error) {
		return deadletter.New(deadletter.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Auth: p.Auth, Instance: "dl1"})
	})
	w.ops = w.serve(dl)
	w.service("poller", func(p daemon.Process) (daemon.Component, error) {
		return poller.New(poller.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Instance: "p1"})
	})
	w.disp = w.service("dispatcher", func(p daemon.Process) (daemon.Component, error) {
		return dispatcher.New(dispatcher.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Instance: "d1", IdleAfter: 3 * time.Second, Relist: 2 * time.Second})
	}).(*dispatcher.Service)
	var ingAuth *auth.Authenticator
	ing := w.service("ingest", func(p daemon.Process) (daemon.Component, error) {
		ingAuth = p.Auth
		return ingest.New(ingest.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Auth: p.Auth})
	})
	cfg, _ := w.config("ingest")
	apiMux = daemon.Handler(cfg, ingAuth, daemon.Mux(ing))
	return w
}

// config parses the world's tenaz.yaml in the environment of svc's pod.
func (w *world) config(svc string) (*config.Config, *auth.Authenticator) {
	w.t.Helper()
	env := map[string]string{"NATS_USER": serviceUser(svc), "NATS_PASSWORD": w.passwords[serviceUser(svc)]}
	cfg, err := config.Parse([]byte(worldConfig), func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		v, ok := w.env[k]
		return v, ok
	})
	if err != nil {
		w.t.Fatalf("%s: config: %v", svc, err)
	}
	a, err := auth.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return cfg, a
}

// service connects as svc's pod does (daemon.Run: natsconn.Connect with
// the config's NATS user, named tenaz-<svc>, then the live config that
// follows the accounts bucket), builds the service and starts it; it
// stops when the test ends.
func (w *world) service(svc string, build daemon.Build) daemon.Component {
	w.t.Helper()
	cfg, a := w.config(svc)
	nc, err := natsconn.Connect(cfg.NATS, serviceUser(svc), "")
	if err != nil {
		w.t.Fatalf("%s: connect: %v", svc, err)
	}
	w.t.Cleanup(nc.Close)
	lv, err := daemon.Live(w.ctx, nc, cfg, "", a, nil)
	if err != nil {
		w.t.Fatalf("%s: the accounts bucket as NATS user %s: %v\nviolations: %v", svc, serviceUser(svc), err, w.log.violations(serviceUser(svc)))
	}
	c, err := build(daemon.Process{Conn: nc, Config: cfg, Live: lv, Auth: a})
	if err != nil {
		w.t.Fatalf("%s: %v", svc, err)
	}
	if err := c.Start(w.ctx); err != nil {
		w.t.Fatalf("%s: start as NATS user %s: %v\nviolations: %v", svc, serviceUser(svc), err, w.log.violations(serviceUser(svc)))
	}
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			w.t.Errorf("%s: stop: %v", svc, err)
		}
	})
	return c
}

// serve serves c's HTTP routes as its binary does.
func (w *world) serve(c daemon.Component) *httptest.Server {
	cfg, a := w.config("deadletter")
	s := httptest.NewServer(daemon.Handler(cfg, a, daemon.Mux(c)))
	w.t.Cleanup(s.Close)
	return s
}

// client connects as user (password from the Secret; "" for none) with
// its errors, a permission violation among them, sent to errs.
func (w *world) client(t *testing.T, user string) (*nats.Conn, chan error) {
	t.Helper()
	errs := make(chan error, 64)
	opts := []nats.Option{nats.Name(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})}
	if user != "" {
		opts = append(opts, nats.UserInfo(user, w.passwords[user]))
	}
	if user == userProducer || user == userOutbox || slices.Contains(serviceUsers(), user) {
		opts = append(opts, nats.CustomInboxPrefix(natsconn.InboxPrefix(user))) // the only inboxes it may read
	}
	nc, err := nats.Connect(w.srv.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// ------------------------------------------------------------ the outbox

// tenazCmd is the tenaz CLI, whose `outbox relay` a producer runs.
const tenazCmd = "github.com/tenaz/tenaz/services/tenaz/cmd/tenaz"

// submitSubject is ingest's submit endpoints of each account, the one
// request of the relay.
const submitSubject = names.DefaultPrefix + ".api.ingest.submit.>"

// outboxDB is a producer's database with the outbox table, relayed by
// `tenaz outbox relay` running as a process.
type outboxDB struct {
	db    *pgx.Conn
	relay natstest.Lazy // the relay's output so far
}

// startOutbox sets up a producer's outbox as docs/producers.md does: a
// PostgreSQL database, the DDL of `tenaz outbox schema` applied to it,
// and `tenaz outbox relay` configured by its environment alone, with
// NATS_USER and NATS_PASSWORD of the outbox user as the Secret holds
// them. The relay stops (SIGTERM) when t ends, and must exit 0.
func (w *world) startOutbox(t *testing.T, bin string) *outboxDB {
	t.Helper()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dsn := pg.NewDB(t)
	// Only these variables: the test's own (the NATS container's
	// passwords) are not the relay's.
	env := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "LOG_FORMAT=json", "LOG_LEVEL=info",
		"NATS_URL=" + w.srv.ClientURL(), "NATS_USER=" + userOutbox, "NATS_PASSWORD=" + w.passwords[userOutbox],
		"TENAZ_OUTBOX_DSN=" + dsn}
	dir := t.TempDir() // no ./tenaz.yaml
	schema := exec.Command(bin, "outbox", "schema")
	schema.Env, schema.Dir = env, dir
	ddl, err := schema.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("tenaz outbox schema: %v\n%s", err, ee.Stderr)
	} else if err != nil {
		t.Fatalf("tenaz outbox schema: %v", err)
	}
	db, err := pgx.Connect(w.ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	if _, err := db.Exec(w.ctx, string(ddl)); err != nil {
		t.Fatalf("the DDL of tenaz outbox schema: %v", err)
	}

	logFile := filepath.Join(dir, "relay.log")
	o := &outboxDB{db: db, relay: func() any { b, _ := os.ReadFile(logFile); return string(b) }}
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the relay has its own descriptor
	cmd := exec.Command(bin, "outbox", "relay")
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error // once exited is closed
	go func() { exitErr = cmd.Wait(); close(exited) }()
	running := false
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if running && exitErr != nil {
				t.Errorf("the relay exited with %v on SIGTERM, want 0:\n%s", exitErr, o.relay)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the relay did not stop within 30s of SIGTERM:\n%s", o.relay)
		}
	})
	natstest.Eventually(t, 60*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("the relay exited before running: %v\n%s", exitErr, o.relay)
		default:
		}
		return strings.Contains(o.relay.String(), `"message":"outbox relay running"`)
	}, "the relay to run; its output:\n%s", o.relay)
	running = true
	return o
}

// insert writes an outbox row in a transaction that commits, as a
// producer does, and returns the row's id.
func (o *outboxDB) insert(t *testing.T, account, kind, payload string) string {
	t.Helper()
	tx, err := o.db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var id string
	if err := tx.QueryRow(t.Context(), "INSERT INTO "+config.DefaultOutboxTable+" (account, kind, payload) VALUES ($1, $2, $3) RETURNING id::text",
		account, kind, payload).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	return id
}

// rollback writes an outbox row in a transaction that rolls back.
func (o *outboxDB) rollback(t *testing.T, account, kind, payload string) {
	t.Helper()
	tx, err := o.db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "INSERT INTO "+config.DefaultOutboxTable+" (account, kind, payload) VALUES ($1, $2, $3)", account, kind, payload); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// waitSent waits until the relay marked row id sent (tenaz accepted it)
// and returns the row's event id.
func (o *outboxDB) waitSent(t *testing.T, id string) string {
	t.Helper()
	var status, ev, why string
	natstest.Eventually(t, 60*time.Second, func() bool {
		err := o.db.QueryRow(t.Context(), "SELECT status, coalesce(event_id, ''), coalesce(error, '') FROM "+config.DefaultOutboxTable+" WHERE id = $1", id).Scan(&status, &ev, &why)
		return err == nil && status == "sent"
	}, "outbox row %s to be sent (it is %s, error %q); relay output:\n%s", id, natstest.Lazy(func() any { return status }), natstest.Lazy(func() any { return why }), o.relay)
	return ev
}

// rows counts the rows of the outbox table.
func (o *outboxDB) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := o.db.QueryRow(t.Context(), "SELECT count(*) FROM "+config.DefaultOutboxTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ------------------------------------------------------------- the flows

// eventView is the part of GET /v1/events/{id} the flows read.
type eventView struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// submit posts a submission over HTTP as key and returns the event id.
func (w *world) submit(t *testing.T, key, account, kind, idemKey, extra, payload string) string {
	t.Helper()
	body := fmt.Sprintf(`{"account":%q,"kind":%q%s,"payload":%s}`, account, kind, extra, payload)
	req, _ := http.NewRequest(http.MethodPost, w.api.URL+"/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set(names.HeaderIdempotencyKey, idemKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v eventView
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil || (resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK) || v.ID == "" {
		t.Fatalf("POST /v1/events %s: %d %s", kind, resp.StatusCode, b)
	}
	return v.ID
}

// status reads an event's status over HTTP as key.
func (w *world) status(t *testing.T, key, id string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, w.api.URL+"/v1/events/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v eventView
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return v.Status
}

// waitStatus waits until the event has status want.
func (w *world) waitStatus(t *testing.T, key, id string, want state.State) {
	t.Helper()
	last := ""
	natstest.Eventually(t, 60*time.Second, func() bool { last = w.status(t, key, id); return last == string(want) },
		"event %s to be %s (it is %q); permission violations: %v", id, want, natstest.Lazy(func() any { return last }), natstest.Lazy(func() any { return w.allViolations() }))
}

// cancel cancels an event over HTTP as the operator alice.
func (w *world) cancel(t *testing.T, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, w.api.URL+"/v1/events/"+id, nil)
	req.SetBasicAuth("alice", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE /v1/events/%s: %d", id, resp.StatusCode)
	}
}

// waitInLane waits until event id has noted that it waits for blocker in
// its ordered lane.
func (w *world) waitInLane(t *testing.T, id, blocker string) {
	t.Helper()
	note := "waiting for " + blocker + " (ordered lane)"
	natstest.Eventually(t, 30*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, w.api.URL+"/v1/events/"+id+"/history", nil)
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h event.HistoryView
		_ = json.NewDecoder(resp.Body).Decode(&h)
		return slices.ContainsFunc(h.History, func(e state.Entry) bool { return e.Detail == note })
	}, "event %s to note %q", id, note)
}

// webhook posts a callback to /v1/callbacks/<path> signed with cbSecret
// and returns its outcome.
func (w *world) webhook(t *testing.T, path, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, w.api.URL+"/v1/callbacks/"+path, strings.NewReader(body))
	for k, v := range webhook.Headers(cbSecret, "msg_"+strconv.FormatInt(time.Now().UnixNano(), 36), time.Now(), []byte(body)) {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Outcome string }
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook to %s: %d %s", path, resp.StatusCode, b)
	}
	return out.Outcome
}

// allViolations lists the permission violations of the service users.
func (w *world) allViolations() []string {
	var out []string
	for _, svc := range services {
		out = append(out, w.log.violations(serviceUser(svc))...)
	}
	return out
}

// call makes an operator request over NATS as nc with alice's key.
func (w *world) call(nc *nats.Conn, name string, req, rep any) error {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	return ops.Call(ctx, nc, ops.Subject("tenaz", name), req, rep, ops.WithOperatorKey(aliceKey))
}

// TestNATSUsers runs tenaz on the users of nats/values.yaml: a client
// without a user, or with a wrong password, is refused; each service,
// connected as its own user, does its whole job (submissions over HTTP,
// from the producer over NATS and from a producer's outbox relay,
// deliveries, a retry, a callback, polls, a manual review, dead letters
// and their replay, a breaker and its close, the digest, a delayed event
// and its cancel, an idle account's reader retired and started again)
// without one permission violation; and a user doing another's job
// is refused (refusals).
func TestNATSUsers(t *testing.T) {
	tenazBin := natstest.Binary(t, tenazCmd) // before the world's clock starts
	w := newWorld(t)

	t.Run("unauthenticated", func(t *testing.T) {
		for what, opts := range map[string][]nats.Option{
			"no user":        nil,
			"wrong password": {nats.UserInfo(serviceUser("ingest"), "p0000")},
			"unknown user":   {nats.UserInfo("admin", w.passwords[userOperator])},
		} {
			nc, err := nats.Connect(w.srv.ClientURL(), append(opts, nats.MaxReconnects(0))...)
			if err == nil {
				nc.Close()
				t.Errorf("%s: want the connection refused, got one", what)
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("%s: want an authorization error, got %v", what, err)
			}
		}
	})

	operator, _ := w.client(t, userOperator)
	digests := make(chan *nats.Msg, 16)
	if _, err := operator.ChanSubscribe("tenaz.advisory.digest", digests); err != nil {
		t.Fatal(err)
	}
	advisories := make(chan *nats.Msg, 64)
	if _, err := operator.ChanSubscribe("tenaz.advisory.>", advisories); err != nil {
		t.Fatal(err)
	}
	if err := operator.Flush(); err != nil {
		t.Fatal(err)
	}

	t.Run("delivered", func(t *testing.T) {
		id := w.submit(t, acmeKey, "acme", "order.create", "o-1", "", `{"n":1}`)
		w.waitStatus(t, acmeKey, id, state.Done)
		// One retry: a 503, then the schedule the dispatcher set fires.
		id = w.submit(t, acmeKey, "acme", "order.create", "o-2", "", `{"fail_first":true}`)
		w.waitStatus(t, acmeKey, id, state.Done)
		if n := w.erp.count(id); n != 2 {
			t.Errorf("event %s: %d calls, want 2 (a 503, then the retry)", id, n)
		}
		// An ordered lane of two.
		a := w.submit(t, acmeKey, "acme", "order.create", "o-3", `,"ordering_key":"cust-1"`, `{"n":3}`)
		b := w.submit(t, acmeKey, "acme", "order.create", "o-4", `,"ordering_key":"cust-1"`, `{"n":4}`)
		w.waitStatus(t, acmeKey, a, state.Done)
		w.waitStatus(t, acmeKey, b, state.Done)
	})

	t.Run("from the producer over NATS", func(t *testing.T) {
		nc, _ := w.client(t, userProducer)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("tenaz.intake.acme.order.create")
		m.Data = []byte(`{"n":5}`)
		m.Header.Set(names.HeaderMsgID, "acme:p-1")
		if _, err := js.PublishMsg(w.ctx, m); err != nil {
			t.Fatalf("the producer's publish to INTAKE: %v", err)
		}
		id := w.submit(t, acmeKey, "acme", "order.create", "p-1", "", `{"n":5}`) // the same key: the same event
		w.waitStatus(t, acmeKey, id, state.Done)
	})

	t.Run("from a producer's outbox", func(t *testing.T) {
		ob := w.startOutbox(t, tenazBin)
		id := ob.insert(t, "acme", "order.create", `{"n":10}`)
		ob.rollback(t, "acme", "order.create", `{"n":11}`)
		ev := ob.waitSent(t, id)
		if want := event.ID("acme", id); ev != want {
			t.Errorf("row %s sent as event %s, want %s (the row id is the idempotency key)", id, ev, want)
		}
		w.waitStatus(t, acmeKey, ev, state.Done)
		if n := ob.rows(t); n != 1 {
			t.Errorf("%d outbox rows, want 1: the rolled-back one never existed", n)
		}
	})

	t.Run("callback and poll", func(t *testing.T) {
		id := w.submit(t, acmeKey, "acme", "credit.evaluate", "c-1", "", `{"amount":1}`)
		w.waitStatus(t, acmeKey, id, state.Done)
		id = w.submit(t, acmeKey, "acme", "credit.check", "c-2", "", `{"amount":2}`)
		w.waitStatus(t, acmeKey, id, state.Done)
		// A reference nobody recorded is awaited (a watch of the callbacks
		// bucket) for the target's call timeout, then answered unknown.
		if out := w.webhook(t, "bureau_c/acme", `{"reference":"nobody-has-it"}`); out != "unknown_event" {
			t.Fatalf("webhook naming an unknown reference: want unknown_event, got %s", out)
		}
		if v := w.log.violations(serviceUser("ingest")); len(v) > 0 {
			t.Fatalf("ingest's permission violations: %v", v)
		}
	})

	t.Run("ordered lanes moved along by a webhook, a poll, an escalation and cancels", func(t *testing.T) {
		// Each next event below is parked behind the head of its lane; its
		// parking schedule would wake it after 5 minutes, and waitStatus
		// gives up after one: whoever finishes the head wakes it.
		lane := func(key string) string { return `,"ordering_key":"` + key + `"` }
		head := w.submit(t, acmeKey, "acme", "credit.hold", "ln-1", lane("ln-webhook"), `{"amount":1}`)
		w.waitStatus(t, acmeKey, head, state.AwaitingCallback)
		next := w.submit(t, acmeKey, "acme", "order.create", "ln-2", lane("ln-webhook"), `{"n":81}`)
		w.waitInLane(t, next, head)
		if out := w.webhook(t, "bureau_c", `{"event_id":"`+head+`"}`); out != "applied" { // ingest completes the head
			t.Fatalf("webhook completing %s: %s", head, out)
		}
		w.waitStatus(t, acmeKey, next, state.Done)

		head = w.submit(t, acmeKey, "acme", "credit.check", "ln-3", lane("ln-poll"), `{"amount":3}`)
		next = w.submit(t, acmeKey, "acme", "order.create", "ln-4", lane("ln-poll"), `{"n":82}`)
		w.waitInLane(t, next, head) // the head's first poll is a second away
		w.waitStatus(t, acmeKey, next, state.Done)
		w.waitStatus(t, acmeKey, head, state.Done) // the poller completed it

		head = w.submit(t, acmeKey, "acme", "credit.slow", "ln-5", lane("ln-review"), `{"amount":5}`)
		next = w.submit(t, acmeKey, "acme", "order.create", "ln-6", lane("ln-review"), `{"n":83}`)
		w.waitInLane(t, next, head)
		w.waitStatus(t, acmeKey, next, state.Done)
		w.waitStatus(t, acmeKey, head, state.ManualReview) // the poller escalated it at its deadline

		// A cancelled event holds nobody: the event after it waits for the
		// one before it, which still runs.
		head = w.submit(t, acmeKey, "acme", "credit.hold", "ln-7", lane("ln-cancel"), `{"amount":7}`)
		w.waitStatus(t, acmeKey, head, state.AwaitingCallback)
		mid := w.submit(t, acmeKey, "acme", "order.create", "ln-8", lane("ln-cancel"), `{"n":84}`)
		w.waitInLane(t, mid, head)
		w.cancel(t, mid)
		last := w.submit(t, acmeKey, "acme", "order.create", "ln-9", lane("ln-cancel"), `{"n":85}`)
		w.waitInLane(t, last, head)
		if st := w.status(t, acmeKey, last); st != string(state.Pending) || w.erp.count(last) != 0 {
			t.Fatalf("the last of the lane is %s with %d calls while its first awaits its callback: want pending, no call", st, w.erp.count(last))
		}
		var ev ops.EventReply
		if err := w.call(operator, ops.EventsCancel, ops.EventActionRequest{ID: head, Reason: "the bureau lost it"}, &ev); err != nil || ev.Status != state.Cancelled {
			t.Fatalf("events.cancel_wait: %+v, %v", ev, err)
		}
		w.waitStatus(t, acmeKey, last, state.Done) // the operator's cancel wakes it, passing over the cancelled one
	})

	t.Run("delayed and cancelled", func(t *testing.T) {
		at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		id := w.submit(t, acmeKey, "acme", "order.create", "d-1", `,"not_before":"`+at+`"`, `{"n":6}`)
		w.waitStatus(t, acmeKey, id, state.Scheduled)
		w.cancel(t, id)
		w.waitStatus(t, acmeKey, id, state.Cancelled)
	})

	t.Run("dead, listed and replayed by the operator", func(t *testing.T) {
		id := w.submit(t, acmeKey, "acme", "order.create", "x-1", "", `{"reject":true}`)
		w.waitStatus(t, acmeKey, id, state.Dead)
		var list ops.ListReply
		natstest.Eventually(t, 30*time.Second, func() bool {
			list = ops.ListReply{}
			return w.call(operator, ops.DeadList, ops.ListRequest{Account: "acme"}, &list) == nil && slices.ContainsFunc(list.Items, func(it ops.Item) bool { return it.ID == id })
		}, "the operator's dead.list to show %s", id)
		var show ops.ShowReply
		if err := w.call(operator, ops.DeadShow, ops.ShowRequest{ID: id}, &show); err != nil {
			t.Fatalf("dead.show: %v", err)
		}
		w.erp.reject.Store(false) // the target was fixed
		var rep ops.ReplayReply
		if err := w.call(operator, ops.DeadReplay, ops.ReplayRequest{IDs: []string{id}, Reason: "fixed"}, &rep); err != nil || rep.Replayed != 1 {
			t.Fatalf("dead.replay: %+v, %v", rep, err)
		}
		w.waitStatus(t, acmeKey, id, state.Done)
		// A replay job (by filter) and a discard.
		w.erp.reject.Store(true)
		j := w.submit(t, acmeKey, "acme", "order.create", "x-2", "", `{"reject":true}`)
		k := w.submit(t, acmeKey, "acme", "order.create", "x-3", "", `{"reject":true}`)
		w.waitStatus(t, acmeKey, j, state.Dead)
		w.waitStatus(t, acmeKey, k, state.Dead)
		natstest.Eventually(t, 30*time.Second, func() bool { // a job replays what the index lists
			list = ops.ListReply{}
			return w.call(operator, ops.DeadList, ops.ListRequest{Account: "acme"}, &list) == nil &&
				slices.ContainsFunc(list.Items, func(it ops.Item) bool { return it.ID == j }) &&
				slices.ContainsFunc(list.Items, func(it ops.Item) bool { return it.ID == k })
		}, "dead.list to show %s and %s", j, k)
		var act ops.ActionReply
		natstest.Eventually(t, 30*time.Second, func() bool {
			act = ops.ActionReply{}
			return w.call(operator, ops.DeadDiscard, ops.DiscardRequest{IDs: []string{k}, Reason: "test"}, &act) == nil && act.Done == 1
		}, "dead.discard of %s", k)
		w.waitStatus(t, acmeKey, k, state.Cancelled)
		w.erp.reject.Store(false)
		natstest.Eventually(t, 30*time.Second, func() bool {
			rep = ops.ReplayReply{}
			return w.call(operator, ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme", Kind: "order.create"}, Reason: "fixed"}, &rep) == nil && rep.JobID != ""
		}, "a dead.replay job")
		var job ops.JobReply
		natstest.Eventually(t, 30*time.Second, func() bool {
			return w.call(operator, ops.DeadJob, ops.JobRequest{JobID: rep.JobID}, &job) == nil && job.State == ops.JobDone
		}, "the replay job to finish")
		w.waitStatus(t, acmeKey, j, state.Done)
	})

	t.Run("an entity's timeline from the audit archive", func(t *testing.T) {
		id := w.submit(t, acmeKey, "acme", "order.create", "e-1", `,"entity_id":"cust-9"`, `{"n":9}`)
		w.waitStatus(t, acmeKey, id, state.Done)
		var rep ops.TimelineReply
		natstest.Eventually(t, 30*time.Second, func() bool {
			rep = ops.TimelineReply{}
			return w.call(operator, ops.EntitiesTimeline, ops.TimelineRequest{Account: "acme", EntityID: "cust-9"}, &rep) == nil &&
				len(rep.Events) == 1 && slices.ContainsFunc(rep.Items, func(a ops.AuditEntry) bool { return a.EventID == id && a.Action == "succeed" })
		}, "entities.timeline of cust-9 to show %s done: %+v", id, rep)
	})

	t.Run("events found by the search index", func(t *testing.T) {
		id := w.submit(t, acmeKey, "acme", "order.create", "find-1", `,"entity_id":"cust-search"`, `{"n":10}`)
		w.waitStatus(t, acmeKey, id, state.Done)
		var rep ops.FindReply
		natstest.Eventually(t, 30*time.Second, func() bool {
			rep = ops.FindReply{}
			return w.call(operator, ops.EventsFind, ops.FindRequest{Account: "acme", EntityID: "cust-search", State: state.Done}, &rep) == nil &&
				len(rep.Items) == 1 && rep.Items[0].ID == id
		}, "events.find of cust-search to show %s done: %+v", id, rep)
	})

	t.Run("manual review resolved by the operator", func(t *testing.T) {
		id := w.submit(t, acmeKey, "acme", "credit.slow", "r-1", "", `{"amount":3}`)
		w.waitStatus(t, acmeKey, id, state.ManualReview)
		var list ops.ListReply
		natstest.Eventually(t, 30*time.Second, func() bool {
			list = ops.ListReply{}
			return w.call(operator, ops.ReviewList, ops.ListRequest{Account: "acme"}, &list) == nil && slices.ContainsFunc(list.Items, func(it ops.Item) bool { return it.ID == id })
		}, "review.list to show %s", id)
		var act ops.ActionReply
		if err := w.call(operator, ops.ReviewResolve, ops.ResolveRequest{ID: id, Outcome: ops.OutcomeDone, Reason: "checked by hand"}, &act); err != nil || act.Done != 1 {
			t.Fatalf("review.resolve: %+v, %v", act, err)
		}
		w.waitStatus(t, acmeKey, id, state.Done)
	})

	t.Run("breaker opened and closed by the operator", func(t *testing.T) {
		w.submit(t, brkKey, "brk", "ping.flaky", "b-1", "", `{}`)
		var list ops.BreakersReply
		natstest.Eventually(t, 60*time.Second, func() bool {
			list = ops.BreakersReply{}
			return w.call(operator, ops.BreakersList, ops.BreakersRequest{Account: "brk"}, &list) == nil &&
				slices.ContainsFunc(list.Items, func(b ops.BreakerItem) bool { return b.Target == "flaky" && b.State == "open" })
		}, "the breaker of brk/flaky to open")
		var item ops.BreakerItem
		if err := w.call(operator, ops.BreakersClose, ops.CloseBreakerRequest{Account: "brk", Target: "flaky"}, &item); err != nil || item.State != "closed" {
			t.Fatalf("breakers.close: %+v, %v", item, err)
		}
	})

	t.Run("account paused, event retried, wait cancelled, breaker opened by the operator", func(t *testing.T) {
		var acct ops.AccountReply
		if err := w.call(operator, ops.AccountsPause, ops.PauseRequest{Account: "acme", Reason: "erp migration"}, &acct); err != nil || acct.Paused == nil {
			t.Fatalf("accounts.pause: %+v, %v", acct, err)
		}
		defer func() { // the next subtests use acme (resumed below when all goes well)
			_ = w.call(operator, ops.AccountsResume, ops.ResumeRequest{Account: "acme", Reason: "the test ends"}, nil)
		}()
		at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		id := w.submit(t, acmeKey, "acme", "order.create", "op-1", `,"not_before":"`+at+`"`, `{"n":71}`)
		w.waitStatus(t, acmeKey, id, state.Scheduled)
		var ev ops.EventReply
		if err := w.call(operator, ops.EventsRetry, ops.EventActionRequest{ID: id, Reason: "the customer asked"}, &ev); err != nil {
			t.Fatalf("events.retry: %v", err)
		}
		acct = ops.AccountReply{}
		if err := w.call(operator, ops.AccountsResume, ops.ResumeRequest{Account: "acme", Reason: "migration done"}, &acct); err != nil || acct.Paused != nil {
			t.Fatalf("accounts.resume: %+v, %v", acct, err)
		}
		w.waitStatus(t, acmeKey, id, state.Done)
		hold := w.submit(t, acmeKey, "acme", "credit.hold", "op-2", "", `{"amount":4}`)
		w.waitStatus(t, acmeKey, hold, state.AwaitingCallback)
		if err := w.call(operator, ops.EventsCancel, ops.EventActionRequest{ID: hold, Reason: "the bureau lost it"}, &ev); err != nil || ev.Status != state.Cancelled {
			t.Fatalf("events.cancel_wait: %+v, %v", ev, err)
		}
		var b ops.BreakerItem
		if err := w.call(operator, ops.BreakersOpen, ops.OpenBreakerRequest{Account: "acme", Target: "erp", For: "1h", Reason: "erp maintenance"}, &b); err != nil || b.State != "open" {
			t.Fatalf("breakers.open: %+v, %v", b, err)
		}
		if err := w.call(operator, ops.BreakersClose, ops.CloseBreakerRequest{Account: "acme", Target: "erp", Reason: "erp back"}, &b); err != nil || b.State != "closed" {
			t.Fatalf("breakers.close: %+v, %v", b, err)
		}
		var acts ops.ActionsReply
		if err := w.call(operator, ops.ActionsList, ops.ActionsRequest{Account: "acme"}, &acts); err != nil || len(acts.Items) != 4 {
			t.Fatalf("actions.list: want the pause, resume, open and close, got %+v, %v", acts, err)
		}
	})

	t.Run("an account added by the operator, with no restart", func(t *testing.T) {
		key, hash := mustKey()
		def := `{"targets":{"erp":{"headers":{"X-Newco-Token":"n3wco-token"}}},"keys":{"newco-shop":{"scopes":["submit","read"],"hash":"` + hash + `"}}}`
		var set ops.StoredAccount
		if err := w.call(operator, ops.StoredSet, ops.StoredSetRequest{Account: "newco", Definition: json.RawMessage(def), Reason: "new customer"}, &set); err != nil {
			t.Fatalf("accounts.set: %v", err)
		}
		var id string
		natstest.Eventually(t, 30*time.Second, func() bool {
			body := `{"account":"newco","kind":"order.create","payload":{"n":81}}`
			req, _ := http.NewRequest(http.MethodPost, w.api.URL+"/v1/events", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var v eventView
			_ = json.NewDecoder(resp.Body).Decode(&v)
			id = v.ID
			return resp.StatusCode == http.StatusAccepted
		}, "newco's key to be accepted by ingest")
		w.waitStatus(t, key, id, state.Done)
		var list ops.StoredListReply
		if err := w.call(operator, ops.StoredList, ops.StoredListRequest{}, &list); err != nil || len(list.Items) != 1 || strings.Contains(string(list.Items[0].Definition), "n3wco-token") {
			t.Fatalf("accounts.list: want newco with its token redacted, got %+v, %v", list, err)
		}
		var st ops.ConfigStatus
		if err := w.call(operator, ops.ConfigShow, nil, &st); err != nil || !slices.Equal(st.Stored, []string{"newco"}) {
			t.Fatalf("config.status: want newco in force, got %+v, %v", st, err)
		}
		if err := w.call(operator, ops.StoredRemove, ops.StoredRemoveRequest{Account: "newco", Reason: "the test ends"}, &set); err != nil {
			t.Fatalf("accounts.rm: %v", err)
		}
	})

	t.Run("a repeat's occurrences", func(t *testing.T) {
		// ingest's user writes the repeat's schedule, consumes its firings and submits them.
		natstest.Eventually(t, 60*time.Second, func() bool {
			for at := time.Now().Add(-5 * time.Second).Truncate(time.Second); at.Before(time.Now()); at = at.Add(time.Second) {
				if w.status(t, aliceKey, event.ID("rep", ingest.RepeatKey("pulse", at))) == string(state.Done) {
					return true
				}
			}
			return false
		}, "an occurrence of rep's repeat to be done; permission violations: %v", natstest.Lazy(func() any { return w.allViolations() }))
	})

	t.Run("the screen shows each account's owner", func(t *testing.T) {
		// The deadletter's user reads the dispatchers' leases in tenaz_owners.
		w.submit(t, acmeKey, "acme", "order.create", "s-1", "", `{"n":9}`)
		var page string
		natstest.Eventually(t, 30*time.Second, func() bool {
			req, _ := http.NewRequest(http.MethodGet, w.ops.URL+"/ui/accounts", nil)
			req.SetBasicAuth("alice", aliceKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			page = string(b)
			return resp.StatusCode == http.StatusOK && regexp.MustCompile(`(?s)<tr data-account="acme">.*?<td class="owner">d1`).MatchString(page)
		}, "the accounts page to show d1 owning acme; permission violations: %v; page: %v",
			natstest.Lazy(func() any { return w.log.violations(serviceUser("deadletter")) }), natstest.Lazy(func() any { return page }))
		if strings.Contains(page, `id="owners-error"`) {
			t.Fatalf("the deadletter could not read tenaz_owners: %s", page)
		}
	})

	t.Run("the overview charts acme from the state buckets' feed", func(t *testing.T) {
		// The deadletter's user reads the partitions' KV_ streams (ordered consumers) and scans the records.
		var page string
		natstest.Eventually(t, 30*time.Second, func() bool {
			req, _ := http.NewRequest(http.MethodGet, w.ops.URL+"/ui/overview?account=acme", nil)
			req.SetBasicAuth("alice", aliceKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			page = string(b)
			m := regexp.MustCompile(`data-series="done" data-last="[^"]*" data-total="([0-9.]+)"`).FindStringSubmatch(page)
			return resp.StatusCode == http.StatusOK && m != nil && m[1] != "0"
		}, "the overview to chart acme's done events; permission violations: %v; page: %v",
			natstest.Lazy(func() any { return w.log.violations(serviceUser("deadletter")) }), natstest.Lazy(func() any { return page }))
		if strings.Contains(page, "could not be read") || strings.Contains(page, "The last scan failed") {
			t.Fatalf("the deadletter could not read the state buckets: %s", page)
		}
	})

	t.Run("idle account retired and read again", func(t *testing.T) {
		// The dispatcher's user trims the retired account's messages (purge) and
		// releases its lease; its watch of the partition (an ordered consumer)
		// starts the account's tail (direct gets) again for the next event.
		_, js := w.jetstream(t, userOperator)
		subj := names.NewSubjects(names.DefaultPrefix).WithPartitions(streams.DefaultPartitions)
		var left uint64
		waiting := func() uint64 { // acme's messages in EVENTS, as the operator reads them
			st, err := js.Stream(w.ctx, subj.EventsStream("acme"))
			if err != nil {
				return math.MaxUint64
			}
			info, err := st.Info(w.ctx, jetstream.WithSubjectFilter(subj.EventsOf("acme")))
			if err != nil {
				return math.MaxUint64
			}
			return info.State.Msgs
		}
		for i, n := range []string{"7", "8"} {
			id := w.submit(t, acmeKey, "acme", "order.create", fmt.Sprintf("i-%d", i+1), "", `{"n":`+n+`}`)
			w.waitStatus(t, acmeKey, id, state.Done)
			natstest.Eventually(t, 30*time.Second, func() bool {
				left = waiting()
				return !slices.Contains(w.disp.Accounts(), "acme") && w.disp.Owner("acme") == "" && left == 0
			}, "the idle account retired: its reader stopped (readers %v), its lease released (owner %q), its messages trimmed (%d left); permission violations: %v",
				natstest.Lazy(func() any { return w.disp.Accounts() }), natstest.Lazy(func() any { return w.disp.Owner("acme") }),
				natstest.Lazy(func() any { return left }), natstest.Lazy(func() any { return w.allViolations() }))
		}
	})

	t.Run("entries waiting for room in DEAD", func(t *testing.T) {
		// Every service parks an entry DEAD has no room for in
		// TENAZ_DEAD_WAITING (dead.Writer.Keep), as its own user; ingest
		// moves them into DEAD once there is room. Here each parks one
		// while the account is at a bound of 1, and whichever mover comes
		// first, the running ingest's or this one, moves them once the
		// bound is lifted.
		subj := names.NewSubjects(names.DefaultPrefix)
		var bound atomic.Int64
		bound.Store(1)
		writer := func(svc string) *dead.Writer {
			_, js := w.jetstream(t, serviceUser(svc))
			return &dead.Writer{JS: js, Subj: subj, Bound: func(string) int64 { return bound.Load() }}
		}
		keep := func(d *dead.Writer, svc string, n int, want bool) {
			e := dead.Entry{Account: "waitroom", Kind: "no.such.kind", Reason: dead.ReasonRejected, Error: "unknown kind",
				At: time.Now().UTC(), Raw: []byte(`{"n":1}`)}
			if waiting, err := d.Keep(w.ctx, e, fmt.Sprintf("natsauth-waiting-%s-%d", svc, n)); err != nil || waiting != want {
				t.Fatalf("keep #%d as %s: want waiting %v, got %v, %v; violations: %v", n, serviceUser(svc), want, waiting, err, w.log.violations(serviceUser(svc)))
			}
		}
		ing := writer("ingest")
		keep(ing, "ingest", 0, false)
		for _, svc := range []string{"ingest", "dispatcher", "poller", "deadletter"} {
			keep(writer(svc), svc, 1, true)
		}
		bound.Store(0)
		natstest.Eventually(t, 30*time.Second, func() bool {
			if _, err := ing.Move(w.ctx); err != nil {
				t.Fatalf("move as %s: %v; violations: %v", serviceUser("ingest"), err, w.log.violations(serviceUser("ingest")))
			}
			n, err := ing.WaitingOf(w.ctx, "waitroom")
			return err == nil && n == 0
		}, "the parked entries moved into DEAD")
		for _, svc := range []string{"ingest", "dispatcher", "poller", "deadletter"} {
			if v := w.log.violations(serviceUser(svc)); len(v) > 0 {
				t.Fatalf("%s's permission violations: %v", svc, v)
			}
		}
	})

	t.Run("EVENTS read by direct get", func(t *testing.T) {
		// EVENTS allows direct gets, so nats.go reads its messages so: a
		// tail's batch (the dispatcher, tail.go), an event's schedule (the
		// dispatcher and the poller, queue.HasSchedule), a message by
		// sequence (the deadletter, a max-deliveries advisory's). The flows
		// above need not reach each; these name the boundaries. Ingest's
		// user is refused a batch (refusals).
		subj := names.NewSubjects(names.DefaultPrefix).WithPartitions(streams.DefaultPartitions)
		stream := subj.EventsStream("acme")
		violations := func(svc string) natstest.Lazy {
			return func() any { return fmt.Sprint(w.log.violations(serviceUser(svc))) }
		}
		nc, _ := w.client(t, serviceUser("dispatcher"))
		req := fmt.Sprintf(`{"seq":1,"next_by_subj":%q,"batch":8}`, subj.EventsOf("acme"))
		m, err := nc.Request("$JS.API.DIRECT.GET."+stream, []byte(req), 10*time.Second)
		if err != nil {
			t.Fatalf("a tail's direct get of %s as %s: %v; violations: %v", stream, serviceUser("dispatcher"), err, violations("dispatcher"))
		}
		if st := m.Header.Get("Status"); st != "" && st != "204" && st != "404" { // a message, the batch's end, or none
			t.Fatalf("a tail's direct get of %s: status %s %s", stream, st, m.Header.Get("Description"))
		}
		for _, svc := range []string{"dispatcher", "poller", "deadletter"} {
			_, js := w.jetstream(t, serviceUser(svc))
			st, err := js.Stream(w.ctx, stream)
			if err != nil {
				t.Fatalf("%s: stream info of %s: %v; violations: %v", serviceUser(svc), stream, err, violations(svc))
			}
			if !st.CachedInfo().Config.AllowDirect {
				t.Fatalf("%s does not allow direct gets: this reads nothing by them", stream)
			}
			if svc == "deadletter" {
				_, err = st.GetMsg(w.ctx, 1)
			} else {
				_, err = st.GetLastMsgForSubject(w.ctx, subj.Schedule("acme", event.ID("acme", "no-such-event")))
			}
			if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				t.Errorf("%s reading %s by direct get: %v; violations: %v", serviceUser(svc), stream, err, violations(svc))
			}
		}
	})

	t.Run("digest and advisories reach the operator", func(t *testing.T) {
		select {
		case <-digests:
		case <-time.After(30 * time.Second):
			t.Fatal("no digest on tenaz.advisory.digest within 30s")
		}
		seen := map[string]bool{}
		for len(advisories) > 0 {
			m := <-advisories
			seen[strings.Join(strings.Split(m.Subject, ".")[:3], ".")] = true
		}
		for _, want := range []string{"tenaz.advisory.dead", "tenaz.advisory.review", "tenaz.advisory.breaker"} {
			if !seen[want] {
				t.Errorf("no %s.> advisory reached the operator (saw %v)", want, seen)
			}
		}
	})

	for _, user := range append(serviceUsers(), otherUsers...) {
		if v := w.log.violations(user); len(v) > 0 {
			t.Errorf("NATS user %s was refused what it does:\n%s", user, strings.Join(v, "\n"))
		}
	}

	t.Run("another's job is refused", func(t *testing.T) { w.refusals(t) })
}

// serviceUsers are the NATS users of the four services.
func serviceUsers() []string {
	var out []string
	for _, svc := range services {
		out = append(out, serviceUser(svc))
	}
	return out
}

// refusals has each user try what another user's job is (or nobody's),
// with the connection and credentials of a real user: the server refuses
// it, the client hears why, and nothing happens.
func (w *world) refusals(t *testing.T) {
	w.erp.reject.Store(true)
	deadID := w.submit(t, acmeKey, "acme", "order.create", "z-1", "", `{"reject":true}`)
	w.waitStatus(t, acmeKey, deadID, state.Dead)
	replay, _ := json.Marshal(ops.ReplayRequest{IDs: []string{deadID}, Reason: "not my job"})
	submission := []byte(`{"n":9}`)

	for _, c := range []struct {
		user, what string
		sub        bool // a subscription, else a publish
		subject    string
		data       []byte
	}{
		{serviceUser("ingest"), "replay a dead letter", false, "tenaz.api.dead.replay", replay},
		{serviceUser("poller"), "discard a dead letter", false, "tenaz.api.dead.discard", replay},
		{serviceUser("dispatcher"), "submit to INTAKE", false, "tenaz.intake.acme.order.create", submission},
		{serviceUser("dispatcher"), "take the poller's timers", false, "$JS.API.CONSUMER.MSG.NEXT.EVENTS.poller", []byte(`{"batch":1}`)},
		{serviceUser("dispatcher"), "delete the poller's consumer", false, "$JS.API.CONSUMER.DELETE.EVENTS.poller", nil},
		{serviceUser("dispatcher"), "pause an account", false, "$KV.tenaz_ops.pause.acme", []byte(`{"account":"acme"}`)},
		{serviceUser("ingest"), "pause an account", false, "$KV.tenaz_ops.pause.acme", []byte(`{"account":"acme"}`)},
		{serviceUser("dispatcher"), "make a consumer of an account's events", false, "$JS.API.CONSUMER.CREATE.EVENTS.acct_acme.tenaz.events.acme.>", nil},
		{serviceUser("ingest"), "read the dispatch subjects by direct get", false, "$JS.API.DIRECT.GET.EVENTS", []byte(`{"seq":1,"next_by_subj":"tenaz.events.acme.>","batch":8}`)},
		{serviceUser("ingest"), "make a consumer of an account's events", false, "$JS.API.CONSUMER.CREATE.EVENTS.acct_acme.tenaz.events.acme.>", nil},
		{serviceUser("deadletter"), "pause a consumer of EVENTS", false, "$JS.API.CONSUMER.PAUSE.EVENTS.acct_acme", nil},
		{serviceUser("deadletter"), "take ingest's submissions", false, "$JS.API.CONSUMER.MSG.NEXT.INTAKE.ingest", []byte(`{"batch":1}`)},
		{serviceUser("ingest"), "forge a breaker advisory", false, "tenaz.advisory.breaker.acme.erp", []byte(`{}`)},
		{serviceUser("ingest"), "delete a stream", false, "$JS.API.STREAM.DELETE.EVENTS", nil},
		{serviceUser("deadletter"), "read ingest's replies", true, "_INBOX.tenaz-ingest.>", nil},
		{userProducer, "read a record", false, "$JS.API.DIRECT.GET.KV_tenaz_state.$KV.tenaz_state." + deadID, nil},
		{userProducer, "bind the state bucket", false, "$JS.API.STREAM.INFO.KV_tenaz_state", nil},
		{userProducer, "bypass ingest onto EVENTS", false, "tenaz.events.acme.order.create", submission},
		{userProducer, "read the events", true, "tenaz.events.>", nil},
		{userProducer, "read every reply", true, "_INBOX.>", nil},
		{userProducer, "read the services' replies", true, "_INBOX.tenaz-deadletter.>", nil},
		{userOutbox, "bypass the answer onto INTAKE", false, "tenaz.intake.acme.order.create", submission},
		{userOutbox, "read an event", false, "tenaz.api.ingest.get", []byte(deadID)},
		{userOutbox, "submit through the endpoint of no account", false, "tenaz.api.ingest.submit", submission},
		{userOutbox, "read a record", false, "$JS.API.DIRECT.GET.KV_tenaz_state.$KV.tenaz_state." + deadID, nil},
		{userOutbox, "replay a dead letter", false, "tenaz.api.dead.replay", replay},
		{userOutbox, "read the services' replies", true, "_INBOX.tenaz-ingest.>", nil},
		{userOperator, "write a record", false, "$KV.tenaz_state." + deadID, []byte(`{}`)},
		{userOperator, "purge DEAD", false, "$JS.API.STREAM.PURGE.DEAD", nil},
		{userOperator, "delete a shared consumer", false, "$JS.API.CONSUMER.DELETE.INTAKE.ingest", nil},
	} {
		t.Run(c.user+" may not "+c.what, func(t *testing.T) {
			nc, errs := w.client(t, c.user)
			if c.sub {
				if _, err := nc.SubscribeSync(c.subject); err != nil {
					t.Fatal(err)
				}
			} else {
				m := nats.NewMsg(c.subject)
				m.Data = c.data
				m.Header.Set(ops.AuthorizationHeader, "Bearer "+aliceKey) // even with the operator's key
				m.Header.Set(names.HeaderMsgID, "acme:refused")
				if err := nc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
			}
			_ = nc.Flush()
			select {
			case err := <-errs:
				if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), strconv.Quote(c.subject)) {
					t.Fatalf("want a permissions violation for %q, got %v", c.subject, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no permissions violation within 10s: the server let it through", c.subject)
			}
			if v := w.log.violations(c.user); !slices.ContainsFunc(v, func(l string) bool { return strings.Contains(l, strconv.Quote(c.subject)) }) {
				t.Errorf("the server logged no violation of %s for %q: %v", c.user, c.subject, v)
			}
		})
	}
	// Nothing happened. A submission the producer may make, once done, is
	// behind anything a refused one could have started.
	nc, _ := w.client(t, userProducer)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("tenaz.intake.acme.order.create")
	m.Data = submission
	m.Header.Set(names.HeaderMsgID, "acme:after-refusals")
	if _, err := js.PublishMsg(w.ctx, m); err != nil {
		t.Fatal(err)
	}
	w.waitStatus(t, acmeKey, event.ID("acme", "after-refusals"), state.Done)
	if got := w.status(t, acmeKey, deadID); got != string(state.Dead) {
		t.Errorf("event %s is %s after refused replays, want dead", deadID, got)
	}
	if got := w.status(t, acmeKey, event.ID("acme", "refused")); got != "" {
		t.Errorf("a refused submission became an event (%s)", got)
	}
}

// jetstream is a JetStream context of a client connected as user.
func (w *world) jetstream(t *testing.T, user string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, _ := w.client(t, user)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// --------------------------------------------------------- static checks

// subjectMatches reports whether subject (which may itself hold wildcard
// tokens, as JetStream API subjects with a filter do) is matched by the
// permission pattern p.
func subjectMatches(p, subject string) bool {
	pt, st := strings.Split(p, "."), strings.Split(subject, ".")
	for i, tok := range pt {
		switch {
		case tok == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case tok != "*" && tok != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}

// allowed reports whether subjects s lets subject through.
func (s natsSubjects) allowed(subject string) bool {
	ok := false
	for _, p := range s.Allow {
		ok = ok || subjectMatches(p, subject)
	}
	for _, p := range s.Deny {
		ok = ok && !subjectMatches(p, subject)
	}
	return ok
}

// TestNATSUsersShape checks the users of nats/values.yaml against what the
// services need, without a server: exactly the users of the deployment;
// each service user may apply the whole stream layout of streams/data
// (every service does at start), so a new stream or bucket cannot be
// forgotten here; nobody may delete a stream; each user reads only its
// own replies; the outbox relay's may publish its submit request and
// nothing else; and the sample config uses the prefix the subjects name.
func TestNATSUsersShape(t *testing.T) {
	v := natsValues(t)
	byName := map[string]natsUser{}
	for _, u := range v.Config.Merge.Authorization.Users {
		if _, dup := byName[u.User]; dup {
			t.Errorf("user %s is defined twice", u.User)
		}
		byName[u.User] = u
	}
	want := append(serviceUsers(), otherUsers...)
	if len(byName) != len(want) {
		t.Errorf("users %v, want %v", slices.Sorted(maps.Keys(byName)), want)
	}
	for _, name := range want {
		if _, ok := byName[name]; !ok {
			t.Errorf("no user %s", name)
		}
	}
	if t.Failed() {
		return
	}

	o := streams.Options{Partitions: streams.DefaultPartitions}
	ss, err := streams.Streams(o)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := streams.Buckets(o)
	if err != nil {
		t.Fatal(err)
	}
	var layout []string
	nameList := []string{}
	for _, s := range ss {
		nameList = append(nameList, s.Name)
	}
	for _, b := range bs {
		nameList = append(nameList, "KV_"+b.Bucket)
	}
	for _, n := range nameList {
		for _, verb := range []string{"CREATE", "UPDATE", "INFO"} {
			layout = append(layout, "$JS.API.STREAM."+verb+"."+n)
		}
	}
	ic, _ := streams.IngestConsumer(o)
	dc, _ := streams.DeadletterConsumer()
	layout = append(layout, "$JS.API.INFO",
		"$JS.API.CONSUMER.CREATE."+names.StreamIntake+"."+ic.Durable+"."+ic.FilterSubject,
		"$JS.API.CONSUMER.CREATE.TENAZ_ADVISORIES."+dc.Durable)
	for p := range streams.DefaultPartitions {
		pc, _ := streams.PollerConsumer(o, p)
		layout = append(layout, "$JS.API.CONSUMER.CREATE."+streams.EventsStream("", p)+"."+pc.Durable+"."+pc.FilterSubject)
	}
	for _, svc := range services {
		u := byName[serviceUser(svc)]
		for _, subj := range layout {
			if !u.Permissions.Publish.allowed(subj) {
				t.Errorf("%s may not publish %s: it applies the stream layout at start (streams.Apply)", u.User, subj)
			}
		}
		if !u.Permissions.AllowResponses {
			t.Errorf("%s: allow_responses is off: its micro endpoints could not answer", u.User)
		}
		inbox := natsconn.InboxPrefix(serviceUser(svc)) + ".x"
		if !u.Permissions.Subscribe.allowed(inbox) {
			t.Errorf("%s may not subscribe to its own inbox %s", u.User, inbox)
		}
	}
	// The dispatcher reads each account's messages by direct get and
	// watches each partition's dispatch subjects with an ordered consumer
	// that it makes, reads and deletes under a random name (nats.go:
	// <nuid>_<serial>), and the operators' pauses with a KV watch; it may
	// not touch the poller's consumer, nor write a pause. No service makes
	// a consumer of an account's events any more.
	subj := names.NewSubjects(names.DefaultPrefix).WithPartitions(streams.DefaultPartitions)
	const watch = "mQ3cT8vJ2kX9pL4rW7nB1d_1"
	disp := byName[serviceUser("dispatcher")].Permissions.Publish
	for p := range streams.DefaultPartitions {
		st := subj.EventsStreamOf(p)
		for _, subject := range []string{
			"$JS.API.DIRECT.GET." + st,
			"$JS.API.DIRECT.GET." + st + "." + strings.TrimSuffix(subj.SchedulesIn(p), ">") + "acme-1",
			"$JS.API.CONSUMER.CREATE." + st + "." + watch + "." + subj.EventsIn(p),
			"$JS.API.CONSUMER.MSG.NEXT." + st + "." + watch,
			"$JS.API.CONSUMER.DELETE." + st + "." + watch,
		} {
			if !disp.allowed(subject) {
				t.Errorf("%s may not publish %s: its tails and watches need it", serviceUser("dispatcher"), subject)
			}
		}
		for _, subject := range []string{
			"$JS.API.CONSUMER.MSG.NEXT." + st + "." + names.ConsumerPoller, "$JS.ACK." + st + "." + names.ConsumerPoller + ".1.1.1.1.1.0",
			"$JS.API.CONSUMER.DELETE." + st + "." + names.ConsumerPoller, "$JS.API.CONSUMER.PAUSE." + st + "." + names.ConsumerPoller,
			"$JS.API.CONSUMER.UNPIN." + st + "." + names.ConsumerPoller,
		} {
			if disp.allowed(subject) {
				t.Errorf("%s may publish %s: the poller's consumer is not its", serviceUser("dispatcher"), subject)
			}
		}
		// Each service that finishes events wakes the next of an ordered
		// lane (queue.Wake) and releases a lane whose last event finished.
		for _, svc := range services {
			for _, subject := range []string{
				"$JS.API.DIRECT.GET." + st + "." + strings.TrimSuffix(subj.SchedulesIn(p), ">") + "acme-1",
				"$JS.API.STREAM.MSG.DELETE." + st,
				strings.TrimSuffix(subj.EventsIn(p), ">") + "acme.order.create",
				"$JS.API.DIRECT.GET.KV_tenaz_lanes.$KV.tenaz_lanes.x",
				"$KV.tenaz_lanes.x",
			} {
				if !byName[serviceUser(svc)].Permissions.Publish.allowed(subject) {
					t.Errorf("%s may not publish %s: it wakes the next event of a lane", serviceUser(svc), subject)
				}
			}
		}
		account := "$JS.API.CONSUMER.CREATE." + st + ".acct_acme." + strings.TrimSuffix(subj.EventsIn(p), ">") + "acme.>"
		for _, svc := range services {
			if byName[serviceUser(svc)].Permissions.Publish.allowed(account) {
				t.Errorf("%s may publish %s: no service makes a consumer per account", serviceUser(svc), account)
			}
		}
	}
	// The dispatcher (its tails), ingest (its backlog) and the poller (its
	// polls) read the pauses.
	for _, svc := range []string{"dispatcher", "ingest", "poller"} {
		for subject, want := range map[string]bool{
			"$JS.API.CONSUMER.CREATE.KV_tenaz_ops." + watch + ".$KV.tenaz_ops.pause.*": true,
			"$JS.API.CONSUMER.DELETE.KV_tenaz_ops." + watch:                            true,
			"$JS.API.CONSUMER.CREATE.KV_tenaz_ops." + watch + ".$KV.tenaz_ops.>":       false,
			"$KV.tenaz_ops.pause.acme":                                                 false,
		} {
			if byName[serviceUser(svc)].Permissions.Publish.allowed(subject) != want {
				t.Errorf("%s may publish %s: %v, want %v (it reads the operators' pauses, nothing else of tenaz_ops)", serviceUser(svc), subject, !want, want)
			}
		}
	}
	// The poller watches the breakers (an open one holds polls) and never
	// writes one: a breaker is the dispatchers' and the operators'.
	for subject, want := range map[string]bool{
		"$JS.API.CONSUMER.CREATE.KV_tenaz_breakers." + watch + ".$KV.tenaz_breakers.>": true,
		"$JS.API.CONSUMER.DELETE.KV_tenaz_breakers." + watch:                           true,
		"$KV.tenaz_breakers.acme.erp":                                                  false,
	} {
		if byName[serviceUser("poller")].Permissions.Publish.allowed(subject) != want {
			t.Errorf("%s may publish %s: %v, want %v (it watches the breakers and writes none)", serviceUser("poller"), subject, !want, want)
		}
	}
	// The poller's polls hold slots of the targets' concurrency as a guest
	// of the dispatchers' replicas: it writes its own heartbeat, and no
	// member's nor an account's lease.
	for subject, want := range map[string]bool{
		"$KV.tenaz_owners.g.poller_p-1": true,
		"$KV.tenaz_owners.m.d-1":        false,
		"$KV.tenaz_owners.a.acme":       false,
		"$JS.API.CONSUMER.CREATE.KV_tenaz_owners." + watch + ".$KV.tenaz_owners.>":        true,
		"$JS.API.CONSUMER.CREATE.KV_tenaz_quotas." + watch + ".$KV.tenaz_quotas.t.bureau": true,
		"$KV.tenaz_quotas.k.key-1": false,
	} {
		if byName[serviceUser("poller")].Permissions.Publish.allowed(subject) != want {
			t.Errorf("%s may publish %s: %v, want %v (a guest of the owners, with slots of the targets' limits)", serviceUser("poller"), subject, !want, want)
		}
	}
	for _, name := range []string{userProducer, userOutbox} {
		if inbox := natsconn.InboxPrefix(name) + ".x"; !byName[name].Permissions.Subscribe.allowed(inbox) {
			t.Errorf("%s may not subscribe to its own inbox %s", name, inbox)
		}
	}
	// The relay submits through ingest's endpoint and does nothing else.
	if got, want := byName[userOutbox].Permissions.Publish.Allow, []string{submitSubject}; !slices.Equal(got, want) {
		t.Errorf("%s may publish %q, want exactly %q: the relay's one request", userOutbox, got, want)
	}
	for _, u := range byName {
		for _, n := range nameList {
			for _, verb := range []string{"DELETE", "PURGE"} {
				subj := "$JS.API.STREAM." + verb + "." + n
				if verb == "PURGE" && slices.Contains(purges[u.User], n) {
					continue
				}
				if u.Permissions.Publish.allowed(subj) {
					t.Errorf("%s may publish %s", u.User, subj)
				}
			}
		}
		for _, other := range want {
			if other != u.User && u.User != userOperator && u.Permissions.Subscribe.allowed(natsconn.InboxPrefix(other)+".x") {
				t.Errorf("%s may read the replies of %s", u.User, other)
			}
		}
		if u.Permissions.Publish.allowed("$SYS.REQ.SERVER.PING") || u.Permissions.Subscribe.allowed("$SYS.ACCOUNT.x") {
			t.Errorf("%s reaches the system account's subjects", u.User)
		}
	}

	// The subjects name the prefix "tenaz": the sample config must use it.
	r := rendered{render(t, "kustomize/overlays/example")}
	var tc struct {
		Prefix string `yaml:"prefix"`
	}
	if err := yaml.Unmarshal([]byte(str(r.configMap("tenaz-config"), "data", "tenaz.yaml")), &tc); err != nil {
		t.Fatal(err)
	}
	if tc.Prefix != names.DefaultPrefix {
		t.Errorf("tenaz.yaml prefix %q: the NATS permissions name %q", tc.Prefix, names.DefaultPrefix)
	}
}

// purges are the streams a user may purge (by subject): ingest its
// keeper messages and cancelled schedules, the deadletter the digest's
// schedule when the digest is turned off and an event's schedule when an
// operator retries it now or cancels its wait (and the search index the
// entity entries of an earlier version), the dispatcher the timer of
// an event a webhook finished during its run; the dispatcher and the
// poller trim EVENTS (an account's settled messages, a partition's
// settled timers) and ingest INTAKE.
var purges = map[string][]string{
	serviceUser("ingest"):     {names.StreamIntake, streams.EventsStream("", 0), streams.EventsStream("", 1), streams.EventsStream("", 2), streams.EventsStream("", 3), ingest.StreamRepeats},
	serviceUser("deadletter"): {deadletter.StreamDigest, "KV_" + search.Bucket, streams.EventsStream("", 0), streams.EventsStream("", 1), streams.EventsStream("", 2), streams.EventsStream("", 3)},
	serviceUser("dispatcher"): {streams.EventsStream("", 0), streams.EventsStream("", 1), streams.EventsStream("", 2), streams.EventsStream("", 3)},
	serviceUser("poller"):     {streams.EventsStream("", 0), streams.EventsStream("", 1), streams.EventsStream("", 2), streams.EventsStream("", 3)},
}

// TestNATSVersionPinned checks that the values pin a server image that
// tenaz accepts (natsconn.MinServerVersion: message and cron schedules)
// and that is the nats-server its tests run on, and that the install
// command pins a 2.x chart recent enough.
func TestNATSVersionPinned(t *testing.T) {
	v := natsValues(t)
	img := v.Container.Image
	if img.Repository != "nats" {
		t.Errorf("container.image.repository %q, want the official image nats", img.Repository)
	}
	ver := strings.TrimSuffix(img.Tag, "-alpine")
	if err := natsconn.CheckServerVersion(ver); err != nil {
		t.Errorf("container.image.tag %q: %v", img.Tag, err)
	}
	if ver != server.VERSION {
		t.Errorf("container.image.tag %q: want %s-alpine, the nats-server of go.mod that the tests run on", img.Tag, server.VERSION)
	}
	data, err := os.ReadFile("nats/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	install := regexp.MustCompile(`helm (?:install|upgrade --install) nats nats/nats --version (\S+)`)
	for what, text := range map[string][]byte{"nats/values.yaml": data, "docs/deploy.md": docs} {
		ms := install.FindAllSubmatch(text, -1)
		if len(ms) == 0 {
			t.Errorf("%s: no `helm install nats nats/nats --version <chart>`: an install without --version takes whatever chart (and server) is newest", what)
		}
		for _, m := range ms {
			chart := string(m[1])
			if !strings.HasPrefix(chart, "2.") || natsconn.CheckServerVersion(chart) != nil {
				t.Errorf("%s: chart --version %s: want a 2.x chart of %s or later (the chart's version is its server's)", what, chart, natsconn.MinServerVersion)
			}
		}
	}
}

// TestNATSCredentialsRequired checks that every service's pod connects as
// its NATS user with a password from the same Secret key the NATS servers
// read that user's password from, required (not optional), and that
// nats-box connects as the operator.
func TestNATSCredentialsRequired(t *testing.T) {
	v := natsValues(t)
	secretOf := map[string]helmEnv{} // user -> where the servers read its password
	for _, u := range v.Config.Merge.Authorization.Users {
		m := passwordRef.FindStringSubmatch(u.Password)
		if m == nil {
			t.Errorf("user %s: password %q, want << $VARIABLE >>", u.User, u.Password)
			continue
		}
		e, ok := v.Container.Env[m[1]]
		if !ok || e.Secret == "" || e.Key == "" {
			t.Errorf("user %s: the NATS container's env has no secretKeyRef %s", u.User, m[1])
		}
		secretOf[u.User] = e
	}
	for _, dir := range []string{"kustomize/base", "kustomize/overlays/example"} {
		o := decodeTyped(t, dir)
		for _, svc := range services {
			d := o.deployments["tenaz-"+svc]
			if d == nil {
				t.Fatalf("%s: no Deployment tenaz-%s", dir, svc)
			}
			c := d.Spec.Template.Spec.Containers[0]
			for _, ef := range c.EnvFrom {
				if ef.SecretRef != nil && ef.SecretRef.Optional != nil && *ef.SecretRef.Optional {
					t.Errorf("%s: tenaz-%s: an optional envFrom Secret %s: the credentials must be required", dir, svc, ef.SecretRef.Name)
				}
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				env[e.Name] = e
			}
			if got := env["NATS_USER"].Value; got != serviceUser(svc) {
				t.Errorf("%s: tenaz-%s: NATS_USER %q, want its own user %s", dir, svc, got, serviceUser(svc))
			}
			ref := env["NATS_PASSWORD"].ValueFrom
			if ref == nil || ref.SecretKeyRef == nil {
				t.Errorf("%s: tenaz-%s: NATS_PASSWORD must come from a secretKeyRef", dir, svc)
				continue
			}
			if ref.SecretKeyRef.Optional != nil && *ref.SecretKeyRef.Optional {
				t.Errorf("%s: tenaz-%s: NATS_PASSWORD is optional: a pod would start without it", dir, svc)
			}
			want := secretOf[serviceUser(svc)]
			if ref.SecretKeyRef.Name != want.Secret || ref.SecretKeyRef.Key != want.Key {
				t.Errorf("%s: tenaz-%s: NATS_PASSWORD from %s/%s, but the NATS servers read %s's password from %s/%s",
					dir, svc, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key, serviceUser(svc), want.Secret, want.Key)
			}
		}
	}
	box := v.NatsBox.Container.Env
	if box["NATS_USER"].Value != userOperator || box["NATS_PASSWORD"].Secret != secretOf[userOperator].Secret || box["NATS_PASSWORD"].Key != secretOf[userOperator].Key {
		t.Errorf("natsBox: want NATS_USER %s and NATS_PASSWORD from its Secret key, got %+v", userOperator, box)
	}
}

// Helm reads the values with sigs.k8s.io/yaml; it must read what these
// tests read (the permissions are flow sequences with comments).
func TestNATSValuesHelmParses(t *testing.T) {
	data, err := os.ReadFile("nats/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var helm any
	if err := sigsyaml.Unmarshal(data, &helm); err != nil {
		t.Fatalf("sigs.k8s.io/yaml: %v", err)
	}
	a, _ := json.Marshal(helm)
	b, _ := json.Marshal(natsValuesRaw(t))
	if string(a) != string(b) {
		t.Errorf("sigs.k8s.io/yaml reads nats/values.yaml differently from yaml.v3:\n%s\n%s", a, b)
	}
}
