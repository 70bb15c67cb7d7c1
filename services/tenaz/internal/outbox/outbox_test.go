package outbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/tenaz"
	"github.com/tenaz/tenaz/services/tenaz/internal/outbox"
)

const waitFor = 60 * time.Second

// harness is one test's world: a database with the outbox table, tenaz
// in process on an embedded nats-server delivering kind order.paid to a
// recording target, and a count of ingest's answers to the relay.
type harness struct {
	t      *testing.T
	dir    string
	dsn    string
	db     *pgxpool.Pool
	tz     *tenaz.System
	target *target

	accepted, duplicate, refused atomic.Int64 // ingest's answers to the relay: 202, 200, other
}

func setup(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), dsn: newDB(t), target: newTarget(t)}
	db, err := pgxpool.New(t.Context(), h.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	h.db = db
	if _, err := db.Exec(t.Context(), outbox.Schema(config.DefaultOutboxTable)); err != nil {
		t.Fatalf("apply the schema: %v", err)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, `
nats:
  embedded: {store_dir: %q, sync: always, listen: "127.0.0.1:-1"}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
auth: {disabled: true}
targets:
  shop: {url: %q, timeout: 5s}
kinds:
  order.paid: {target: shop, attempts: 3, backoff: {initial: 1s, max: 2s, jitter: 0}}
`, filepath.Join(h.dir, "nats"), h.target.URL+"/{{.Kind}}"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tz, err := tenaz.New(tenaz.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := tz.Start(ctx); err != nil {
		t.Fatalf("start tenaz: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := tz.Stop(ctx); err != nil {
			t.Errorf("stop tenaz: %v", err)
		}
	})
	h.tz = tz
	// Every answer to a relay, as the relay sees it: its inbox.
	nc, err := nats.Connect(tz.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(natsInbox(), func(m *nats.Msg) {
		switch m.Header.Get("Tenaz-Status") {
		case "202":
			h.accepted.Add(1)
		case "200":
			h.duplicate.Add(1)
		default:
			h.refused.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

func natsInbox() string { return "_INBOX." + outbox.Name + ".>" }

// insert writes rows in one transaction, as a producer does, and returns
// their ids. Each row is order.paid for acme with payload {"key", "n"}
// and ordering key key (none when key is "").
func (h *harness) insert(keys []string, from int) []string {
	h.t.Helper()
	tx, err := h.db.Begin(h.t.Context())
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	ids := make([]string, len(keys))
	for i, k := range keys {
		var key *string
		if k != "" {
			key = &k
		}
		if err := tx.QueryRow(h.t.Context(), `INSERT INTO tenaz_outbox (account, kind, ordering_key, payload) VALUES ('acme', 'order.paid', $1, $2) RETURNING id`,
			key, fmt.Sprintf(`{"key":%q,"n":%d}`, k, from+i)).Scan(&ids[i]); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := tx.Commit(h.t.Context()); err != nil {
		h.t.Fatal(err)
	}
	return ids
}

// count is the number of rows with status.
func (h *harness) count(status string) int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRow(h.t.Context(), "SELECT count(*) FROM tenaz_outbox WHERE status = $1", status).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// waitSettled waits until no row is pending.
func (h *harness) waitSettled() {
	h.t.Helper()
	natstest.Eventually(h.t, waitFor, func() bool { return h.count(outbox.StatusPending) == 0 },
		"every row settled (pending %v, sent %v)", natstest.Lazy(func() any { return h.count(outbox.StatusPending) }), natstest.Lazy(func() any { return h.count(outbox.StatusSent) }))
}

// assertAllSentOnce checks the end state: every row sent and carrying its
// event's id, tenaz made exactly one event per row (accepted counts the
// 202s), and the target got each once, each key's rows in seq order.
func (h *harness) assertAllSentOnce(ids []string) {
	h.t.Helper()
	if n := h.count(outbox.StatusSent); n != len(ids) {
		h.t.Fatalf("want all %d rows sent, got %d", len(ids), n)
	}
	rows, _ := h.db.Query(h.t.Context(), "SELECT id::text, account, event_id FROM tenaz_outbox")
	sent, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Account, EventID string }])
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range sent {
		if want := event.ID(r.Account, r.ID); r.EventID != want {
			h.t.Fatalf("row %s: want event_id %s (the row id as idempotency key), got %s", r.ID, want, r.EventID)
		}
	}
	// Each row's event was created once (202); a row whose submission was
	// answered too late or refused under load is submitted again and
	// answered as a duplicate (200) instead. The answers reach this test's
	// own connection on their way, maybe after the relay has marked the
	// row sent.
	natstest.Eventually(h.t, waitFor, func() bool { return h.accepted.Load()+h.duplicate.Load() >= int64(len(ids)) },
		"an answer (202 or 200) to every row's submission")
	if a, d := h.accepted.Load(), h.duplicate.Load(); a > int64(len(ids)) || a+d < int64(len(ids)) {
		h.t.Fatalf("tenaz: want %d events created (202), or answered as duplicates of a resubmission (200), got %d created, %d duplicates, %d refused",
			len(ids), a, d, h.refused.Load())
	}
	h.target.waitCalls(h.t, len(ids))
	h.target.assertOnceInOrder(h.t)
}

// target is the API tenaz delivers to: it records each call.
type target struct {
	*httptest.Server
	mu     sync.Mutex
	calls  map[string]int   // event id → calls
	byKey  map[string][]int // ordering key → n of each call, in arrival order
	ncalls int
}

func newTarget(t *testing.T) *target {
	tg := &target{calls: map[string]int{}, byKey: map[string][]int{}}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Key string `json:"key"`
			N   int    `json:"n"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &p)
		tg.mu.Lock()
		tg.calls[r.Header.Get(names.HeaderEventID)]++
		if p.Key != "" {
			tg.byKey[p.Key] = append(tg.byKey[p.Key], p.N)
		}
		tg.ncalls++
		tg.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) total() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.ncalls
}

func (tg *target) waitCalls(t *testing.T, n int) {
	t.Helper()
	natstest.Eventually(t, waitFor, func() bool { return tg.total() >= n }, "target: %d calls (got %v)", n, natstest.Lazy(func() any { return tg.total() }))
}

func (tg *target) assertOnceInOrder(t *testing.T) {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for id, n := range tg.calls {
		if n != 1 {
			t.Errorf("target: want event %s delivered once, got %d calls", id, n)
		}
	}
	for key, ns := range tg.byKey {
		for i := 1; i < len(ns); i++ {
			if ns[i] < ns[i-1] {
				t.Fatalf("target: ordering key %s delivered out of order: %v", key, ns)
			}
		}
	}
}

// relay is a `tenaz outbox relay` process.
type relay struct {
	cmd     *exec.Cmd
	done    chan error
	out     *servicetest.LogBuffer
	running chan struct{}
	sent    atomic.Int64 // the sum of its "batch" log lines' sent
}

// startRelay runs the tenaz binary's relay against h with the outbox
// settings extra (YAML flow mapping entries) and waits until it runs.
func (h *harness) startRelay(extra string) *relay {
	h.t.Helper()
	f := filepath.Join(h.dir, fmt.Sprintf("relay-%d.yaml", time.Now().UnixNano()))
	doc := fmt.Sprintf("nats: {url: %q}\noutbox: {dsn: %q%s}\n", h.tz.NATSURL(), h.dsn, extra)
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(natstest.Binary(h.t, "../../cmd/tenaz"), "outbox", "relay", "--config", f)
	cmd.Env = append(os.Environ(), "LOG_FORMAT=json", "LOG_LEVEL=info")
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	r := &relay{cmd: cmd, done: make(chan error, 1), out: &servicetest.LogBuffer{}, running: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, _ = r.out.Write(append(sc.Bytes(), '\n'))
			var line struct {
				Message string `json:"message"`
				Sent    int64  `json:"sent"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch line.Message {
			case "outbox relay running":
				close(r.running)
			case "batch":
				r.sent.Add(line.Sent)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		r.done <- cmd.Wait()
	}()
	h.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.done
		if h.t.Failed() {
			h.t.Logf("relay output:\n%s", r.out)
		}
	})
	select {
	case <-r.running:
	case err := <-r.done:
		h.t.Fatalf("relay exited before running: %v\n%s", err, r.out)
	case <-time.After(waitFor):
		h.t.Fatalf("relay not running within %s:\n%s", waitFor, r.out)
	}
	return r
}

// kill SIGKILLs the relay and waits for it to be gone.
func (r *relay) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-r.done
	r.done <- err // for Cleanup
}

// keys lists n ordering keys cycling over k keys ("o0".."o<k-1>"), or n
// empty keys for k == 0.
func keys(n, k int) []string {
	out := make([]string, n)
	for i := range out {
		if k > 0 {
			out[i] = fmt.Sprintf("o%d", i%k)
		}
	}
	return out
}

// A relay SIGKILLed in the middle of a batch (tenaz has accepted some of
// its rows, none is marked yet) and started again loses no row and
// duplicates none: it submits the batch again, tenaz answers the rows it
// had accepted as duplicates (200, same event), and every row ends sent,
// delivered once, each ordering key in order.
func TestRelayKilledMidBatchLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	h := setup(t)
	const n = 300
	// Three keys of 100 rows in one batch: each key's rows go one after
	// the other, so the batch lasts long enough to be killed inside.
	ids := h.insert(keys(n, 3), 0)
	r := h.startRelay(", batch: 300")
	natstest.Eventually(t, waitFor, func() bool { return h.accepted.Load() >= 30 }, "tenaz to accept 30 rows of the batch (got %v)", natstest.Lazy(func() any { return int(h.accepted.Load()) }))
	r.kill(t)
	before := h.accepted.Load()
	if sent := h.count(outbox.StatusSent); sent != 0 || before >= n {
		t.Fatalf("want the relay killed mid-batch (rows accepted by tenaz, none marked), got %d accepted and %d marked sent", before, sent)
	}
	h.startRelay(", batch: 300")
	h.waitSettled()
	if d := h.duplicate.Load(); d < before {
		t.Errorf("want the %d rows accepted before the kill answered as duplicates after it, got %d duplicates", before, d)
	}
	h.assertAllSentOnce(ids)
	t.Logf("killed after %d of %d rows accepted; the restart resubmitted them (%d duplicates answered)", before, n, h.duplicate.Load())
}

// Two relays on one table at once (rows claimed with FOR UPDATE SKIP
// LOCKED) send each row exactly once: tenaz never answers a duplicate,
// both relays take part, and each ordering key stays in order although
// its rows are spread over both.
func TestTwoRelaysSendEachRowOnce(t *testing.T) {
	t.Parallel()
	h := setup(t)
	a := h.startRelay(", batch: 20, poll_interval: 100ms")
	b := h.startRelay(", batch: 20, poll_interval: 100ms")
	var ids []string
	ids = append(ids, h.insert(keys(200, 0), 0)...)
	ids = append(ids, h.insert(keys(200, 10), 200)...)
	h.waitSettled()
	h.assertAllSentOnce(ids)
	// A duplicate is a row submitted twice: by both relays, or by one
	// after a refused or late answer (CI load); only the latter may be.
	if d, r := h.duplicate.Load(), h.refused.Load(); d > r && d > 0 {
		t.Fatalf("want no row submitted twice but after a refusal, got %d duplicates answered, %d refusals", d, r)
	}
	natstest.Eventually(t, waitFor, func() bool { return a.sent.Load()+b.sent.Load() == int64(len(ids)) },
		"the relays' batch logs to add up to %d rows (a %v, b %v)", len(ids), natstest.Lazy(func() any { return int(a.sent.Load()) }), natstest.Lazy(func() any { return int(b.sent.Load()) }))
	if a.sent.Load() == 0 || b.sent.Load() == 0 {
		t.Fatalf("want both relays to send rows, got %d and %d", a.sent.Load(), b.sent.Load())
	}
	t.Logf("relay a sent %d rows, relay b %d", a.sent.Load(), b.sent.Load())
}

// A row tenaz refuses for good (an unknown kind: 422; an invalid account:
// 400; one over NATS's max_payload, which nats.go never sends; one never
// due, not_before infinity: 400) is marked
// failed with the reason; the rows around it, of the same ordering key,
// are sent and delivered in order.
func TestPoisonRowIsMarkedFailedAndTheRestFlow(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.insert([]string{"o1"}, 1)
	var unknownKind, badAccount string
	if err := h.db.QueryRow(t.Context(), `INSERT INTO tenaz_outbox (account, kind, ordering_key, payload) VALUES ('acme', 'order.lost', 'o1', '{"key":"o1","n":2}') RETURNING id`).Scan(&unknownKind); err != nil {
		t.Fatal(err)
	}
	if err := h.db.QueryRow(t.Context(), `INSERT INTO tenaz_outbox (account, kind, ordering_key, payload) VALUES ('ac me', 'order.paid', 'o1', '{"key":"o1","n":3}') RETURNING id`).Scan(&badAccount); err != nil {
		t.Fatal(err)
	}
	var tooLarge string // over the server's max_payload: nats.go refuses to send it
	if err := h.db.QueryRow(t.Context(), `INSERT INTO tenaz_outbox (account, kind, ordering_key, payload) VALUES ('acme', 'order.paid', 'o1', json_build_object('pad', repeat('x', 9000000))) RETURNING id`).Scan(&tooLarge); err != nil {
		t.Fatal(err)
	}
	var never string // a timestamp pgx cannot put in a time.Time
	if err := h.db.QueryRow(t.Context(), `INSERT INTO tenaz_outbox (account, kind, ordering_key, payload, not_before) VALUES ('acme', 'order.paid', 'o1', '{"key":"o1","n":4}', 'infinity') RETURNING id`).Scan(&never); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Exec(t.Context(), `INSERT INTO tenaz_outbox (account, kind, ordering_key, payload, not_before) VALUES ('acme', 'order.paid', 'o1', '{"key":"o1","n":5}', '-infinity')`); err != nil {
		t.Fatal(err)
	}
	h.insert([]string{"o1", ""}, 6)
	h.startRelay(", poll_interval: 100ms")
	h.waitSettled()
	for id, want := range map[string]string{unknownKind: "422 unknown_kind", badAccount: "400 invalid_account", tooLarge: "413 too_large: the submission is over the NATS server's max_payload", never: "400 malformed: invalid submission: not_before is more than a year ahead"} {
		var status, reason string
		if err := h.db.QueryRow(t.Context(), "SELECT status, coalesce(error, '') FROM tenaz_outbox WHERE id = $1", id).Scan(&status, &reason); err != nil {
			t.Fatal(err)
		}
		if status != outbox.StatusFailed || !strings.HasPrefix(reason, want) {
			t.Errorf("row %s: want failed with %q…, got %s with %q", id, want, status, reason)
		}
	}
	if n := h.count(outbox.StatusSent); n != 4 {
		t.Fatalf("want the 4 good rows sent, got %d", n)
	}
	h.target.waitCalls(t, 4)
	h.target.assertOnceInOrder(t)
	if got := h.target.byKey["o1"]; len(got) != 3 || got[0] != 1 || got[1] != 5 || got[2] != 6 {
		t.Fatalf("target: want o1's good rows 1, 5 (due since -infinity) then 6, got %v", got)
	}
}

// SIGTERM stops the relay cleanly (exit 0) once its batch is done.
func TestRelayStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	h := setup(t)
	r := h.startRelay("")
	ids := h.insert(keys(3, 0), 0)
	h.waitSettled()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.done <- err // for Cleanup
		if err != nil {
			t.Fatalf("want exit 0 on SIGTERM, got %v\n%s", err, r.out)
		}
	case <-time.After(waitFor):
		t.Fatalf("relay still running %s after SIGTERM", waitFor)
	}
	h.assertAllSentOnce(ids)
}
