package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/quota"
)

// Scope is what a key may do.
type Scope string

// The scopes of an API key.
const (
	// Submit: POST /v1/events for the key's account.
	Submit Scope = config.ScopeSubmit
	// Read: GET /v1/events/{id} and /history of the key's account's events.
	Read Scope = config.ScopeRead
	// Operate: DELETE /v1/events/{id} (cancel) of the key's account's events.
	Operate Scope = config.ScopeOperate
)

// Errors of Authenticate.
var (
	// ErrNoCredentials: the request carries no Authorization header.
	ErrNoCredentials = errors.New("auth: no credentials")
	// ErrBadCredentials: the credentials match no configured key.
	ErrBadCredentials = errors.New("auth: invalid credentials")
	// ErrNotOperator: the credentials are valid but not an operator's.
	ErrNotOperator = errors.New("auth: not an operator")
)

// ScopeError is a valid key without the scope a request needs.
type ScopeError struct {
	Principal Principal
	Scope     Scope
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("%s does not have the %s scope", e.Principal, e.Scope)
}

// ErrNotConfigured is returned by New for a config with no keys and no
// operators whose auth.disabled is not true.
var ErrNotConfigured = errors.New(`auth.keys: no API keys or operators are configured; add them (docs/security.md) or set auth.disabled: true to serve the HTTP API without authentication`)

// Principal is who a request comes from.
type Principal struct {
	// ID is the key id, or the operator name.
	ID string
	// Account is the key's account; "" for an operator.
	Account string
	// Operator is true for an operator credential.
	Operator bool
	// Anonymous is true when auth is disabled: the principal may do anything.
	Anonymous bool

	scopes map[Scope]bool
	limit  *bucket
}

// Has reports whether p may do s. Operators may read and operate on any
// account, but do not submit; anonymous (auth disabled) may do anything.
func (p Principal) Has(s Scope) bool {
	switch {
	case p.Anonymous:
		return true
	case p.Operator:
		return s == Read || s == Operate
	}
	return p.scopes[s]
}

// MayAccess reports whether p may see or act on an event of account.
func (p Principal) MayAccess(account string) bool {
	return p.Anonymous || p.Operator || p.Account == account
}

// String names p for logs and histories: "key:<id>", "operator:<name>" or
// "anonymous". It never contains a secret.
func (p Principal) String() string {
	switch {
	case p.Anonymous:
		return "anonymous"
	case p.Operator:
		return "operator:" + p.ID
	}
	return "key:" + p.ID
}

type ctxKey struct{}

// From returns the principal a Guard or Require stored in ctx. ok is false
// when the request went through neither (a handler mounted without auth):
// handlers then apply no account restriction.
func From(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// WithPrincipal returns ctx carrying p (tests, and handlers that call
// others).
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// credential is one configured key or operator, by hash.
type credential struct {
	sum  [32]byte
	name string // operator name (Basic auth user); "" for keys
	p    Principal
}

// Authenticator checks requests against the configured keys. A nil
// *Authenticator guards nothing (Require and Guard return the handler as
// is), which is what a service mounted without auth gets.
type Authenticator struct {
	disabled bool
	creds    atomic.Pointer[[]credential] // swapped whole by Update
	now      func() time.Time
	shared   atomic.Pointer[quota.Quotas] // where the keys' rates are counted; nil: in this process
}

// New builds the authenticator of cfg.Auth. It refuses a config with no
// keys and no operators unless auth.disabled is true (ErrNotConfigured).
func New(cfg *config.Config) (*Authenticator, error) {
	a := &Authenticator{now: time.Now}
	c := cfg.Auth
	if c.Disabled {
		if c.Configured() {
			return nil, errors.New("auth.disabled: is true while keys or operators are configured")
		}
		a.disabled = true
		return a, nil
	}
	if !c.Configured() {
		return nil, ErrNotConfigured
	}
	creds, err := credentials(c, nil)
	if err != nil {
		return nil, err
	}
	a.creds.Store(&creds)
	return a, nil
}

// Update makes the keys and operators of cfg.Auth the ones in force, at
// once for every request that comes after (a reloaded config, an
// account added to the accounts bucket). A key whose hash, rate and
// burst are unchanged keeps its submission bucket. auth.disabled cannot
// change this way: a config that turns it on or off is refused, as is one
// with no keys and no operators while auth is on.
func (a *Authenticator) Update(cfg *config.Config) error {
	c := cfg.Auth
	switch {
	case a == nil || a.disabled != c.Disabled:
		return errors.New("auth.disabled: cannot change without a restart")
	case a.disabled:
		return nil
	case !c.Configured():
		return ErrNotConfigured
	}
	creds, err := credentials(c, *a.creds.Load())
	if err != nil {
		return err
	}
	a.creds.Store(&creds)
	return nil
}

// credentials are the keys and operators of c; a key of old with the
// same id, hash and limits keeps its bucket.
func credentials(c config.Auth, old []credential) ([]credential, error) {
	kept := map[string]credential{}
	for _, o := range old {
		if o.name == "" {
			kept[o.p.ID] = o
		}
	}
	var creds []credential
	for id, k := range c.Keys {
		sum, err := parseHash(k.Hash)
		if err != nil {
			return nil, fmt.Errorf("auth.keys.%s.hash: %w", id, err)
		}
		scopes := map[Scope]bool{}
		for _, s := range k.Scopes {
			scopes[Scope(s)] = true
		}
		limit := newBucket(k.Rate.PerSecond, k.Burst)
		if o, ok := kept[id]; ok && o.sum == sum && o.p.limit.same(limit) {
			limit = o.p.limit
		}
		creds = append(creds, credential{sum: sum, p: Principal{ID: id, Account: k.Account, scopes: scopes, limit: limit}})
	}
	for name, o := range c.Operators {
		sum, err := parseHash(o.Hash)
		if err != nil {
			return nil, fmt.Errorf("auth.operators.%s.hash: %w", name, err)
		}
		creds = append(creds, credential{sum: sum, name: name, p: Principal{ID: name, Operator: true}})
	}
	return creds, nil
}

// Disabled reports whether authentication is off.
func (a *Authenticator) Disabled() bool { return a == nil || a.disabled }

// Authenticate finds the principal of r: "Authorization: Bearer <key>"
// (an API key or an operator key) or HTTP Basic (an operator's name and
// key). Every configured hash is compared, in constant time, whichever
// matches; keys shorter than MinKeyLen are refused unhashed.
func (a *Authenticator) Authenticate(r *http.Request) (Principal, error) {
	if a.Disabled() {
		return Principal{Anonymous: true}, nil
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return Principal{}, ErrNoCredentials
	}
	var user, key string
	if scheme, rest, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		key = strings.TrimSpace(rest)
	} else if u, pw, ok := r.BasicAuth(); ok {
		user, key = u, pw
	} else {
		return Principal{}, ErrBadCredentials
	}
	if len(key) < MinKeyLen {
		return Principal{}, ErrBadCredentials
	}
	sum := sha256.Sum256([]byte(key))
	found := -1
	creds := *a.creds.Load()
	for i := range creds {
		c := &creds[i]
		match := subtle.ConstantTimeCompare(sum[:], c.sum[:])
		if user != "" { // Basic: the operator's name must match too
			match &= subtle.ConstantTimeCompare([]byte(user), []byte(c.name))
		}
		if match == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, ErrBadCredentials
	}
	return creds[found].p, nil
}

// AuthenticateHeader is Authenticate for a request that is not HTTP (a
// NATS message): authorization is the value of its Authorization header,
// in the same forms.
func (a *Authenticator) AuthenticateHeader(authorization string) (Principal, error) {
	r := &http.Request{Header: http.Header{}}
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	return a.Authenticate(r)
}

// RequireOperator returns the operator that authorization (an
// Authorization header's value, as AuthenticateHeader reads it) proves:
// ErrNoCredentials or ErrBadCredentials without a valid one, ErrNotOperator
// for an API key. With auth disabled (or a nil Authenticator) it is
// anonymous.
func (a *Authenticator) RequireOperator(authorization string) (Principal, error) {
	p, err := a.AuthenticateHeader(authorization)
	if err != nil {
		return Principal{}, err
	}
	if !p.Operator && !p.Anonymous {
		return Principal{}, fmt.Errorf("%w: %s", ErrNotOperator, p)
	}
	return p, nil
}

// RequireScope authenticates an Authorization header value, as a micro
// endpoint gets it, and requires the scope s (an operator and anonymous
// have every scope): a *ScopeError for a key without it.
func (a *Authenticator) RequireScope(authorization string, s Scope) (Principal, error) {
	p, err := a.AuthenticateHeader(authorization)
	if err == nil && !p.Has(s) {
		return Principal{}, &ScopeError{Principal: p, Scope: s}
	}
	return p, err
}

// Refusal is how to answer an error of Authenticate, RequireOperator or
// RequireScope: its HTTP status (401 or 403), machine code and message,
// the same as over HTTP.
func Refusal(err error) (status int, code, msg string) {
	var se *ScopeError
	switch {
	case errors.As(err, &se):
		return http.StatusForbidden, "forbidden", se.Error()
	case errors.Is(err, ErrNotOperator):
		return http.StatusForbidden, "forbidden", "this needs an operator credential, not an API key"
	case errors.Is(err, ErrBadCredentials):
		return http.StatusUnauthorized, "unauthorized", "the credentials are not valid"
	}
	return http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer <key>"
}

// principal returns the principal of r: the one a Guard stored, else
// Authenticate's.
func (a *Authenticator) principal(r *http.Request) (Principal, error) {
	if p, ok := From(r.Context()); ok {
		return p, nil
	}
	return a.Authenticate(r)
}

// Require serves h only to a principal with scope s; for Submit it also
// spends one token of the key's rate limit (429 with Retry-After when
// none is left). No credential: 401; the wrong scope: 403. h finds the
// principal with From. A nil or disabled Authenticator passes every
// request (as anonymous).
func (a *Authenticator) Require(s Scope, h http.Handler) http.Handler {
	if a == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.principal(r)
		if err != nil {
			unauthorized(w, err, false)
			return
		}
		if !p.Has(s) {
			httpapi.Error(w, http.StatusForbidden, "forbidden", (&ScopeError{Principal: p, Scope: s}).Error())
			return
		}
		if s == Submit {
			if ok, wait := a.take(r.Context(), p); !ok {
				secs := int((wait + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
				httpapi.Error(w, http.StatusTooManyRequests, "rate_limited", fmt.Sprintf("%s is over its submission rate; retry after %ds", p, max(secs, 1)))
				return
			}
		}
		h.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// ShareRates counts the keys' submission rates in q (tenaz_quotas, one
// record per key id) instead of in this process, so that a key's rate
// holds over every replica that shares q's bucket: N ingest replicas
// behind a load balancer allow the key its rate, not N times it. Call it
// before serving.
func (a *Authenticator) ShareRates(q *quota.Quotas) {
	if a != nil {
		a.shared.Store(q)
	}
}

// takeWait bounds the shared bucket's answer to one submission.
const takeWait = 2 * time.Second

// take spends one token of p's submission rate; when none is left it
// reports how long until one is. The shared bucket decides when there is
// one (ShareRates); while it does not answer, this process's own bucket
// stands in (each replica then allows the key its rate).
func (a *Authenticator) take(ctx context.Context, p Principal) (bool, time.Duration) {
	if p.limit == nil {
		return true, 0
	}
	if q := a.shared.Load(); q != nil {
		ctx, cancel := context.WithTimeout(ctx, takeWait)
		ok, wait, err := q.Take(ctx, quota.APIKey(p.ID), quota.Limit{Rate: p.limit.rate, Burst: p.limit.burst})
		cancel()
		if err == nil {
			return ok, wait
		}
	}
	return p.limit.take(a.now())
}

// sameOrigin rejects unsafe (non GET/HEAD/OPTIONS) cross-origin browser
// requests, by Sec-Fetch-Site or Origin.
var sameOrigin = http.NewCrossOriginProtection()

func unauthorized(w http.ResponseWriter, err error, operator bool) {
	if operator {
		w.Header().Set("WWW-Authenticate", `Basic realm="tenaz operator", charset="UTF-8"`)
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tenaz"`)
	}
	status, code, msg := Refusal(err)
	httpapi.Error(w, status, code, msg)
}
