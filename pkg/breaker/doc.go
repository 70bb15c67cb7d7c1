// Package breaker is the circuit breaker per account and target that every
// dispatcher replica shares. The shared state (closed, open until a time,
// half-open with one prober) lives in the tenaz_breakers KV bucket under
// "<account>.<target>" and changes only by compare-and-set. The count of
// consecutive failures is part of it: every replica adds its failures to
// the same count, and the failure that reaches the threshold writes
// "open", so 5 failures open a breaker of 5 with one replica or ten. Each
// replica mirrors every shared change it watches into a local failsafe-go
// CircuitBreaker without ever writing back; that local breaker also
// counts on its own while the bucket cannot be written.
//
// After the cooldown exactly one call across all replicas is the probe: of
// the callers Allow offers it to (one at a time on each replica), the one
// whose compare-and-set from open to half_open wins (Claim, right before
// its call) makes it, and the others are refused until its outcome closes
// or re-opens the breaker, or until its claim expires (Config.ProbeTimeout)
// so that a prober that crashed does not wedge the breaker.
//
//	reg, err := breaker.New(ctx, js, breaker.Options{Instance: host, OnChange: pauseOrResume, Publish: publish})
//	defer reg.Stop()
//	b := reg.For("acme", "erp", breaker.Config{Failures: 5, Cooldown: 2 * time.Minute})
//	p, err := b.Allow(ctx)
//	if !p.OK {
//		return nakUntil(p.RetryAt) // no call leaves while open
//	}
//	waitForTurn(ctx) // the target's slot, the account's pace
//	if p, err = b.Claim(ctx, p); err != nil {
//		return nakUntil(time.Now().Add(time.Second)) // another caller probes
//	}
//	err = callTarget(ctx)
//	_ = b.Record(ctx, p, !isTransient(err))
//
// An operator may close a breaker for everyone (Registry.Close) or open it
// until a time (Registry.Open): no call leaves before then, and after it
// one probe decides, as after a cooldown.
//
// Advisories: the replica that writes a transition (open, half_open, closed)
// publishes Advisory(change) on tenaz.advisory.breaker.<account>.<target>
// through Options.Publish, so each transition is advertised once across all
// replicas; OnChange, by contrast, runs on every replica.
package breaker
