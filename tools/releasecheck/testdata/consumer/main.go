// Command greeter is the module outside the repository that
// `make release-check` builds against the release proxy: a Go team's
// program that embeds tenaz's dispatcher with its own handler, as
// docs/handlers.md describes. It starts an embedded nats-server, accepts
// one event over tenaz's HTTP API, and exits 0 once its handler has run
// and the event is done.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
}

// event is the part of GET /v1/events/{id}'s answer this program reads.
type event struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "greeter-nats-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natsd.Start(natsd.Options{StoreDir: dir})
	if err != nil {
		return err
	}
	defer natsd.Shutdown(srv)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()

	cfg, err := config.Parse([]byte(`
accounts: {"*": {concurrency: 2}}
kinds:
  greeting.send: {handler: greeter, attempts: 3}
`), nil)
	if err != nil {
		return err
	}

	ing, err := ingest.New(ingest.Options{Conn: nc, Config: cfg})
	if err != nil {
		return err
	}
	if err := ing.Start(ctx); err != nil {
		return err
	}
	defer ing.Stop(context.Background())

	ran := make(chan dispatcher.Delivery, 1)
	greeter := dispatcher.HandlerFunc(func(ctx context.Context, d dispatcher.Delivery) (dispatcher.Result, error) {
		var p struct {
			To string `json:"to"`
		}
		if err := json.Unmarshal(d.Event.Payload, &p); err != nil || p.To == "" {
			return dispatcher.Result{}, fmt.Errorf("payload %s has no \"to\"", d.Event.Payload)
		}
		select {
		case ran <- d:
		default: // a redelivery: the first run was already reported
		}
		return dispatcher.Result{Body: []byte(`{"greeted":"` + p.To + `"}`)}, nil
	})
	disp, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: cfg,
		Handlers: map[string]dispatcher.Handler{"greeter": greeter}})
	if err != nil {
		return err
	}
	if err := disp.Start(ctx); err != nil {
		return err
	}
	defer disp.Stop(context.Background())

	// tenaz's HTTP API on a loopback port, as the program would serve it.
	mux := http.NewServeMux()
	ing.Routes(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	api := "http://" + ln.Addr().String()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/events",
		bytes.NewReader([]byte(`{"account":"shop","kind":"greeting.send","payload":{"to":"ada"}}`)))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", "release-check-1")
	var accepted event
	if err := call(req, &accepted, http.StatusAccepted); err != nil {
		return fmt.Errorf("POST /v1/events: %w", err)
	}

	var d dispatcher.Delivery
	select {
	case d = <-ran:
	case <-ctx.Done():
		return fmt.Errorf("event %s: the handler did not run: %w", accepted.ID, ctx.Err())
	}
	if d.Event.ID != accepted.ID || d.Event.IdempotencyKey != "release-check-1" {
		return fmt.Errorf("the handler ran for event %s (key %q), want %s (key release-check-1)",
			d.Event.ID, d.Event.IdempotencyKey, accepted.ID)
	}

	// The dispatcher stores the outcome after the handler returns.
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/events/"+accepted.ID, nil)
		if err != nil {
			return err
		}
		var ev event
		if err := call(req, &ev, http.StatusOK); err != nil {
			return fmt.Errorf("GET /v1/events/%s: %w", accepted.ID, err)
		}
		if ev.Status == "done" {
			fmt.Printf("handler ran: event %s, attempt %d, status %s, result %s\n", ev.ID, d.Attempt, ev.Status, ev.Result)
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("event %s is %s, not done: %w", ev.ID, ev.Status, ctx.Err())
		}
	}
}

// call sends req and decodes its JSON answer into v; any status but want
// is an error carrying the answer.
func call(req *http.Request, v any, want int) error {
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(res.Body); err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("answered %s, want %d: %s", res.Status, want, body.Bytes())
	}
	if err := json.Unmarshal(body.Bytes(), v); err != nil {
		return errors.Join(fmt.Errorf("answer %s", body.Bytes()), err)
	}
	return nil
}
