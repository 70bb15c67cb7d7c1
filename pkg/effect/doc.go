// Package effect applies a side effect once per business key, for Go code
// whose jobs run at least once: a dispatcher handler that credits a reward
// or sends an email may run twice for one event (a crash after the effect
// and before tenaz stored the outcome, a redelivery), and the worker must
// be idempotent towards the reward, not only the job.
//
// A Ledger records each key in the tenaz_effects KV bucket, only by
// compare-and-set: Do claims the key (running, with an owner and a lease
// it renews while fn runs), runs fn, and records done with fn's result. A
// later Do for that key returns the recorded result without running fn.
//
//	led, err := effect.Open(ctx, js, effect.Options{Owner: "dispatcher-1"})
//	out, err := led.Do(ctx, "reward:"+orderID, func(ctx context.Context) ([]byte, error) {
//		return wallet.Credit(ctx, customer, points) // the side effect
//	})
//	// out.Applied: this call ran fn; otherwise out.Result is the first run's.
//
// What is guaranteed: fn runs to success at most once per key while the
// record is kept (Options.Retention), provided the process that ran it
// survives until done is recorded. If it dies between fn's external side
// effect and that write, the claim's lease runs out and the next Do runs fn
// again. No ledger can close that window for an external system it does not
// share a transaction with: pass the key on to the external system as its
// idempotency key, or make fn check there first whether the effect exists.
package effect
