package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/effect"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// A Go team embeds the dispatcher and delivers reward.credit with a Go
// handler instead of an HTTP call. The handler may run more than once for
// one event, and the order service may even send the reward twice under
// two keys, so the handler applies the credit through an effect.Ledger
// keyed by the order: the points are credited once.
//
// It runs hermetically: an embedded nats-server in a temporary directory,
// with ingest accepting the submissions.
func ExampleHandler() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, stop, err := exampleNATS()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	cfg, err := config.Parse([]byte(`
accounts: {"*": {concurrency: 4}}
kinds:
  reward.credit: {handler: reward, entity: order_id, backoff: {initial: 1s, jitter: 0}}
`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Ingest accepts the submissions (and applies the stream layout,
	// tenaz_effects included).
	ing, err := ingest.New(ingest.Options{Conn: nc, Config: cfg})
	if err == nil {
		err = ing.Start(ctx)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ing.Stop(context.Background())

	// The wallet service, and the ledger of the credits applied to it.
	var mu sync.Mutex
	balance := map[string]int{}
	ledger, err := effect.Open(ctx, js, effect.Options{Owner: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	delivered := make(chan string, 2)
	reward := dispatcher.HandlerFunc(func(ctx context.Context, d dispatcher.Delivery) (dispatcher.Result, error) {
		var order struct {
			OrderID  string `json:"order_id"`
			Customer string `json:"customer"`
			Points   int    `json:"points"`
		}
		if err := json.Unmarshal(d.Event.Payload, &order); err != nil {
			return dispatcher.Result{}, outcome.Permanent(err) // dead-lettered, never retried
		}
		out, err := ledger.Do(ctx, d.Event.Account, "reward:"+order.OrderID, func(ctx context.Context) ([]byte, error) {
			mu.Lock()
			balance[order.Customer] += order.Points
			mu.Unlock()
			fmt.Printf("credited %d points to %s for %s\n", order.Points, order.Customer, order.OrderID)
			return json.Marshal(map[string]int{"credited": order.Points})
		})
		if err != nil {
			return dispatcher.Result{}, err // effect.ErrInProgress is transient: retried
		}
		delivered <- d.Event.IdempotencyKey
		return dispatcher.Result{Body: out.Result}, nil // kept as the event's result
	})

	svc, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: cfg, Handlers: map[string]dispatcher.Handler{"reward": reward}})
	if err == nil {
		err = svc.Start(ctx) // fails with ErrHandlerNotRegistered if "reward" were missing
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Stop(context.Background())

	// The order service sends the reward twice, under two idempotency keys.
	for _, key := range []string{"checkout-o-1", "backfill-o-1"} {
		m := nats.NewMsg("tenaz.intake.shop.reward.credit")
		m.Header.Set("Idempotency-Key", key)
		m.Data = []byte(`{"order_id":"o-1","customer":"c-7","points":100}`)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			fmt.Println(err)
			return
		}
	}
	for range 2 {
		select {
		case <-delivered:
		case <-ctx.Done():
			fmt.Println("not delivered in time")
			return
		}
	}
	mu.Lock()
	fmt.Println("balance of c-7:", balance["c-7"])
	mu.Unlock()
	// Output:
	// credited 100 points to c-7 for o-1
	// balance of c-7: 100
}

// exampleNATS starts an embedded server in a temporary directory and
// connects to it (natstest needs a *testing.T; an Example has none). The
// services apply the stream layout when they start.
func exampleNATS() (*nats.Conn, func(), error) {
	dir, err := os.MkdirTemp("", "dispatcher-example-")
	if err != nil {
		return nil, nil, err
	}
	srv, err := natsd.Start(natsd.Options{StoreDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		natsd.Shutdown(srv)
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return nc, func() { nc.Close(); natsd.Shutdown(srv); _ = os.RemoveAll(dir) }, nil
}
