package config

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Account returns the limits of the named account: its own entry merged
// over the "*" entry merged over the built-in defaults, field by field (a
// zero field inherits; a rate inherits when it was not written at all).
// Per-target overrides merge per target: headers key by key (case
// insensitive), the URL when set. An account without an entry gets the
// "*" values. The result is a copy the caller may keep.
func (c *Config) Account(name string) Account {
	star := mergeAccount(c.Accounts[DefaultAccountName], builtinAccount())
	if name == DefaultAccountName {
		return star
	}
	return mergeAccount(c.Accounts[name], star)
}

// DeadLettersOf is how many entries account may keep in DEAD (0: no
// bound): its own dead_letters, inherited from "*", else
// deadletter.max_per_account.
func (c *Config) DeadLettersOf(account string) int64 {
	if n := c.Account(account).DeadLetters; n > 0 {
		return n
	}
	return c.Deadletter.MaxPerAccount
}

// MaxConcurrency is the most calls to the account's targets one
// dispatcher replica makes at once: Concurrency, or under "auto" its
// ConcurrencyMax.
func (a Account) MaxConcurrency() int {
	if a.Concurrency.Auto() {
		return a.ConcurrencyMax
	}
	return int(a.Concurrency)
}

func mergeAccount(over, under Account) Account {
	out := over
	if out.Concurrency == 0 {
		out.Concurrency = under.Concurrency
	}
	if out.ConcurrencyMin == 0 {
		out.ConcurrencyMin = under.ConcurrencyMin
	}
	if out.ConcurrencyMax == 0 {
		out.ConcurrencyMax = under.ConcurrencyMax
	}
	if out.DeadLetters == 0 {
		out.DeadLetters = under.DeadLetters
	}
	if out.Rate.IsZero() {
		out.Rate = under.Rate
	}
	if out.Breaker.Failures == 0 {
		out.Breaker.Failures = under.Breaker.Failures
	}
	if out.Breaker.Cooldown == 0 {
		out.Breaker.Cooldown = under.Breaker.Cooldown
	}
	out.Targets = nil
	if len(over.Targets)+len(under.Targets) > 0 {
		out.Targets = make(map[string]TargetOverride, len(over.Targets)+len(under.Targets))
		for name, o := range under.Targets {
			out.Targets[name] = applyOverride(TargetOverride{}, o)
		}
		for name, o := range over.Targets {
			out.Targets[name] = applyOverride(out.Targets[name], o)
		}
	}
	return out
}

// applyOverride returns base with o applied, sharing no map with either.
func applyOverride(base, o TargetOverride) TargetOverride {
	if o.URL != "" {
		base.URL = o.URL
	}
	if o.CallbackSecret != "" {
		base.CallbackSecret = o.CallbackSecret
	}
	base.Headers = mergeHeaders(base.Headers, o.Headers)
	return base
}

// mergeHeaders returns a new map of base with over applied; a header of
// over replaces any of base with the same canonical name.
func mergeHeaders(base, over map[string]Secret) map[string]Secret {
	if len(base)+len(over) == 0 {
		return nil
	}
	out := make(map[string]Secret, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		ck := http.CanonicalHeaderKey(k)
		for old := range out {
			if http.CanonicalHeaderKey(old) == ck {
				delete(out, old)
			}
		}
		out[k] = v
	}
	return out
}

// Kind returns the routing of an event kind; false means the kind is not
// configured (such events are refused). Its maps are shared with c: do
// not modify them.
func (c *Config) Kind(name string) (Kind, bool) {
	k, ok := c.Kinds[name]
	return k, ok
}

// Target returns a target by name. Its maps and Poll are shared with c:
// do not modify them.
func (c *Config) Target(name string) (Target, bool) {
	t, ok := c.Targets[name]
	return t, ok
}

// LongestCall is the longest timeout of a target's call or poll, or of
// a handler stage's call: how long a call begun may still be in flight.
func (c *Config) LongestCall() time.Duration {
	var d time.Duration
	for _, t := range c.Targets {
		d = max(d, t.Timeout.D())
	}
	for _, k := range c.Kinds {
		d = max(d, k.Timeout.D())
		if k.Fallback != nil {
			d = max(d, k.Fallback.Timeout.D())
		}
	}
	return d
}

// OwnTarget reports whether account calls target with a url or headers
// of its own (accounts.<account>.targets.<target>, not "*"'s): its own
// endpoint or credentials, which the provider limits apart from every
// other account's. The target's rate and concurrency then hold for the
// account's calls alone, and its answers teach only its own "auto" limit.
func (c *Config) OwnTarget(account, target string) bool {
	if account == DefaultAccountName {
		return false
	}
	o := c.Accounts[account].Targets[target]
	return o.URL != "" || len(o.Headers) > 0
}

// CallbackSecret is the key that verifies target's webhooks for
// account's events: the account's own (own true), else the target's.
// An account of "" (a webhook that names none) has the target's.
func (c *Config) CallbackSecret(account, target string) (secret Secret, own bool) {
	if account != "" && account != DefaultAccountName {
		if s := c.Accounts[account].Targets[target].CallbackSecret; s != "" {
			return s, true
		}
	}
	return c.Targets[target].CallbackSecret, false
}

// TargetFor returns target as the given account calls it: the target with
// the "*" account's and then the account's TargetOverride applied (headers
// merged, URL replaced when set). It returns the zero Target (URL "") when
// the target does not exist. Do not modify its maps.
func (c *Config) TargetFor(account, target string) Target {
	t, ok := c.Targets[target]
	if !ok {
		return Target{}
	}
	t = withOverride(t, c.Accounts[DefaultAccountName].Targets[target])
	if account != DefaultAccountName {
		t = withOverride(t, c.Accounts[account].Targets[target])
	}
	return t
}

func withOverride(t Target, o TargetOverride) Target {
	if o.URL != "" {
		t.URL = o.URL
	}
	if len(o.Headers) > 0 {
		t.Headers = mergeHeaders(t.Headers, o.Headers)
	}
	return t
}

// StageFor returns the primary stage (fallback false) or the fallback
// stage (fallback true); false means there is no such stage.
func (k Kind) StageFor(fallback bool) (Stage, bool) {
	if !fallback {
		return k.Stage, k.Target != ""
	}
	if k.Fallback == nil {
		return Stage{}, false
	}
	return *k.Fallback, true
}

// PollEvery is how often the target is polled: its poll.interval, or
// the default one for a target that no longer polls (a reload took its
// poll away while events of it were polling).
func (t Target) PollEvery() Duration {
	if t.Poll == nil {
		return defaultPollInterval
	}
	return t.Poll.Interval
}

// SyncInterval reads Sync: always is true for "always" (and for "" or an
// invalid value, the safe choice); otherwise every is the fsync interval.
func (e Embedded) SyncInterval() (always bool, every time.Duration) {
	s := strings.TrimSpace(e.Sync)
	if s == "" || s == defaultSync {
		return true, 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return true, 0
	}
	return false, d
}

// Redacted returns the configuration as YAML, fit for logs and
// `tenaz config`: every Secret prints as "[redacted]", a password in
// nats.url is hidden, each account shows its effective values (see
// Account), and empty strings and unset optional sections are left out.
func (c *Config) Redacted() string {
	cp := *c
	cp.NATS.URL = redactURLs(c.NATS.URL)
	if len(c.Accounts) > 0 {
		cp.Accounts = make(map[string]Account, len(c.Accounts))
		for name := range c.Accounts {
			a := c.Account(name)
			if !a.Concurrency.Auto() && name != DefaultAccountName {
				a.ConcurrencyMin, a.ConcurrencyMax = 0, 0 // they apply to "auto" only
			}
			cp.Accounts[name] = a
		}
	}
	var n yaml.Node
	if err := n.Encode(&cp); err != nil {
		return "# cannot render the configuration: " + err.Error() + "\n"
	}
	prune(&n)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return "# cannot render the configuration: " + err.Error() + "\n"
	}
	_ = enc.Close()
	return b.String()
}

// redactURLs hides the password of every URL in a comma-separated list.
func redactURLs(list string) string {
	if !strings.Contains(list, "@") {
		return list
	}
	parts := strings.Split(list, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if strings.Contains(p, "@") {
				parts[i] = "[redacted]"
			}
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "redacted")
		} else if u.User.Username() != "" {
			u.User = url.User("redacted") // a token
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// prune drops mapping entries whose value is null, an empty string, an
// empty mapping or an empty list (nil pointers, maps and slices), after
// pruning the value itself.
func prune(n *yaml.Node) {
	for _, c := range n.Content {
		prune(c)
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		v := n.Content[i+1]
		empty := v.Kind == yaml.ScalarNode && (v.ShortTag() == "!!null" || v.Value == "") ||
			(v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode) && len(v.Content) == 0
		if !empty {
			kept = append(kept, n.Content[i], v)
		}
	}
	n.Content = kept
}
