package auth

import (
	"net/http"
	"slices"

	"github.com/tenaz/tenaz/pkg/httpapi"
)

// Class is what a route asks of a request's credential before its handler
// runs. The zero Class is no class: such a route is refused to everyone.
type Class int

// The classes of a route.
const (
	// Open routes ask for no credential: probes, metrics, and webhooks,
	// which prove themselves by their signature.
	Open Class = iota + 1
	// OperatorOnly routes need an operator credential: the screen, dead
	// letters, reviews and breakers, which span every account.
	OperatorOnly
	// AnyCredential routes need a valid key or operator credential; the
	// route's Require checks the scope, its handler the account.
	AnyCredential
)

func (c Class) String() string {
	switch c {
	case Open:
		return "open"
	case OperatorOnly:
		return "operator"
	case AnyCredential:
		return "credential"
	}
	return "none"
}

// routes is the class of every route tenaz serves, by the pattern its
// service registers it with (what http.ServeMux reports as matched). A
// route missing here is refused to everyone; TestEveryRouteHasAClass
// (services/tenaz) fails for it.
var routes = map[string]Class{
	// pkg/daemon, every binary
	"GET /healthz": Open,
	"GET /readyz":  Open,
	"GET /metrics": Open,

	// services/ingest
	"POST /v1/events":                       AnyCredential, // Require(Submit), the body's account
	"GET /v1/events/{id}":                   AnyCredential, // Require(Read), the event's account
	"GET /v1/events/{id}/history":           AnyCredential, // Require(Read), the event's account
	"DELETE /v1/events/{id}":                AnyCredential, // Require(Operate), the event's account
	"POST /v1/callbacks/{target}":           Open,          // the target's Standard Webhooks signature
	"POST /v1/callbacks/{target}/{account}": Open,          // the same, references resolved in that account only
	"GET /v1/openapi.json":                  Open,          // the API's OpenAPI document
	// Repeating events: a repeat submits for its account without a key's
	// rate, and outlives any key, so only operators make them.
	"GET /v1/repeats":                     OperatorOnly,
	"PUT /v1/repeats/{account}/{name}":    OperatorOnly,
	"DELETE /v1/repeats/{account}/{name}": OperatorOnly,

	// services/deadletter: the JSON API
	"GET /v1/dead":                               OperatorOnly,
	"GET /v1/dead/{id}":                          OperatorOnly,
	"GET /v1/dead/jobs/{job}":                    OperatorOnly,
	"POST /v1/dead/jobs/{job}/cancel":            OperatorOnly,
	"POST /v1/dead/replay":                       OperatorOnly,
	"POST /v1/dead/{id}/replay":                  OperatorOnly,
	"POST /v1/dead/discard":                      OperatorOnly,
	"GET /v1/review":                             OperatorOnly,
	"GET /v1/review/{id}":                        OperatorOnly,
	"POST /v1/review/{id}/resolve":               OperatorOnly,
	"GET /v1/breakers":                           OperatorOnly,
	"POST /v1/breakers/{account}/{target}/close": OperatorOnly,
	// the operators' actions on live accounts, events and breakers
	"POST /v1/breakers/{account}/{target}/open": OperatorOnly,
	"POST /v1/accounts/{account}/pause":         OperatorOnly,
	"POST /v1/accounts/{account}/resume":        OperatorOnly,
	"GET /v1/pauses":                            OperatorOnly,
	"POST /v1/events/{id}/retry":                OperatorOnly,
	"POST /v1/events/{id}/cancel-wait":          OperatorOnly,
	"GET /v1/actions":                           OperatorOnly,
	// search: an API key finds its own account's events
	"GET /v1/events": AnyCredential, // Require(Read), the key's account
	// the config in force and the accounts bucket (pkg/live)
	"GET /v1/config":                       OperatorOnly,
	"GET /v1/config/accounts":              OperatorOnly,
	"PUT /v1/config/accounts/{account}":    OperatorOnly,
	"DELETE /v1/config/accounts/{account}": OperatorOnly,
	// the audit archive: an API key reads its own account's
	"GET /v1/entities/{account}/{entity}/timeline": AnyCredential, // Require(Read), the path's account
	"GET /v1/audit/export":                         AnyCredential, // Require(Read), the key's account

	// services/deadletter: the screen
	"GET /ui/{$}":           OperatorOnly,
	"GET /ui/static/":       OperatorOnly,
	"GET /ui/dead":          OperatorOnly,
	"GET /ui/review":        OperatorOnly,
	"GET /ui/events/{id}":   OperatorOnly,
	"GET /ui/entries/{seq}": OperatorOnly,
	"GET /ui/jobs/{job}":    OperatorOnly,
	"GET /ui/breakers":      OperatorOnly,
	"GET /ui/accounts":      OperatorOnly,
	"GET /ui/retrying":      OperatorOnly,
	"GET /ui/scheduled":     OperatorOnly,
	"GET /ui/overview":      OperatorOnly,
	"GET /ui/events":        OperatorOnly,
	"POST /ui/actions":      OperatorOnly,

	// the screen's entity timeline
	"GET /ui/entities/{account}/{entity}": OperatorOnly,
}

// ClassOf returns the class of the route registered as pattern; ok is
// false for a pattern that has none.
func ClassOf(pattern string) (c Class, ok bool) {
	c, ok = routes[pattern]
	return c, ok
}

// Patterns lists every classified pattern, sorted.
func Patterns() []string {
	out := make([]string, 0, len(routes))
	for p := range routes {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Router is a mux that reports the pattern a request matches, as
// *http.ServeMux does: Guard routes first and judges the route.
type Router interface {
	http.Handler
	Handler(r *http.Request) (h http.Handler, pattern string)
}

// Guard wraps a process's whole mux. It asks the mux which pattern the
// request matches (after the mux cleans the path, so "..", "//" and %2F
// cannot turn an operator route into an open one) and applies its class:
//   - Open: served as is;
//   - OperatorOnly: an operator (HTTP Basic or Bearer); without a
//     credential the answer is 401 with a Basic challenge, so a browser
//     asks for the operator's name and key; with another one, 403;
//   - AnyCredential: a valid key or operator (401 otherwise); the route's
//     own Require checks the scope;
//   - a registered pattern with no class: 403 for everyone (default deny);
//   - no pattern (the mux answers 404, 405, or redirects to the cleaned
//     path): a valid credential, as for AnyCredential.
//
// Before credentials are looked at, a state-changing request from a
// browser on another origin (a forged form post carrying the operator's
// cached Basic credentials) is 403. The principal is stored in the
// request's context. A disabled Authenticator serves every route
// anonymously, but still refuses those cross-origin requests: an open API
// on localhost or a private network is reachable from any page its users'
// browsers open, and without credentials nothing else stops that page.
func (a *Authenticator) Guard(mux Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		class := AnyCredential
		if _, pattern := mux.Handler(r); pattern != "" {
			var ok bool
			if class, ok = ClassOf(pattern); !ok && !a.Disabled() {
				httpapi.Error(w, http.StatusForbidden, "forbidden", "this route has no access class: it is refused")
				return
			}
		}
		if class == Open {
			mux.ServeHTTP(w, r)
			return
		}
		// A browser sends cached Basic credentials with any request, a
		// forged cross-site form post too: refuse unsafe cross-origin
		// browser requests (non-browser clients send no Origin).
		if err := sameOrigin.Check(r); err != nil {
			httpapi.Error(w, http.StatusForbidden, "cross_origin", "cross-origin requests that change state are refused")
			return
		}
		if a.Disabled() {
			mux.ServeHTTP(w, r)
			return
		}
		p, err := a.Authenticate(r)
		if err != nil {
			unauthorized(w, err, class == OperatorOnly)
			return
		}
		if class == OperatorOnly && !p.Operator {
			httpapi.Error(w, http.StatusForbidden, "forbidden", "this route needs an operator credential")
			return
		}
		mux.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}
