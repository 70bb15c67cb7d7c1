package ingest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/ingest"
)

// A submission whose write reached INTAKE but whose acknowledgement never
// came back (the connection lost what the server sent after it) is
// answered 503 outcome_unknown, not "not taken": it was stored, becomes
// its event, and sending it again with the same key is answered with that
// event (200), not a second one.
func TestLostAcknowledgementAnswersOutcomeUnknown(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	p := startLossyProxy(t, h.Srv.ClientURL(), true)
	api, reg := h.replicaVia(p)

	const key = "lost-1"
	body := `{"account":"acme","kind":"order.create","payload":{"order_id":"o-lost"}}`
	id := event.ID("acme", key)
	r := h.post(api, body, "Idempotency-Key", key)
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("want 503 for a submission whose acknowledgement was lost, got %d: %s", r.Status, r.Body)
	}
	if code := r.errorCode(t); code != "outcome_unknown" {
		t.Fatalf("want code outcome_unknown (the submission may have been taken), got %q: %s", code, r.Body)
	}
	for _, want := range []string{"may have been taken", id, "same idempotency key"} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("the message should say %q: %s", want, r.Body)
		}
	}
	if got := servicetest.Metric(t, reg, metrics.NameRejected, "reason", "outcome_unknown"); got != 1 {
		t.Errorf("want %s{reason=outcome_unknown} 1, got %v", metrics.NameRejected, got)
	}

	// The server did store it: the acknowledgement the proxy kept from
	// the replica names INTAKE and a sequence.
	ack := p.droppedAck(t)
	if ack.Stream != names.StreamIntake || ack.Sequence == 0 {
		t.Fatalf("want the lost acknowledgement to name a message of %s, got %+v", names.StreamIntake, ack)
	}
	// It becomes its event, and the submission sent again is answered
	// with that event.
	natstest.Eventually(t, 20*time.Second, func() bool { _, ok := h.Lookup(id); return ok }, "event %s accepted from INTAKE", id)
	again := h.do("POST", "/v1/events", body, "Idempotency-Key", key)
	var v ingest.View
	again.json(t, &v)
	if again.Status != http.StatusOK || v.ID != id {
		t.Fatalf("want the submission sent again answered 200 with the event it was taken as (%s), got %d: %s", id, again.Status, again.Body)
	}
}

// When only the acknowledgement is lost and the outcome of the
// submission still comes, the outcome is the answer (202 and the event).
func TestLostAcknowledgementWithOutcomeAnswersTheEvent(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	p := startLossyProxy(t, h.Srv.ClientURL(), false)
	api, _ := h.replicaVia(p)

	body := `{"account":"acme","kind":"order.create","payload":{"order_id":"o-ack"}}`
	r := h.post(api, body, "Idempotency-Key", "ack-1")
	var v ingest.View
	r.json(t, &v)
	if r.Status != http.StatusAccepted || v.ID != event.ID("acme", "ack-1") || v.Status != "pending" {
		t.Fatalf("want 202 with the pending event %s, got %d: %s", event.ID("acme", "ack-1"), r.Status, r.Body)
	}
	if ack := p.droppedAck(t); ack.Stream != names.StreamIntake {
		t.Fatalf("want the lost acknowledgement to be INTAKE's, got %+v", ack)
	}
}

// replicaVia starts another ingest replica whose NATS connection goes
// through p, with its metrics on a registry of its own; it returns the
// server of its HTTP API and that registry.
func (h *harness) replicaVia(p *lossyProxy) (*httptest.Server, *prometheus.Registry) {
	h.t.Helper()
	nc, err := nats.Connect(p.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		h.t.Fatalf("connect through the proxy: %v", err)
	}
	h.t.Cleanup(nc.Close)
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		h.t.Fatal(err)
	}
	svc, err := ingest.New(ingest.Options{Conn: nc, Config: h.cfg, Metrics: set})
	if err != nil {
		h.t.Fatalf("ingest.New: %v", err)
	}
	servicetest.Run(h.t, h.Ctx(), svc)
	mux := http.NewServeMux()
	svc.Routes(mux)
	api := httptest.NewServer(mux)
	h.t.Cleanup(api.Close)
	return api, reg
}

// post sends a submission to the ingest API api; headers alternate name,
// value.
func (h *harness) post(api *httptest.Server, body string, headers ...string) response {
	h.t.Helper()
	r := servicetest.Send(h.t, h.Ctx(), api.Client(), http.MethodPost, api.URL+"/v1/events", "", body, headers...)
	return response{Status: r.Status, Body: r.Body}
}

// lossyProxy forwards NATS client connections to a server, reading the
// protocol both ways. It notes the reply subject of every publish to
// tenaz.intake.> (and, with outcomes, its Tenaz-Reply header) and drops
// the server's messages to those subjects: the server stores the
// submission and answers, and the client never hears it, as when a
// connection is lost after its write went out.
type lossyProxy struct {
	t        *testing.T
	ln       net.Listener
	target   string
	outcomes bool

	mu     sync.Mutex
	closed bool
	drop   map[string]bool // reply subjects whose messages are dropped
	acks   chan []byte     // the dropped messages to publishes' reply subjects
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startLossyProxy(t *testing.T, serverURL string, outcomes bool) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{t: t, ln: ln, target: strings.TrimPrefix(serverURL, "nats://"), outcomes: outcomes,
		drop: map[string]bool{}, acks: make(chan []byte, 16)}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *lossyProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *lossyProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.wg.Go(func() { p.pump(c, s, p.watch) })
		p.wg.Go(func() { p.pump(s, c, p.filter) })
		p.mu.Unlock()
	}
}

// pump copies frames from src to dst while keep says so; it closes both
// when either side ends.
func (p *lossyProxy) pump(src, dst net.Conn, keep func(op string, args []string, payload []byte) bool) {
	defer func() { _ = src.Close(); _ = dst.Close() }()
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		args := strings.Fields(line)
		var payload []byte
		op := ""
		if len(args) > 0 {
			op = strings.ToUpper(args[0])
		}
		switch op {
		case "PUB", "HPUB", "MSG", "HMSG":
			n, err := strconv.Atoi(args[len(args)-1])
			if err != nil {
				p.t.Errorf("proxy: a %s line without a size: %q", op, line)
				return
			}
			payload = make([]byte, n+2) // and its CRLF
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
		}
		if !keep(op, args, payload) {
			continue
		}
		if _, err := dst.Write(append([]byte(line), payload...)); err != nil {
			return
		}
	}
}

// watch notes the reply subjects of the client's publishes to INTAKE,
// before they reach the server.
func (p *lossyProxy) watch(op string, args []string, payload []byte) bool {
	// PUB <subject> [reply] <size>; HPUB <subject> [reply] <header size> <total size>
	if (op == "PUB" && len(args) == 4 || op == "HPUB" && len(args) == 5) && strings.HasPrefix(args[1], "tenaz.intake.") {
		p.mu.Lock()
		p.drop[args[2]] = true
		if op == "HPUB" && p.outcomes {
			hdrLen, _ := strconv.Atoi(args[3])
			for _, l := range strings.Split(string(payload[:hdrLen]), "\r\n") {
				if name, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(name, "Tenaz-Reply") {
					p.drop[strings.TrimSpace(v)] = true
				}
			}
		}
		p.mu.Unlock()
	}
	return true
}

// filter drops the server's messages to the noted subjects, keeping the
// acknowledgements (which have no headers) for the test.
func (p *lossyProxy) filter(op string, args []string, payload []byte) bool {
	if op != "MSG" && op != "HMSG" {
		return true
	}
	p.mu.Lock()
	drop := p.drop[args[1]]
	p.mu.Unlock()
	if !drop {
		return true
	}
	if op == "MSG" && json.Valid(payload[:len(payload)-2]) {
		var a struct {
			Stream string `json:"stream"`
		}
		if json.Unmarshal(payload[:len(payload)-2], &a) == nil && a.Stream != "" {
			select {
			case p.acks <- payload[:len(payload)-2]:
			default:
			}
		}
	}
	return false
}

// droppedAck is the first acknowledgement the proxy kept from its client.
func (p *lossyProxy) droppedAck(t *testing.T) jetstream.PubAck {
	t.Helper()
	select {
	case b := <-p.acks:
		var a jetstream.PubAck
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("the dropped acknowledgement %q: %v", b, err)
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy dropped no acknowledgement of a publish to INTAKE within 10 s")
	}
	return jetstream.PubAck{}
}

func (p *lossyProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
