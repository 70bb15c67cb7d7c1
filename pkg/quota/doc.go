// Package quota holds limits that every replica of a service shares, in
// one record per key of the tenaz_quotas bucket: a token bucket (a rate,
// with its burst) and, for a concurrency limit, how many calls each
// replica has in flight. A replica changes a record only by
// compare-and-set, so the limit holds however many replicas count against
// it: a target's provider-wide rate and concurrency (Acquire, for the
// dispatcher) and an API key's submission rate (Take, for ingest).
//
// Acquire waits, in the caller's goroutine and bounded by its context,
// until the key has a token and a free slot; one compare-and-set takes
// both, one gives the slot back. A replica's calls in flight count while
// pkg/owner's view of the dispatchers and pollers has it live, or dead for
// less than its calls' timeout (Options.Counted), so a killed replica's
// slots come back once its calls can no longer run. Replicas
// that wait take turns, in the order they began to wait, so one busy
// replica cannot keep a scarce limit to itself.
//
//	q, err := quota.Open(ctx, js, quota.Options{Instance: g.Self(), Live: g.Present, Counted: g.Counted})
//	release, waited, err := q.Acquire(ctx, "t.erp", quota.Smooth(20, 3))
//	defer release()
//	defer q.Close(ctx)
package quota
