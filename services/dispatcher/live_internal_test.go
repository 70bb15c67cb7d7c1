package dispatcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/target"
)

// reloadable is a dispatcher (not started) whose config is read from a
// file made of format with value in its one %s; reload writes value
// instead and reloads the file, as SIGHUP does.
func reloadable(t *testing.T, format, value string) (s *Service, reload func(value string)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tenaz.yaml")
	write := func(value string) {
		if err := os.WriteFile(path, []byte(fmt.Sprintf(format, value)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(value)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	nc, _ := srv.Conn(t)
	lc := live.New(cfg, live.Options{Path: path})
	if s, err = New(Options{Conn: nc, Config: cfg, Live: lc, Instance: "d1"}); err != nil {
		t.Fatal(err)
	}
	return s, func(value string) {
		t.Helper()
		write(value)
		if err := lc.Reload(); err != nil {
			t.Fatal(err)
		}
	}
}

// A reload keeps the rate limiter of an account whose rate did not
// change, and only that: a limiter made afresh forgets the calls just
// made, so one dropped at every reload let the account through at twice
// its rate for a moment. An account whose rate changed keeps its pacer,
// which takes the new rate (the calls waiting in it with it).
func TestReloadKeepsTheLimitersOfUnchangedRates(t *testing.T) {
	t.Parallel()
	const base = `
auth: {disabled: true}
targets: {erp: {url: "http://127.0.0.1:1/x"}}
kinds: {order.create: {target: erp}}
accounts:
  acme: {rate: 10/s}
  globex: {rate: %s}
`
	s, reload := reloadable(t, base, "5/s")
	limiter := func(account string) ratelimiter.RateLimiter[target.Response] {
		s.mu.Lock()
		p := s.pacerLocked(account)
		s.mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.rl
	}
	acme, globex := limiter("acme"), limiter("globex")
	if acme == nil || globex == nil {
		t.Fatal("want a rate limiter for each account")
	}

	reload("5/s") // the same file again
	if limiter("acme") != acme || limiter("globex") != globex {
		t.Fatal("a reload that changed no rate: want both accounts' limiters kept")
	}

	reload("20/s")
	if limiter("acme") != acme {
		t.Fatal("globex's rate changed: want acme's limiter kept")
	}
	if limiter("globex") == globex {
		t.Fatal("globex's rate changed: want a new limiter for it")
	}
	s.mu.Lock()
	p := s.pacerLocked("globex")
	s.mu.Unlock()
	if p.interval != 50*time.Millisecond {
		t.Fatalf("globex's rate changed to 20/s: want its pacer at 50ms, got %s", p.interval)
	}
}

// A call waiting for its account's pace when a reload gives its target a
// concurrency limit goes by that limit. It went through the guard it
// started in, made before the reload without a limit, and so past the
// limit that every other call kept to (a reload that lowered a limit put
// the old one back in force on the target's line the same way).
func TestACallWaitingForItsPaceTakesTheReloadedLimit(t *testing.T) {
	t.Parallel()
	const base = `
auth: {disabled: true}
targets: {erp: {url: "http://127.0.0.1:1/x"%s}}
kinds: {order.create: {target: erp}}
accounts:
  acme: {rate: 12/m}
`
	s, reload := reloadable(t, base, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servicetest.Run(t, ctx, s)
	call := func(enter chan<- struct{}, hold <-chan struct{}) func(context.Context) (target.Response, error) {
		return func(context.Context) (target.Response, error) {
			close(enter)
			<-hold
			return target.Response{Status: 200}, nil
		}
	}
	none := make(chan struct{})
	close(none)
	// acme's first call goes at once; its second waits 5 s for the pace,
	// in the guard made without a limit.
	if _, err := s.guardFor("acme", "erp").run(ctx, call(make(chan struct{}), none)); err != nil {
		t.Fatal(err)
	}
	paced := time.Now().Add(5 * time.Second) // when acme's pace lets the second go
	waiting := s.guardFor("acme", "erp")
	entered, done := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := waiting.run(ctx, call(entered, none))
		done <- err
	}()
	reload(", concurrency: 1")
	// Another account's call takes the target's only slot and holds it.
	held, release := make(chan struct{}), make(chan struct{})
	go func() { _, _ = s.guardFor("globex", "erp").run(ctx, call(held, release)) }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("globex's call: want it made at once, with the target's free slot")
	}
	// acme's pace lets its call go at paced; it must wait for the slot
	// instead. Nothing is awaited: a call past the limit would be made
	// the moment the pace let it.
	if time.Now().After(paced) {
		t.Fatal("the reload and globex's call took longer than acme's pace: the test proves nothing")
	}
	select {
	case <-entered:
		t.Fatal("acme's call waiting for its pace at the reload: made while the target's only slot was held")
	case <-time.After(time.Until(paced) + 1500*time.Millisecond):
	}
	close(release)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("acme's call: want it made once the slot was given back")
	}
	if err := <-done; err != nil {
		t.Fatalf("acme's call: %v", err)
	}
}
