package breaker_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/natstest"
)

// After a nats-server restart a replica's watch of the bucket stays
// silent until the client notices its missing heartbeats (10-20s), so it
// would not learn that another replica opened the breaker and would keep
// calling the down target (several calls in one cooldown). A replica
// watches again as soon as its connection is back (docs/chaos.md, bug 4).
func TestReplicaLearnsOpenRightAfterServerRestart(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	cfg := breaker.Config{Failures: 1, Cooldown: time.Minute}
	b1 := e.reps[0].reg.For(account, target, cfg)
	b2 := e.reps[1].reg.For(account, target, cfg)

	u, err := url.Parse(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Stop()
	natstest.Start(t, natstest.StoreDir(e.srv.Dir), natstest.Listen(u.Host))

	// b1 opens it as soon as its connection is back.
	natstest.Eventually(t, wait, func() bool {
		p, err := b1.Allow(ctx(t))
		return err == nil && p.OK && b1.Record(ctx(t), p, false) == nil
	}, "want b1 to record a failure after the restart")
	openUntil := e.clk.Now().Add(cfg.Cooldown)
	waitState(t, breaker.Open, openUntil, b1)
	natstest.Eventually(t, 3*time.Second, func() bool {
		st, until := b2.State()
		return st == breaker.Open && until.Equal(openUntil)
	}, "want b2 to learn the open within 3s of the restart")
}
