// Package auth guards tenaz's HTTP API and its operator NATS endpoints with
// per-account API keys and operator credentials, as configured under auth
// in tenaz.yaml (only SHA-256 hashes of the keys are configured). A key
// belongs to one account and has scopes (submit, read, operate); an
// operator may use the operator screen and routes and read or cancel any
// account's events.
//
// Guard wraps a process's whole mux and judges each request by the class
// of the route pattern it matches (ClassOf): health, metrics and webhook
// routes are Open, the screen, dead letters, reviews and breakers are
// OperatorOnly, the events API needs AnyCredential, and a route without a
// class is refused. Require wraps one route with the scope it needs (and
// the key's rate limit for submit, counted over every replica once
// ShareRates gave it the shared tenaz_quotas bucket); handlers check the
// account of what they touch with From and Principal.MayAccess.
//
//	a, err := auth.New(cfg)              // refuses no keys unless auth.disabled
//	mux.Handle("POST /v1/events", a.Require(auth.Submit, submit))
//	srv := daemon.Serve(addr, a.Guard(mux))
//
// Keys are presented as "Authorization: Bearer <key>"; an operator may also
// use HTTP Basic (user = operator name, password = operator key), which is
// what a browser offers. A NATS request carries the same value in its
// Authorization header: RequireOperator checks it. See docs/security.md.
package auth
