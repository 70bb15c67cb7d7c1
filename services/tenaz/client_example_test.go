package tenaz_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/services/tenaz"
)

// A Go program submits an event to a running tenaz over NATS with
// pkg/client and waits for its outcome; submitting another payload under
// the same idempotency key is refused with the server's code. (The first
// half only starts a tenaz and a target for the example to run against.)
func Example_client() {
	p := provider.New(provider.Faults{})
	target := httptest.NewServer(p)
	defer target.Close()
	dir, _ := os.MkdirTemp("", "tenaz-example-*")
	defer os.RemoveAll(dir)
	cfg, err := config.Parse([]byte(testConfig(dir, target.URL, "")), func(string) (string, bool) { return "", false })
	if err != nil {
		panic(err)
	}
	tz, err := tenaz.New(tenaz.Options{Config: cfg})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tz.Start(ctx); err != nil {
		panic(err)
	}
	defer tz.Stop(context.Background())

	nc, err := nats.Connect(tz.NATSURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c := client.NewNATS(nc) // or client.NewHTTP("http://"+tz.HTTPAddr())

	r, err := c.Submit(ctx, event.Submission{Account: "acme", Kind: "order.create",
		Payload: json.RawMessage(`{"order_id":"o-1","total":1990}`)}, client.IdempotencyKey("o-1"))
	if err != nil {
		panic(err)
	}
	v, err := c.Wait(ctx, r.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Status, v.Attempts)

	_, err = c.Submit(ctx, event.Submission{Account: "acme", Kind: "order.create",
		Payload: json.RawMessage(`{"order_id":"o-1","total":5}`)}, client.IdempotencyKey("o-1"))
	fmt.Println(errors.Is(err, client.ErrIdempotencyKeyReused))
	// Output:
	// done 1
	// true
}
