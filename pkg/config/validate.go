package config

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/streams"
)

// MaxPayloadCeiling is the largest max_payload nats-server accepts (64
// MiB): an http.max_body_bytes above it fits no server.
const MaxPayloadCeiling = 64 << 20

// Classes a target's classify map may give a status.
const (
	ClassSuccess   = "success"
	ClassTransient = "transient"
	ClassPermanent = "permanent"
)

// Values of Log.Format.
const (
	LogFormatJSON    = "json"
	LogFormatConsole = "console"
)

// logLevels are zerolog's level names.
var logLevels = []string{"trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled"}

// MaxAttempts bounds Stage.Attempts.
const MaxAttempts = 100

// MinSecretBytes is the shortest key a signing_secret or callback_secret
// may decode to: Standard Webhooks asks for 24 to 64 bytes. Shorter keys
// (an empty one signs for anybody) are refused.
const MinSecretBytes = 24

// secretPrefix starts a Standard Webhooks secret; the standard base64 of
// the key follows.
const secretPrefix = "whsec_"

// MaxTolerance bounds targets.<target>.callback.tolerance, the window in
// which a captured webhook can be replayed. Standard Webhooks recommends
// 5 minutes; an hour leaves room for a provider with a badly set clock
// while a captured webhook still goes stale within the hour.
const MaxTolerance = Duration(time.Hour)

// StopMargin is what stop_timeout keeps beyond the longest target call:
// the HTTP listener shuts down within the same deadline, and the last
// call's outcome is still to be stored and acknowledged after it returns.
const StopMargin = Duration(5 * time.Second)

// Validate checks c, which should have had WithDefaults applied, and
// returns every problem at once: an errors.Join of *KeyError values, each
// wrapping ErrInvalidConfig and naming its key, sorted by key. It returns
// nil when c is valid. It compiles every kind's schema (see SchemaFor).
func (c *Config) Validate() error {
	v := &validator{c: c}
	v.top()
	v.accounts()
	v.targets()
	v.kinds()
	v.auth()
	v.deadletter()
	v.audit()
	v.metrics()
	v.sealingKey()
	return joinSorted(v.errs)
}

type validator struct {
	c    *Config
	errs []error
}

func (v *validator) add(key, format string, args ...any) {
	v.errs = append(v.errs, &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) addErr(key string, err error) {
	v.errs = append(v.errs, &KeyError{Key: key, Msg: err.Error(), Err: err})
}

func sorted[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// token reports whether s is one subject token of [A-Za-z0-9_-], 1-64 bytes.
func token(s string) bool {
	return names.ValidateAccount(s) == nil
}

// httpToken reports whether s is an RFC 9110 token (a method or header name).
func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (v *validator) positive(key string, d Duration) {
	switch {
	case d <= 0:
		v.add(key, "must be a positive duration, got %s", d)
	case d > MaxDuration:
		v.add(key, "must be at most %s (ten years), got %s", MaxDuration, d)
	}
}

// MaxDuration bounds every duration of the config: tenaz adds some of
// them (a callback's SLA and the streams' retention make a reference's
// lifetime), and past 292 years a sum wraps to a negative one.
const MaxDuration = Duration(10 * 365 * 24 * time.Hour)

func (v *validator) notNegative(key string, d Duration) {
	if d < 0 {
		v.add(key, "must not be negative, got %s", d)
	}
}

func (v *validator) hostPort(key, addr string) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		v.add(key, "must be host:port or :port, got %q", addr)
	}
}

// outboxName is an unquoted PostgreSQL name the relay derives its index,
// function and trigger names from: lower case (an unquoted name is folded
// to it), short enough that "<name>_notify" fits PostgreSQL's 63 bytes.
var outboxName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

func (v *validator) outbox() {
	o := v.c.Outbox
	schema, table, qualified := strings.Cut(o.Table, ".")
	if !qualified {
		schema, table = "", o.Table
	}
	if !outboxName.MatchString(table) || (qualified && !outboxName.MatchString(schema)) {
		v.add("outbox.table", "must be a table name, optionally schema-qualified, each of 1-48 characters of [a-z0-9_] not starting with a digit, got %q", o.Table)
	}
	if o.Batch < 1 || o.Batch > MaxOutboxBatch {
		v.add("outbox.batch", "must be between 1 and %d, got %d", MaxOutboxBatch, o.Batch)
	}
	v.positive("outbox.poll_interval", o.PollInterval)
	if o.Account != "" && !token(o.Account) {
		v.add("outbox.account", "must be an account name of 1-64 characters of [A-Za-z0-9_-], got %q", o.Account)
	}
}

func (v *validator) top() {
	c := v.c
	if p := c.Streams.Partitions; p < 0 || p > streams.MaxPartitions {
		v.add("streams.partitions", "must be 1 to %d (or 0: the store's own count), got %d", streams.MaxPartitions, p)
	}
	if n := c.Poller.Concurrency; n < 1 || n > ConcurrencyCeiling {
		v.add("poller.concurrency", "must be between 1 and %d, got %d", ConcurrencyCeiling, n)
	}
	v.positive("poller.reconcile_every", c.Poller.ReconcileEvery)
	v.positive("poller.grace", c.Poller.Grace)
	v.positive("poller.running_grace", c.Poller.RunningGrace)
	v.outbox()
	v.positive("stop_timeout", c.StopTimeout)
	if !token(c.Prefix) {
		v.add("prefix", "must be one subject token of 1-64 characters of [A-Za-z0-9_-], got %q", c.Prefix)
	}
	if c.NATS.URL != "" {
		for _, u := range strings.Split(c.NATS.URL, ",") {
			if strings.TrimSpace(u) == "" {
				v.add("nats.url", "has an empty entry in its comma-separated list")
				break
			}
		}
	}
	if (c.NATS.TLS.Cert == "") != (c.NATS.TLS.Key == "") {
		if c.NATS.TLS.Cert == "" {
			v.add("nats.tls.cert", "is required when nats.tls.key is set")
		} else {
			v.add("nats.tls.key", "is required when nats.tls.cert is set")
		}
	}
	if s := c.NATS.Embedded.Sync; s != defaultSync {
		if d, err := time.ParseDuration(s); err != nil || d <= 0 {
			v.add("nats.embedded.sync", `must be "always" or a positive duration such as "1s", got %q`, s)
		}
	}
	if c.NATS.Embedded.StoreDir == "" {
		v.add("nats.embedded.store_dir", "is required")
	}
	v.hostPort("nats.embedded.listen", c.NATS.Embedded.Listen)
	v.hostPort("http.addr", c.HTTP.Addr)
	if p := c.HTTP.PublicURL; p != "" {
		// The URL is not quoted: it may be an internal name.
		if u, err := url.Parse(p); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(p, "?") || strings.HasSuffix(p, "#") {
			v.add("http.public_url", "must be an http or https URL with a host and no user, query or fragment (as https://tenaz.example.com)")
		}
	}
	switch {
	case c.HTTP.MaxBodyBytes <= 0:
		v.add("http.max_body_bytes", "must be positive, got %d", c.HTTP.MaxBodyBytes)
	case c.HTTP.MaxBodyBytes > MaxPayloadCeiling:
		// Checked here so that `tenaz config` says so too; below it, the
		// server's own max_payload decides, checked at start.
		v.add("http.max_body_bytes", "must be at most %d, the largest max_payload a NATS server takes (an event's messages add a little to its payload, and the server's own max_payload is checked at start), got %d", MaxPayloadCeiling, c.HTTP.MaxBodyBytes)
	}
	v.positive("http.read_header_timeout", c.HTTP.ReadHeaderTimeout)
	v.positive("http.read_timeout", c.HTTP.ReadTimeout)
	v.positive("http.write_timeout", c.HTTP.WriteTimeout)
	v.positive("http.idle_timeout", c.HTTP.IdleTimeout)
	if c.HTTP.ReadHeaderTimeout > c.HTTP.ReadTimeout {
		v.add("http.read_header_timeout", "must not exceed http.read_timeout (%s, which includes the headers), got %s", c.HTTP.ReadTimeout, c.HTTP.ReadHeaderTimeout)
	}
	if f := c.Log.Format; f != LogFormatJSON && f != LogFormatConsole {
		v.add("log.format", `must be "json" or "console", got %q`, f)
	}
	if !slices.Contains(logLevels, c.Log.Level) {
		v.add("log.level", "must be one of %s, got %q", strings.Join(logLevels, ", "), c.Log.Level)
	}
	if r := c.Streams.Replicas; r != 1 && r != 3 && r != 5 {
		v.add("streams.replicas", "must be 1, 3 or 5, got %d", r)
	}
	for i, t := range c.Streams.Tags {
		if strings.TrimSpace(t) == "" {
			v.add(index("streams.tags", i), "must not be empty")
		}
	}
	v.positive("streams.retention", c.Streams.Retention)
	v.positive("streams.ack_wait", c.Streams.AckWait)
	v.positive("streams.trim_after", c.Streams.TrimAfter)
	if f := c.Demo.FailureRate; math.IsNaN(f) || f < 0 || f > 1 {
		v.add("demo.failure_rate", "must be between 0 and 1, got %v", f)
	}
	if c.Demo.Provider != "" {
		v.hostPort("demo.provider", c.Demo.Provider)
	}
}

func (v *validator) accounts() {
	c := v.c
	if _, ok := c.Accounts[DefaultAccountName]; !ok {
		v.add("accounts", `has no "*" entry (WithDefaults adds it)`)
	}
	for _, name := range sorted(c.Accounts) {
		a := c.Accounts[name]
		key := join("accounts", name)
		if name != DefaultAccountName {
			if err := names.ValidateAccount(name); err != nil {
				v.addErr(key, err)
			}
		}
		star := name == DefaultAccountName
		if a.Concurrency < 0 && !a.Concurrency.Auto() || star && a.Concurrency == 0 {
			v.add(join(key, "concurrency"), `must be at least 1 or "auto", got %d`, a.Concurrency)
		}
		v.concurrencyBounds(key, star, a, c.Account(name))
		if math.IsNaN(a.Rate.PerSecond) || math.IsInf(a.Rate.PerSecond, 0) || a.Rate.PerSecond < 0 {
			v.add(join(key, "rate"), "must be unlimited or a positive rate, got %v", a.Rate.PerSecond)
		}
		if a.DeadLetters < 0 {
			v.add(join(key, "dead_letters"), "must be a number of entries (0: deadletter.max_per_account), got %d", a.DeadLetters)
		}
		if a.Breaker.Failures < 0 || star && a.Breaker.Failures == 0 {
			v.add(join(key, "breaker.failures"), "must be at least 1, got %d", a.Breaker.Failures)
		}
		if star {
			v.positive(join(key, "breaker.cooldown"), a.Breaker.Cooldown)
		} else {
			v.notNegative(join(key, "breaker.cooldown"), a.Breaker.Cooldown)
		}
		for _, tname := range sorted(a.Targets) {
			o := a.Targets[tname]
			tkey := join(key, "targets."+tname)
			if _, ok := c.Targets[tname]; !ok {
				v.add(tkey, "unknown target %q", tname)
			}
			v.headers(join(tkey, "headers"), o.Headers)
			if o.CallbackSecret != "" {
				switch t := c.Targets[tname]; {
				case star:
					v.add(join(tkey, "callback_secret"), "is per account; every account's is targets.%s.callback_secret", tname)
				case t.URL != "" && t.CallbackSecret == "":
					v.add(join(tkey, "callback_secret"), "needs targets.%s.callback_secret: only a target that receives callbacks verifies them", tname)
				case sameKey(o.CallbackSecret, t.CallbackSecret):
					v.add(join(tkey, "callback_secret"), "is targets.%s.callback_secret: an account's own key must differ from the one every other account's webhooks are verified with", tname)
				default:
					v.secret(join(tkey, "callback_secret"), o.CallbackSecret)
				}
			}
			if o.URL != "" {
				if err := checkURL(o.URL); err != nil {
					v.addErr(join(tkey, "url"), err)
				}
			}
		}
		v.repeats(key, name, a)
	}
}

// concurrencyBounds checks the bounds of "concurrency: auto" written in
// the account entry a at key; eff is the account's limits with what it
// inherits. The "*" entry may set bounds for the accounts that opt in.
func (v *validator) concurrencyBounds(key string, star bool, a, eff Account) {
	for _, b := range []struct {
		name string
		n    int
	}{{"concurrency_min", a.ConcurrencyMin}, {"concurrency_max", a.ConcurrencyMax}} {
		switch {
		case b.n < 0 || star && b.n == 0:
			v.add(join(key, b.name), "must be at least 1, got %d", b.n)
		case b.n > ConcurrencyCeiling:
			v.add(join(key, b.name), "must be at most %d, got %d", ConcurrencyCeiling, b.n)
		case b.n > 0 && !star && !eff.Concurrency.Auto():
			v.add(join(key, b.name), "applies only with concurrency: auto; the account's concurrency is %d", eff.Concurrency)
		}
	}
	if (star || eff.Concurrency.Auto()) && eff.ConcurrencyMin > eff.ConcurrencyMax && eff.ConcurrencyMax > 0 {
		k := join(key, "concurrency_max")
		if a.ConcurrencyMax == 0 {
			k = join(key, "concurrency_min")
		}
		v.add(k, "concurrency_min (%d) must not exceed concurrency_max (%d)", eff.ConcurrencyMin, eff.ConcurrencyMax)
	}
}

// targetConcurrencyBounds checks the bounds of a target's "concurrency:
// auto" (its defaults are set only under "auto").
func (v *validator) targetConcurrencyBounds(key string, t Target) {
	for _, b := range []struct {
		name string
		n    int
	}{{"concurrency_min", t.ConcurrencyMin}, {"concurrency_max", t.ConcurrencyMax}} {
		switch {
		case b.n < 0:
			v.add(join(key, b.name), "must be at least 1, got %d", b.n)
		case b.n > ConcurrencyCeiling:
			v.add(join(key, b.name), "must be at most %d, got %d", ConcurrencyCeiling, b.n)
		case b.n > 0 && !t.Concurrency.Auto():
			v.add(join(key, b.name), "applies only with concurrency: auto; the target's concurrency is %s", t.Concurrency)
		}
	}
	if t.Concurrency.Auto() && t.ConcurrencyMin > t.ConcurrencyMax {
		v.add(join(key, "concurrency_min"), "concurrency_min (%d) must not exceed concurrency_max (%d)", t.ConcurrencyMin, t.ConcurrencyMax)
	}
}

func (v *validator) headers(key string, h map[string]Secret) {
	for _, name := range sorted(h) {
		if !httpToken(name) {
			v.add(join(key, name), "is not a valid header name")
		}
		if strings.ContainsAny(h[name].Reveal(), "\r\n\x00") {
			v.add(join(key, name), "value must not contain CR, LF or NUL")
		}
	}
}

// secret checks a Standard Webhooks secret, if set, without ever
// putting its value in the message.
// sameKey reports whether a and b are one whsec_ key, however each
// writes its base64.
func sameKey(a, b Secret) bool {
	decode := func(s Secret) []byte {
		b64, ok := strings.CutPrefix(s.Reveal(), secretPrefix)
		if !ok {
			return nil
		}
		k, _ := base64.StdEncoding.DecodeString(b64)
		return k
	}
	ka := decode(a)
	return len(ka) > 0 && bytes.Equal(ka, decode(b))
}

func (v *validator) secret(key string, s Secret) {
	if s == "" {
		return
	}
	b64, ok := strings.CutPrefix(s.Reveal(), secretPrefix)
	if !ok {
		v.add(key, `must be %q followed by the standard base64 of the key (Standard Webhooks), e.g. "whsec_$(openssl rand -base64 32)"`, secretPrefix)
		return
	}
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		v.add(key, "is not valid standard base64 after %q", secretPrefix)
		return
	}
	if len(k) < MinSecretBytes {
		v.add(key, "decodes to a %d-byte key; at least %d bytes are required, e.g. \"whsec_$(openssl rand -base64 32)\"", len(k), MinSecretBytes)
	}
}

// callTimeout checks that a call of timeout d fits in the drain: a call
// cut by the stop deadline may have reached the target, and is made again.
func (v *validator) callTimeout(key string, d Duration) {
	if limit := v.c.StopTimeout - StopMargin; d > 0 && v.c.StopTimeout > 0 && d > limit {
		v.add(key, "%s does not fit in the drain on stop: at most stop_timeout (%s) minus %s, so %s; lower it or raise stop_timeout (and the deployment's grace period)", d, v.c.StopTimeout, StopMargin, max(limit, 0))
	}
}

func (v *validator) targets() {
	for _, name := range sorted(v.c.Targets) {
		t := v.c.Targets[name]
		key := join("targets", name)
		if !token(name) {
			v.add(key, "a target name must be 1-64 characters of [A-Za-z0-9_-] (it appears in subjects and in /v1/callbacks/{target})")
		}
		if err := checkURL(t.URL); err != nil {
			v.addErr(join(key, "url"), err)
		}
		if !httpToken(t.Method) {
			v.add(join(key, "method"), "must be an HTTP method such as POST, got %q", t.Method)
		}
		v.positive(join(key, "timeout"), t.Timeout)
		v.callTimeout(join(key, "timeout"), t.Timeout)
		v.headers(join(key, "headers"), t.Headers)
		v.secret(join(key, "signing_secret"), t.SigningSecret)
		v.secret(join(key, "callback_secret"), t.CallbackSecret)
		for _, status := range sorted(t.Classify) {
			ckey := join(key, "classify."+status)
			if code, err := strconv.Atoi(status); err != nil || len(status) != 3 || code < 100 || code > 599 {
				v.add(ckey, "must be a 3-digit HTTP status between 100 and 599")
			}
			switch class := t.Classify[status]; class {
			case ClassSuccess, ClassTransient, ClassPermanent:
			default:
				v.add(ckey, "must be success, transient or permanent, got %q", class)
			}
		}
		if t.ReferenceField == "" {
			v.add(join(key, "reference_field"), "is required")
		}
		if k := t.IdempotencyKey; k != IdempotencyKeyEvent && k != IdempotencyKeyCaller {
			v.add(join(key, "idempotency_key"), "must be event or caller, got %q", k)
		}
		if r := t.Redirects; r != RedirectsNone && r != RedirectsSameHost {
			v.add(join(key, "redirects"), "must be none or same_host, got %q", r)
		}
		if r := t.Rate.PerSecond; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
			v.add(join(key, "rate"), "must be unlimited or a positive rate, got %v", r)
		}
		if t.Concurrency < 0 && !t.Concurrency.Auto() {
			v.add(join(key, "concurrency"), `must be positive, "auto" (or 0: unlimited), got %d`, t.Concurrency)
		}
		v.targetConcurrencyBounds(key, t)
		ckey := join(key, "callback")
		v.positive(join(ckey, "tolerance"), t.Callback.Tolerance)
		if t.Callback.Tolerance > MaxTolerance {
			v.add(join(ckey, "tolerance"), "must be at most %s (Standard Webhooks recommends 5m), got %s", MaxTolerance, t.Callback.Tolerance)
		}
		if t.Callback.EventField == "" && t.Callback.ReferenceField == "" {
			v.add(ckey, "event_field or reference_field is required")
		}
		if f := t.Callback.ReplayField; f != "" && (f == t.Callback.EventField || f == t.Callback.ReferenceField) {
			v.add(join(ckey, "replay_field"), "must differ from event_field and reference_field, got %q", f)
		}
		if dw := t.Callback.DoneWhen; (dw.Field == "") != (len(dw.In) == 0) {
			v.add(join(ckey, "done_when"), "needs both field and in")
		}
		if p := t.Poll; p != nil {
			pkey := join(key, "poll")
			if err := checkURL(p.URL); err != nil {
				v.addErr(join(pkey, "url"), err)
			}
			v.positive(join(pkey, "interval"), p.Interval)
			if p.DoneWhen.Field == "" {
				v.add(join(pkey, "done_when.field"), "is required")
			}
			if len(p.DoneWhen.In) == 0 {
				v.add(join(pkey, "done_when.in"), "must list at least one value")
			}
		}
	}
}

func (v *validator) kinds() {
	for _, name := range sorted(v.c.Kinds) {
		k := v.c.Kinds[name]
		key := join("kinds", name)
		if err := names.ValidateKind(name); err != nil {
			v.addErr(key, err)
		}
		v.stage(key, k.Stage)
		switch k.OnCallbackTimeout {
		case OnCallbackTimeoutManualReview:
		case OnCallbackTimeoutFallback:
			if k.Fallback == nil {
				v.add(join(key, "on_callback_timeout"), "fallback requires %s", join(key, "fallback"))
			}
		default:
			v.add(join(key, "on_callback_timeout"), "must be manual_review or fallback, got %q", k.OnCallbackTimeout)
		}
		if k.Fallback != nil {
			v.stage(join(key, "fallback"), *k.Fallback)
		}
		if strings.TrimSpace(k.Schema) != "" {
			if _, err := v.c.SchemaFor(name); err != nil {
				v.addErr(join(key, "schema"), err)
			}
		}
	}
}

func (v *validator) stage(key string, s Stage) {
	var t Target
	var known bool
	switch {
	case s.Handler != "" && s.Target != "":
		v.add(join(key, "handler"), "set either target or handler, not both")
	case s.Handler != "":
		if !token(s.Handler) {
			v.add(join(key, "handler"), "must be one token of [A-Za-z0-9_-], got %q", s.Handler)
		}
		if s.Completion != CompletionSync {
			v.add(join(key, "completion"), "a handler stage completes synchronously; got %q", s.Completion)
		}
		v.positive(join(key, "timeout"), s.Timeout)
		v.callTimeout(join(key, "timeout"), s.Timeout)
	case s.Timeout != 0:
		v.add(join(key, "timeout"), "bounds a handler's calls; a target's calls take targets.%s.timeout", s.Target)
	case s.Target == "":
		v.add(join(key, "target"), "is required")
	}
	if s.Target != "" {
		if t, known = v.c.Targets[s.Target]; !known {
			v.add(join(key, "target"), "unknown target %q", s.Target)
		}
	}
	switch s.Completion {
	case CompletionSync:
	case CompletionCallback:
		if known && t.CallbackSecret == "" {
			v.add(join(key, "completion"), "callback requires targets.%s.callback_secret", s.Target)
		}
	case CompletionPoll:
		if known && (t.Poll == nil || t.Poll.URL == "") {
			v.add(join(key, "completion"), "poll requires targets.%s.poll.url", s.Target)
		}
	default:
		v.add(join(key, "completion"), "must be sync, callback or poll, got %q", s.Completion)
	}
	if s.Attempts < 1 || s.Attempts > MaxAttempts {
		v.add(join(key, "attempts"), "must be between 1 and %d, got %d", MaxAttempts, s.Attempts)
	}
	b := s.Backoff
	bkey := join(key, "backoff")
	v.positive(join(bkey, "initial"), b.Initial)
	v.positive(join(bkey, "max"), b.Max)
	if b.Initial > 0 && b.Max > 0 && b.Initial > b.Max {
		v.add(join(bkey, "initial"), "%s is more than backoff.max %s", b.Initial, b.Max)
	}
	if math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0) || b.Multiplier < 1 {
		v.add(join(bkey, "multiplier"), "must be at least 1, got %v", b.Multiplier)
	}
	if math.IsNaN(b.Jitter) || b.Jitter < 0 || b.Jitter >= 1 {
		v.add(join(bkey, "jitter"), "must be at least 0 and less than 1, got %v", b.Jitter)
	}
	v.positive(join(bkey, "max_retry_after"), b.MaxRetryAfter)
	v.positive(join(key, "callback_sla"), s.CallbackSLA)
	v.positive(join(key, "poll_sla"), s.PollSLA)
}
