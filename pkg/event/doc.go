// Package event defines the envelope that carries one submitted event
// through tenaz (intake → EVENTS → dispatcher → DEAD), how a submission is
// parsed from HTTP or NATS, and how its idempotency key and id are derived.
//
// The event id is derived from the account and the idempotency key, so the
// same submission always maps to the same id: the state store's create is
// then the uniqueness check, and a duplicate gets the existing event back
// however long after the publish dedup window it arrives.
//
//	env, err := event.FromHTTP(body, r.Header.Get("Idempotency-Key"), now)
//	id := env.ID // "ev_…", stable for (account, idempotency key)
package event
