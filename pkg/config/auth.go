package config

import (
	"encoding/hex"
	"slices"
	"strings"
)

// Auth guards the HTTP API: API keys, each for one account and a set of
// scopes, and operator credentials for the operator screen and actions.
// Only hashes are kept here: a key itself is shown once, when it is made
// (see docs/security.md). A process that serves HTTP refuses to start when
// no key and no operator is configured unless Disabled is true.
type Auth struct {
	// Disabled turns HTTP authentication off: every route is open. Only
	// allowed with no keys and no operators. Defaults to false.
	Disabled bool `yaml:"disabled"`
	// Keys are the API keys by id (the id appears in logs and histories,
	// the key never does). Defaults to none.
	Keys map[string]APIKey `yaml:"keys"`
	// Operators are the operator credentials by name: the operator screen
	// (/ui/), the dead-letter and review routes, and reading or cancelling
	// any account's events. Defaults to none.
	Operators map[string]Operator `yaml:"operators"`
}

// APIKey is one API key: "Authorization: Bearer <key>".
type APIKey struct {
	// Account is the one account the key may submit, read and act for.
	// Required.
	Account string `yaml:"account"`
	// Scopes the key has: submit (POST /v1/events), read (GET an event
	// and its history), operate (DELETE /v1/events/{id}). Required.
	Scopes []string `yaml:"scopes"`
	// Hash is "sha256:" followed by the 64 hex digits of the key's SHA-256.
	// Required.
	Hash string `yaml:"hash"`
	// Rate limits this key's submissions, e.g. "100/s"; more are answered
	// 429 with Retry-After. Defaults to "" (unlimited).
	Rate Rate `yaml:"rate"`
	// Burst is how many submissions may come at once above the rate.
	// Defaults to the rate per second rounded up (at least 1).
	Burst int `yaml:"burst"`
}

// Operator is one operator credential: HTTP Basic (user = name,
// password = the operator key) or "Authorization: Bearer <key>".
type Operator struct {
	// Hash is "sha256:" followed by the 64 hex digits of the operator
	// key's SHA-256. Required.
	Hash string `yaml:"hash"`
}

// Scopes an API key may have.
const (
	ScopeSubmit  = "submit"
	ScopeRead    = "read"
	ScopeOperate = "operate"
)

// HashPrefix starts every key hash.
const HashPrefix = "sha256:"

// Enabled reports whether HTTP authentication is on: it is unless
// auth.disabled is true.
func (a Auth) Enabled() bool { return !a.Disabled }

// Configured reports whether any key or operator is configured.
func (a Auth) Configured() bool { return len(a.Keys)+len(a.Operators) > 0 }

// ValidHash reports whether h is "sha256:" and 64 lower-case hex digits.
func ValidHash(h string) bool {
	hexPart, ok := strings.CutPrefix(h, HashPrefix)
	if !ok || len(hexPart) != 64 || strings.ToLower(hexPart) != hexPart {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

func (v *validator) auth() {
	a := v.c.Auth
	if a.Disabled && a.Configured() {
		v.add("auth.disabled", "is true while keys or operators are configured; remove the keys and operators or set auth.disabled: false")
	}
	owner := map[string]string{} // hash → key path, to refuse one key under two names
	hash := func(key, h string) {
		switch {
		case h == "":
			v.add(key, `is required: "sha256:" and the hex SHA-256 of the key (docs/security.md)`)
		case !ValidHash(h):
			v.add(key, `must be "sha256:" followed by 64 lower-case hex digits`)
		case owner[h] != "":
			v.add(key, "is the same as %s: each key must be different", owner[h])
		default:
			owner[h] = key
		}
	}
	for _, id := range sorted(a.Keys) {
		k := a.Keys[id]
		key := join("auth.keys", id)
		if !token(id) {
			v.add(key, "a key id must be 1-64 characters of [A-Za-z0-9_-]")
		}
		if k.Account == "" {
			v.add(join(key, "account"), "is required")
		} else if !token(k.Account) {
			v.add(join(key, "account"), "must be an account name of 1-64 characters of [A-Za-z0-9_-], got %q", k.Account)
		}
		if len(k.Scopes) == 0 {
			v.add(join(key, "scopes"), "must list at least one of submit, read, operate")
		}
		for i, s := range k.Scopes {
			if !slices.Contains([]string{ScopeSubmit, ScopeRead, ScopeOperate}, s) {
				v.add(index(join(key, "scopes"), i), "must be submit, read or operate, got %q", s)
			}
		}
		hash(join(key, "hash"), k.Hash)
		if r := k.Rate.PerSecond; r < 0 || r != r {
			v.add(join(key, "rate"), "must be unlimited or a positive rate")
		}
		if k.Burst < 0 {
			v.add(join(key, "burst"), "must not be negative, got %d", k.Burst)
		}
	}
	for _, name := range sorted(a.Operators) {
		key := join("auth.operators", name)
		if !token(name) {
			v.add(key, "an operator name must be 1-64 characters of [A-Za-z0-9_-]")
		}
		hash(join(key, "hash"), a.Operators[name].Hash)
	}
	v.embeddedAuth()
}

// embeddedAuth checks the NATS credentials the embedded server (nats.url
// empty) can require of its clients: user/password, token or an nkey.
func (v *validator) embeddedAuth() {
	n := v.c.NATS
	if n.URL != "" {
		return
	}
	if n.Creds != "" {
		v.add("nats.creds", "needs nats.url: the embedded server does not run operator (JWT) auth; use nats.user/password, nats.token or nats.nkey_seed_file")
	}
	set := 0
	for _, s := range []string{n.User + n.Password.Reveal(), n.Token.Reveal(), n.NKeySeedFile} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		v.add("nats", "the embedded server takes one kind of client auth: set only one of user/password, token and nkey_seed_file")
	}
	if (n.User == "") != (n.Password == "") {
		v.add("nats.password", "nats.user and nats.password go together for the embedded server")
	}
}
