package tenaz

import (
	"fmt"
	"net"
	"time"

	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/provider"
)

// bureau is one demo credit bureau of `tenaz run`.
type bureau struct {
	p *provider.Provider
	h *daemon.Server
}

// Bureaus returns the demo bureaus that run (A, then B), for tests.
func (t *System) Bureaus() []*provider.Provider {
	var out []*provider.Provider
	for _, b := range t.bureaus {
		out = append(out, b.p)
	}
	return out
}

// startBureaus starts the demo credit bureaus of the config's demo
// section. Bureau A accepts evaluations and calls back to tenaz's own
// listener, misbehaving like a real one: 20% of callbacks twice, 10% late
// (after the demo's callback SLA), 10% never. Bureau B must be polled.
// They start once tenaz listens, so that A knows where to call back.
func (t *System) startBureaus() error {
	d := t.o.Config.Demo
	if d.BureauA != "" {
		_, port, err := net.SplitHostPort(t.http.Addr)
		if err != nil {
			return fmt.Errorf("demo bureau_a: %w", err)
		}
		tgt, _ := t.o.Config.Target("bureau_a")
		url := "http://127.0.0.1:" + port + "/v1/callbacks/bureau_a"
		p := provider.New(provider.Faults{ErrorRate: 0.15, Latency: 50 * time.Millisecond},
			provider.WithIdempotent(), provider.WithMaxCalls(10000),
			provider.WithCallbacks(url, tgt.CallbackSecret.Reveal(), 2*time.Second))
		p.SetCallbackFaults(provider.CallbackFaults{DuplicateRate: 0.2, DropRate: 0.1, LateRate: 0.1, LateBy: 40 * time.Second})
		if err := t.serveBureau("bureau_a", d.BureauA, p); err != nil {
			return err
		}
	}
	if d.BureauB != "" {
		p := provider.New(provider.Faults{ErrorRate: 0.05, Latency: 50 * time.Millisecond, PollAfter: 2},
			provider.WithIdempotent(), provider.WithMaxCalls(10000))
		if err := t.serveBureau("bureau_b", d.BureauB, p); err != nil {
			return err
		}
	}
	return nil
}

func (t *System) serveBureau(name, addr string, p *provider.Provider) error {
	h, err := daemon.Serve(addr, p)
	if err != nil {
		_ = p.Close()
		return fmt.Errorf("demo %s: %w", name, err)
	}
	t.bureaus = append(t.bureaus, &bureau{p: p, h: h})
	t.log.Info().Str("addr", h.Addr).Str("bureau", name).Msg("demo bureau started")
	return nil
}
