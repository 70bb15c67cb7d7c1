package accounts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/streams"
)

func TestWant(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	hour, day := now.Add(time.Hour), now.Add(24*time.Hour)
	forever := accounts.Pause{Account: "acme"}
	forAnHour := accounts.Pause{Account: "acme", Until: hour}
	expired := accounts.Pause{Account: "acme", Until: now.Add(-time.Second)}
	for _, c := range []struct {
		name    string
		p       accounts.Pause
		ok      bool
		breaker time.Time
		want    time.Time
	}{
		{"nothing: run", accounts.Pause{}, false, time.Time{}, time.Time{}},
		{"a breaker alone", accounts.Pause{}, false, hour, hour},
		{"a breaker whose cooldown is over", accounts.Pause{}, false, now.Add(-time.Minute), time.Time{}},
		{"a pause until resumed", forever, true, time.Time{}, accounts.PauseForever},
		{"a pause until resumed outlasts a breaker", forever, true, day, accounts.PauseForever},
		{"a breaker outlasts a pause for an hour", forAnHour, true, day, day},
		{"a pause for an hour outlasts a breaker", forAnHour, true, now.Add(time.Minute), hour},
		{"an expired pause is none", expired, true, time.Time{}, time.Time{}},
	} {
		if got := accounts.Want(c.p, c.ok, c.breaker, now); !got.Equal(c.want) {
			t.Errorf("%s: want %v, got %v", c.name, c.want, got)
		}
	}
}

// The pause of one account, on real consumers: Sync pauses acme's
// consumer until resumed and leaves globex's running, a breaker's end
// never shortens it, Clear and Sync resume acme (or hold it for its open
// breaker), and an account without a consumer is no error.
func TestPausesOnConsumers(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := streams.Partitions(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	subj := names.NewSubjects("").WithPartitions(n)
	cfg, err := config.Parse([]byte("{}"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"acme", "globex"} {
		cc, err := accounts.ConsumerConfig(cfg, n, a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, subj.EventsStream(a), cc); err != nil {
			t.Fatal(err)
		}
	}
	paused := func(account string) (bool, time.Time) {
		t.Helper()
		c, err := js.Consumer(ctx, subj.EventsStream(account), names.ConsumerName(account))
		if err != nil {
			t.Fatal(err)
		}
		info := c.CachedInfo()
		if info.Config.PauseUntil == nil {
			return info.Paused, time.Time{}
		}
		return info.Paused, *info.Config.PauseUntil
	}
	ps, err := accounts.OpenPauses(ctx, js, subj)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := ps.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List with no pause: want none, got %v %v", l, err)
	}
	if err := ps.Set(ctx, accounts.Pause{Account: "acme", Actor: "operator:alice", Reason: "erp migration", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	breaker := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	noBreaker := func() time.Time { return time.Time{} }
	if until, err := ps.Sync(ctx, "acme", func() time.Time { return breaker }); err != nil || !until.Equal(accounts.PauseForever) {
		t.Fatalf("Sync(acme): want paused until %v, got %v %v", accounts.PauseForever, until, err)
	}
	if p, at := paused("acme"); !p || !at.Equal(accounts.PauseForever) {
		t.Fatalf("acme's consumer: want paused until %v, got %v %v", accounts.PauseForever, p, at)
	}
	if p, _ := paused("globex"); p {
		t.Fatal("globex's consumer: want it running")
	}
	got, ok, _, err := ps.Get(ctx, "acme")
	if err != nil || !ok || got.Actor != "operator:alice" || got.Reason != "erp migration" {
		t.Fatalf("Get(acme): want alice's pause, got %+v %v %v", got, ok, err)
	}
	if l, err := ps.List(ctx); err != nil || len(l) != 1 || l[0].Account != "acme" {
		t.Fatalf("List: want acme's pause, got %+v %v", l, err)
	}

	// Resumed while a breaker of acme is open: held for the breaker.
	if err := ps.Clear(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if until, err := ps.Sync(ctx, "acme", func() time.Time { return breaker }); err != nil || !until.Equal(breaker) {
		t.Fatalf("Sync(acme) after Clear: want paused for the breaker until %v, got %v %v", breaker, until, err)
	}
	if p, at := paused("acme"); !p || !at.Equal(breaker) {
		t.Fatalf("acme's consumer: want paused until %v, got %v %v", breaker, p, at)
	}
	if until, err := ps.Sync(ctx, "acme", noBreaker); err != nil || !until.IsZero() {
		t.Fatalf("Sync(acme) with no breaker: want resumed, got %v %v", until, err)
	}
	if p, _ := paused("acme"); p {
		t.Fatal("acme's consumer: want it running")
	}
	if _, ok, _, err := ps.Get(ctx, "acme"); ok || err != nil {
		t.Fatalf("Get(acme) after Clear: want none, got %v %v", ok, err)
	}
	if err := ps.Set(ctx, accounts.Pause{Account: "initech"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Sync(ctx, "initech", noBreaker); err != nil {
		t.Fatalf("Sync of an account without a consumer: want no error, got %v", err)
	}
	if _, err := js.Consumer(ctx, subj.EventsStream("initech"), names.ConsumerName("initech")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("Sync must not make a consumer: got %v", err)
	}
	if err := ps.Set(ctx, accounts.Pause{Account: "ac.me"}); err == nil {
		t.Fatal("Set of an invalid account: want an error")
	}
}
