package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/ops"
)

// Submit an event and wait for its outcome. This needs a running tenaz
// (`tenaz run`); services/tenaz's Example_client runs the same against an
// embedded one.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.NewNATS(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	r, err := c.Submit(ctx, event.Submission{Account: "acme", Kind: "order.create",
		Payload: json.RawMessage(`{"order_id":"o-1"}`)}, client.IdempotencyKey("o-1"))
	switch {
	case errors.Is(err, client.ErrIdempotencyKeyReused):
		fmt.Println("o-1 was submitted before with another payload")
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	v, err := c.Wait(ctx, r.ID) // done, cancelled, dead or manual_review
	fmt.Println(v.Status, err)
}

// Replay the dead letters of an account over HTTP, as an operator.
func ExampleClient_Replay() {
	c, err := client.NewHTTP("http://127.0.0.1:8080", client.WithOperatorKey(os.Getenv("TENAZ_OPERATOR_KEY")))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	rep, err := c.Replay(ctx, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme"}, Reason: "the ERP is back"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		j, err := c.ReplayJob(ctx, rep.JobID)
		if err != nil || j.State != ops.JobRunning {
			fmt.Println(j.State, j.Done, j.Failed, err)
			return
		}
		time.Sleep(time.Second)
	}
}
