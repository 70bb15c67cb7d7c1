// Package provider is a fake external API (an ERP, credit bureau or payment
// provider) that tenaz delivers events to, with faults injected on demand:
// errors, hangs, rate limits, outages, business rejections, lost replies,
// and duplicate, dropped or late webhooks. Tests, the built-in demo of
// tenaz run and benchmarks use it to prove that every failure of a real
// provider ends in a known state and that no effect is applied twice.
//
// A Provider is an http.Handler. Routing:
//
//   - GET on a path whose last segment starts with RefPrefix ("ref_"), e.g.
//     GET /evaluations/ref_7, is a poll of that reference: 404 if unknown,
//     {"id":"ref_7","status":"processing"} for the first Faults.PollAfter
//     polls, then {"id":"ref_7","status":"approved"}.
//   - Every other request, any method and path, is a delivery: the faults
//     decide its answer (see Faults for the order) and a success is
//     200 {"id":"ref_<n>","status":"accepted","key":"<idempotency key>"}.
//
// A successful delivery applies the effect for its Idempotency-Key
// (Tenaz-Event-Id when absent). A plain provider applies it on every
// success, so Effects and DuplicateEffects expose a double delivery; a
// WithIdempotent provider replays its first answer instead. WithCallbacks
// adds a signed Standard Webhooks callback after each applied effect.
//
// Usage:
//
//	p := provider.New(provider.Faults{ErrorRate: 0.2, FailFirst: 1}, provider.WithSeed(1))
//	defer p.Close()
//	srv := httptest.NewServer(p)
//	defer srv.Close()
//	// ... point a target at srv.URL, deliver, then:
//	if err := p.WaitApplied(ctx, 10); err != nil { ... }
//	if d := p.DuplicateEffects(); len(d) > 0 { t.Errorf("applied twice: %v", d) }
package provider
