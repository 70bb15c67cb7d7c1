package accounts_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsd"
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

// openPauses starts a server with the store's streams and opens its
// pauses, under a context that ends with the test (at most a minute).
func openPauses(t *testing.T) (context.Context, *accounts.Pauses) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	n, err := streams.Partitions(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := accounts.OpenPauses(ctx, js, names.NewSubjects("").WithPartitions(n))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, ps
}

// The pauses in the bucket, on a real server: Watch reports those held
// when it starts, then each pause and resume of each account; Get and
// List read them.
func TestPausesWatched(t *testing.T) {
	t.Parallel()
	ctx, ps := openPauses(t)
	if l, err := ps.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List with no pause: want none, got %v %v", l, err)
	}
	if err := ps.Set(ctx, accounts.Pause{Account: "acme", Actor: "operator:alice", Reason: "erp migration", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	type heard struct {
		account string
		p       accounts.Pause
		ok      bool
	}
	events := make(chan heard, 16)
	stop, err := ps.Watch(ctx, func(a string, p accounts.Pause, ok bool) { events <- heard{a, p, ok} })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	next := func() heard {
		t.Helper()
		select {
		case h := <-events:
			return h
		case <-ctx.Done():
			t.Fatal("no pause heard")
			return heard{}
		}
	}
	if h := next(); h.account != "acme" || !h.ok || h.p.Actor != "operator:alice" {
		t.Fatalf("Watch's start: want acme's pause, got %+v", h)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := ps.Set(ctx, accounts.Pause{Account: "globex", Until: until}); err != nil {
		t.Fatal(err)
	}
	if h := next(); h.account != "globex" || !h.ok || !h.p.Until.Equal(until) {
		t.Fatalf("globex paused: want its pause until %v, got %+v", until, h)
	}
	if err := ps.Clear(ctx, "acme", 0); err != nil {
		t.Fatal(err)
	}
	if h := next(); h.account != "acme" || h.ok {
		t.Fatalf("acme resumed: want it heard, got %+v", h)
	}
	if l, err := ps.List(ctx); err != nil || len(l) != 1 || l[0].Account != "globex" {
		t.Fatalf("List: want globex's pause, got %+v %v", l, err)
	}
	if _, ok, _, err := ps.Get(ctx, "acme"); ok || err != nil {
		t.Fatalf("Get(acme) after Clear: want none, got %v %v", ok, err)
	}
}

// Clear with the revision a resume read ends only that pause: a pause
// written since, or a clear since, makes it ErrPauseChanged and leaves
// the bucket as it is.
func TestClearOnlyThePauseRead(t *testing.T) {
	t.Parallel()
	ctx, ps := openPauses(t)
	if err := ps.Set(ctx, accounts.Pause{Account: "acme", Actor: "operator:alice", Reason: "erp migration"}); err != nil {
		t.Fatal(err)
	}
	_, _, read, err := ps.Get(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Set(ctx, accounts.Pause{Account: "acme", Actor: "operator:bob", Reason: "erp down again"}); err != nil {
		t.Fatal(err)
	}
	if err := ps.Clear(ctx, "acme", read); !errors.Is(err, accounts.ErrPauseChanged) {
		t.Fatalf("Clear at the revision read before bob's pause: want ErrPauseChanged, got %v", err)
	}
	p, ok, rev, err := ps.Get(ctx, "acme")
	if err != nil || !ok || p.Actor != "operator:bob" {
		t.Fatalf("after the stale Clear: want bob's pause kept, got %+v %v %v", p, ok, err)
	}
	if err := ps.Clear(ctx, "acme", rev); err != nil {
		t.Fatalf("Clear at the current revision: %v", err)
	}
	if err := ps.Clear(ctx, "acme", rev); !errors.Is(err, accounts.ErrPauseChanged) {
		t.Fatalf("a second Clear at the same revision: want ErrPauseChanged, got %v", err)
	}
	if _, ok, _, err := ps.Get(ctx, "acme"); ok || err != nil {
		t.Fatalf("after Clear: want no pause, got %v %v", ok, err)
	}
}

// A followed PauseBook holds the pauses in the bucket once Follow
// returns, then every change; Holding leaves out a pause that has ended.
func TestPauseBookFollowed(t *testing.T) {
	t.Parallel()
	ctx, ps := openPauses(t)
	now := time.Now()
	for _, p := range []accounts.Pause{
		{Account: "acme", Actor: "operator:alice"},
		{Account: "globex", Until: now.Add(time.Hour)},
		{Account: "initech", Until: now.Add(-time.Second)}, // ended
	} {
		if err := ps.Set(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var book accounts.PauseBook
	changed := make(chan string, 16)
	stop, err := ps.Follow(ctx, &book, func(a string) { changed <- a })
	if err != nil {
		t.Fatal(err)
	}
	if got := book.Holding(now); !slices.Equal(got, []string{"acme", "globex"}) {
		t.Fatalf("Holding once followed: want [acme globex], got %v", got)
	}
	if p, ok := book.Get("acme"); !ok || p.Actor != "operator:alice" {
		t.Fatalf("Get(acme): want alice's pause, got %+v %v", p, ok)
	}
	if got := book.Holding(now.Add(2 * time.Hour)); !slices.Equal(got, []string{"acme"}) {
		t.Fatalf("Holding in two hours: want [acme], got %v", got)
	}
	if err := ps.Clear(ctx, "acme", 0); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return !slices.Contains(book.Holding(now), "acme") },
		"acme resumed: still held in the book")
	if len(changed) < 4 {
		t.Errorf("changed called %d times, want one per pause heard (4)", len(changed))
	}

	stop()
}

// A NATS user that may not watch the pauses gets no answer from the
// server: Watch fails when its context ends, and does not hang.
func TestWatchWithoutPermissionFails(t *testing.T) {
	t.Parallel()
	srv, err := natsd.Start(natsd.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "svc", Password: "s", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.CONSUMER.CREATE.KV_tenaz_ops.>"}},
		}}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("svc", "s"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	ps, err := accounts.OpenPauses(ctx, js, names.NewSubjects(""))
	if err != nil {
		t.Fatal(err)
	}
	wait, cancelWait := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelWait()
	var book accounts.PauseBook
	stop, err := ps.Follow(wait, &book, nil)
	if err == nil {
		stop()
		t.Fatal("Follow without the permission to watch: want an error")
	}
	if !strings.Contains(err.Error(), "pause.* in tenaz_ops") || ctx.Err() != nil {
		t.Fatalf("want an error naming the pauses, within the wait; got %v", err)
	}
}
