package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
)

// monkey kills a random service every KillEvery on average (SIGKILL, one
// time in five SIGTERM: a drain) and starts it again after up to two
// seconds; and restarts nats-server every NATSEvery on average, SIGTERM
// and SIGKILL in turn, down for up to two seconds. It writes what it does
// to log. It returns when ctx ends and every restart it began is done.
func monkey(ctx context.Context, c *cluster, killEvery, natsEvery time.Duration, rng *rand.Rand, log io.Writer) {
	var mu sync.Mutex // rng and log
	jitter := func(d time.Duration) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(float64(d) * (0.5 + rng.Float64()))
	}
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(log, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(killEvery)):
			}
			mu.Lock()
			p := c.svcs[rng.IntN(len(c.svcs))]
			sig := syscall.SIGKILL
			if rng.IntN(5) == 0 {
				sig = syscall.SIGTERM
			}
			down := time.Duration(200+rng.IntN(1800)) * time.Millisecond
			mu.Unlock()
			if !p.running() {
				continue // still down from an earlier kill
			}
			note("%s %s, down %s", sig, p.name, down)
			wg.Go(func() { p.restart(context.WithoutCancel(ctx), sig, down) })
		}
	})
	wg.Go(func() {
		sig := syscall.SIGTERM
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(natsEvery)):
			}
			mu.Lock()
			down := time.Duration(500+rng.IntN(1500)) * time.Millisecond
			mu.Unlock()
			note("%s nats-server, down %s", sig, down)
			c.nats.restart(context.WithoutCancel(ctx), sig, down)
			note("nats-server started again")
			if sig == syscall.SIGTERM {
				sig = syscall.SIGKILL
			} else {
				sig = syscall.SIGTERM
			}
		}
	})
	wg.Wait()
}
