package chaos

import (
	"fmt"
	"time"
)

// Options size a crash-suite run. Full and Short are the two presets.
type Options struct {
	// Name is printed in the report ("full", "short").
	Name string
	// Events is how many events are submitted.
	Events int
	// Accounts is how many accounts they are spread over.
	Accounts int
	// Load is how long the submissions are spread over; the faults and
	// kills run for as long.
	Load time.Duration
	// Outage is how long each account's providers are down, once, at a
	// staggered time within Load.
	Outage time.Duration
	// KillEvery is the mean time between two kills of a random service.
	KillEvery time.Duration
	// NATSEvery is the mean time between two restarts of nats-server
	// (SIGTERM and SIGKILL in turn).
	NATSEvery time.Duration
	// Settle bounds the wait, after Load, for every accepted event to reach
	// a terminal state.
	Settle time.Duration
	// Cooldown is every account's breaker cooldown.
	Cooldown time.Duration
	// CallbackSLA and PollSLA are the kinds' callback and poll SLAs.
	CallbackSLA, PollSLA time.Duration
	// DispatcherReplicas and PollerReplicas run that many processes of each.
	// The account limits are checked over all the dispatchers (each
	// account is owned by one of them at a time).
	DispatcherReplicas, PollerReplicas int
	// Seed makes the plan and the faults repeatable (the kills and the
	// schedule of the processes are not).
	Seed uint64
	// Race builds the services with the race detector.
	Race bool
	// Keep keeps the work directory (logs, store) even when the run passes.
	Keep bool
}

// Full is make chaos: about ten minutes.
func Full() Options {
	return Options{
		Name: "full", Events: 20000, Accounts: 16, Load: 5 * time.Minute, Outage: 2 * time.Minute,
		KillEvery: 4 * time.Second, NATSEvery: 40 * time.Second, Settle: 5 * time.Minute,
		Cooldown: 10 * time.Second, CallbackSLA: 20 * time.Second, PollSLA: 60 * time.Second,
		DispatcherReplicas: 2, PollerReplicas: 2, Seed: 1,
	}
}

// Short is make chaos-short, the CI run: under three minutes.
func Short() Options {
	return Options{
		Name: "short", Events: 2500, Accounts: 6, Load: 50 * time.Second, Outage: 20 * time.Second,
		KillEvery: 4 * time.Second, NATSEvery: 25 * time.Second, Settle: 90 * time.Second,
		Cooldown: 5 * time.Second, CallbackSLA: 10 * time.Second, PollSLA: 30 * time.Second,
		DispatcherReplicas: 2, PollerReplicas: 1, Seed: 1,
	}
}

func (o Options) validate() error {
	switch {
	case o.Events < 100:
		return fmt.Errorf("chaos: events must be at least 100, got %d", o.Events)
	case o.Accounts < 1 || o.Accounts > 500:
		return fmt.Errorf("chaos: accounts must be 1-500, got %d", o.Accounts)
	case o.Load < 10*time.Second:
		return fmt.Errorf("chaos: load must be at least 10s, got %s", o.Load)
	case o.Outage <= 0 || o.Outage >= o.Load:
		return fmt.Errorf("chaos: outage must be positive and shorter than the load (%s), got %s", o.Load, o.Outage)
	case o.KillEvery <= 0 || o.NATSEvery <= 0 || o.Settle <= 0 || o.Cooldown <= 0:
		return fmt.Errorf("chaos: kill, nats and settle intervals and the cooldown must be positive")
	case o.Cooldown > probeTimeout:
		// A killed prober's claim expires after probeTimeout and another
		// replica probes: with a longer cooldown that second probe would
		// fall within one cooldown of the first and fail the check.
		return fmt.Errorf("chaos: the cooldown must be at most %s (the breaker's probe claim expiry), got %s", probeTimeout, o.Cooldown)
	case o.DispatcherReplicas < 1 || o.DispatcherReplicas > 10 || o.PollerReplicas < 1:
		return fmt.Errorf("chaos: 1-10 dispatchers and at least one poller, got %d and %d", o.DispatcherReplicas, o.PollerReplicas)
	}
	return nil
}
