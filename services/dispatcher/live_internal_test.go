package dispatcher

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/target"
)

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
	path := filepath.Join(t.TempDir(), "tenaz.yaml")
	write := func(globexRate string) {
		if err := os.WriteFile(path, []byte(fmt.Sprintf(base, globexRate)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("5/s")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	nc, _ := srv.Conn(t)
	lc := live.New(cfg, live.Options{Path: path})
	s, err := New(Options{Conn: nc, Config: cfg, Live: lc, Instance: "d1"})
	if err != nil {
		t.Fatal(err)
	}
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

	write("5/s") // the same file again
	if err := lc.Reload(); err != nil {
		t.Fatal(err)
	}
	if limiter("acme") != acme || limiter("globex") != globex {
		t.Fatal("a reload that changed no rate: want both accounts' limiters kept")
	}

	write("20/s")
	if err := lc.Reload(); err != nil {
		t.Fatal(err)
	}
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
