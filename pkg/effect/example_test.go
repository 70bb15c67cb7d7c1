package effect_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/effect"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/streams"
)

// A job that credits loyalty points runs twice for one order (a
// redelivery): the points are credited once, and the second run gets the
// first one's result.
func ExampleLedger_Do() {
	js, stop := exampleNATS()
	defer stop()
	ctx := context.Background()

	led, err := effect.Open(ctx, js, effect.Options{Owner: "worker-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var mu sync.Mutex
	wallet := map[string]int{} // stands in for the wallet service

	creditJob := func(orderID, customer string, points int) error {
		out, err := led.Do(ctx, "acme", "reward:"+orderID, func(ctx context.Context) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			wallet[customer] += points
			return fmt.Appendf(nil, "credited %d to %s", points, customer), nil
		})
		if err != nil {
			return err // ErrInProgress is transient: the job retries
		}
		fmt.Printf("applied=%v result=%q\n", out.Applied, out.Result)
		return nil
	}
	for range 2 { // the same job, delivered twice
		if err := creditJob("o-1", "c-7", 100); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("balance of c-7:", wallet["c-7"])
	// Output:
	// applied=true result="credited 100 to c-7"
	// applied=false result="credited 100 to c-7"
	// balance of c-7: 100
}

// A permanent failure is recorded: the effect is never tried again, and
// the error stays permanent (a dispatcher handler returning it dead-letters
// its event).
func ExampleLedger_Do_permanent() {
	js, stop := exampleNATS()
	defer stop()
	ctx := context.Background()
	led, err := effect.Open(ctx, js, effect.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		_, err := led.Do(ctx, "acme", "email:welcome:u-1", func(context.Context) ([]byte, error) {
			fmt.Println("sending")
			return nil, outcome.Permanent(errors.New("address bounced"))
		})
		fmt.Println(err, outcome.IsPermanent(err), errors.Is(err, effect.ErrFailed))
	}
	rec, _ := led.Get(ctx, "acme", "email:welcome:u-1")
	fmt.Println(rec.Status, rec.Runs)
	// Output:
	// sending
	// address bounced true false
	// effect: failed permanently: address bounced true true
	// failed 1
}

// exampleNATS starts an embedded server with tenaz's streams in a
// temporary directory (natstest needs a *testing.T, an Example has none).
func exampleNATS() (jetstream.JetStream, func()) {
	dir, err := os.MkdirTemp("", "effect-example-")
	if err != nil {
		panic(err)
	}
	srv, err := natsd.Start(natsd.Options{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	stop := func() { nc.Close(); natsd.Shutdown(srv); _ = os.RemoveAll(dir) }
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = streams.Apply(context.Background(), js, streams.Options{})
	}
	if err != nil {
		stop()
		panic(err)
	}
	return js, stop
}
