package breaker_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/streams"
)

// Two failures in a row open the breaker for every replica; the replica
// that opened it publishes the advisory.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "breaker-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	srv, err := natsd.Start(natsd.Options{StoreDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer natsd.Shutdown(srv)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		fmt.Println(err)
		return
	}

	reg, err := breaker.New(ctx, js, breaker.Options{
		Instance: "dispatcher-1",
		Publish:  func(subject string, _ []byte) { fmt.Println("advisory on", subject) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Stop()

	b := reg.For("acme", "erp", breaker.Config{Failures: 2, Cooldown: time.Minute})
	for range 2 {
		p, _ := b.Allow(ctx)
		_ = b.Record(ctx, p, false) // the call failed transiently
	}
	p, _ := b.Allow(ctx)
	st, _ := b.State()
	fmt.Println(st, "call allowed:", p.OK)
	// Output:
	// advisory on tenaz.advisory.breaker.acme.erp
	// open call allowed: false
}

func ExampleAdvisory() {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	fmt.Println(string(breaker.Advisory(breaker.Change{
		Account: "acme", Target: "erp", State: breaker.Open, From: breaker.Closed,
		OpenUntil: at.Add(2 * time.Minute), Reason: "5 consecutive failures", Failures: 5,
		At: at, By: "dispatcher-1",
	})))
	// Output:
	// {"account":"acme","target":"erp","state":"open","from":"closed","open_until":"2030-01-02T03:06:05Z","reason":"5 consecutive failures","failures":5,"by":"dispatcher-1","at":"2030-01-02T03:04:05Z"}
}
