package config

import (
	"errors"
	"time"
)

// ErrInvalidConfig is wrapped by every configuration error; the message
// names the offending key (for example "kinds.order.create.target").
var ErrInvalidConfig = errors.New("invalid config")

// Config is the whole of tenaz.yaml. Every value can be overridden by a
// TENAZ_… environment variable and any string may reference a secret as
// ${ENV_NAME}. See docs/configuration.md for every key.
type Config struct {
	// Prefix is the first token of every subject. Defaults to "tenaz".
	Prefix string `yaml:"prefix"`
	// NATS says how to reach NATS, or how to run it embedded.
	NATS NATS `yaml:"nats"`
	// HTTP is the HTTP listener shared by the services of a process.
	HTTP HTTP `yaml:"http"`
	// Log selects the log format and level.
	Log Log `yaml:"log"`
	// Streams sets replication and placement of the streams and buckets.
	Streams Streams `yaml:"streams"`
	// Accounts holds per-account limits; the key "*" gives the defaults
	// every other account inherits. Defaults to {"*": {}}.
	Accounts map[string]Account `yaml:"accounts"`
	// Targets are the external APIs events are delivered to, by name.
	Targets map[string]Target `yaml:"targets"`
	// Kinds routes each event kind to its target(s). An event of a kind not
	// listed here is refused with 422.
	Kinds map[string]Kind `yaml:"kinds"`
	// Demo starts the built-in demo provider (tenaz run only).
	Demo Demo `yaml:"demo"`
	// Deadletter sets the operator screen, replay jobs and the nightly digest.
	Deadletter Deadletter `yaml:"deadletter"`
	// Audit sets the audit archive of every transition and operator action.
	Audit Audit `yaml:"audit"`
	// Auth guards the HTTP API with API keys and operator credentials.
	Auth Auth `yaml:"auth"`
	// Poller sets how the poller service polls and reconciles.
	Poller Poller `yaml:"poller"`
	// Metrics bounds the account label and adds native histograms.
	Metrics Metrics `yaml:"metrics"`
	// Outbox sets the producer outbox relay (tenaz outbox relay).
	Outbox Outbox `yaml:"outbox"`
	// SealingKey seals the secrets (target header values) of the accounts
	// kept in the accounts bucket, with AES-256-GCM: the standard base64
	// of 32 random bytes ("openssl rand -base64 32"), best given as
	// ${ENV}. Every process that reads the bucket needs the same key.
	// Defaults to "" (the bucket then takes no secrets).
	SealingKey Secret `yaml:"sealing_key"`
	// StopTimeout is how long a process may take to drain on SIGTERM:
	// calls in flight finish and their outcomes are stored; what is still
	// running after it is cut, and a cut call is made again. Every
	// target's timeout must fit in it with StopMargin to spare, and a
	// Kubernetes terminationGracePeriodSeconds must exceed it (plus any
	// preStop pause). Defaults to 20s.
	StopTimeout Duration `yaml:"stop_timeout"`

	// LeftOut names the accounts the accounts bucket holds but whose
	// definition is not in force (With, and one that cannot be read),
	// with why. Their events wait, as if paused, until it is fixed: an
	// account unknown to the config takes "*"'s targets, and their URLs
	// and credentials are not this account's.
	LeftOut map[string]string `yaml:"-"`

	dir          string          // directory of the file given to Load; base of relative schema paths
	explicitZero map[string]bool // key paths explicitly set to 0 where 0 is not "unset" (jitter, failure_rate, metrics.accounts.top)
	schemas      *schemaCache    // compiled JSON Schemas, see SchemaFor
}

// NATS is the connection (or embedded server) configuration.
type NATS struct {
	// URL of the NATS servers, comma separated. Empty means: run an
	// embedded server (tenaz run only). Defaults to "". Env: TENAZ_NATS_URL,
	// and NATS_URL is honoured when TENAZ_NATS_URL is unset.
	URL string `yaml:"url"`
	// Creds is a path to a NATS credentials file. Defaults to "".
	Creds string `yaml:"creds"`
	// User for user/password auth. Defaults to "".
	User string `yaml:"user"`
	// Password for user/password auth. Defaults to "".
	Password Secret `yaml:"password"`
	// Token for token auth. Defaults to "".
	Token Secret `yaml:"token"`
	// NKeySeedFile is a path to an nkey seed file. Defaults to "".
	NKeySeedFile string `yaml:"nkey_seed_file"`
	// TLS configures TLS for the client connection.
	TLS TLS `yaml:"tls"`
	// Embedded configures the embedded server used when URL is empty.
	Embedded Embedded `yaml:"embedded"`
}

// TLS is client TLS: CA to verify the server, optional client cert.
type TLS struct {
	CA   string `yaml:"ca"`   // path to a CA bundle. Defaults to "" (system roots).
	Cert string `yaml:"cert"` // path to a client certificate. Defaults to "".
	Key  string `yaml:"key"`  // path to the client key. Defaults to "".
}

// Embedded configures the in-process nats-server of `tenaz run`.
type Embedded struct {
	// StoreDir holds JetStream's files. Defaults to "./.tenaz".
	StoreDir string `yaml:"store_dir"`
	// Sync is when JetStream fsyncs: "always" (every write is on disk
	// before it is acknowledged; durable across power loss) or an interval
	// such as "1s" or "2m" (faster; up to that much acknowledged data can
	// be lost on power failure, not on a process crash). Defaults to "always".
	Sync string `yaml:"sync"`
	// Listen is the client address of the embedded server. Defaults to
	// "127.0.0.1:4222".
	Listen string `yaml:"listen"`
}

// HTTP is the HTTP listener.
type HTTP struct {
	// Addr to listen on. Defaults to ":8080".
	Addr string `yaml:"addr"`
	// MaxBodyBytes bounds a submitted event (body of POST /v1/events and an
	// intake message). With its history and the rest of its record, it
	// must fit the NATS server's max_payload, checked at start-up
	// (pkg/size); past MaxPayloadCeiling it never can. Defaults to 786432
	// (768 KiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers; a slower one is cut off. Defaults to 5s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds how long a client may take to send a whole
	// request, headers and body. Defaults to 30s.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer. Defaults to 60s.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout bounds how long a kept-alive connection may wait for its
	// next request. Defaults to 120s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// PublicURL is where clients reach the API: scheme, host and any path
	// a proxy puts before /v1 ("https://tenaz.example.com"). Each
	// answer's status_url starts with it. Empty: an HTTP answer's starts
	// with the scheme and Host the request came with, and one over NATS
	// (which has neither) is the path alone.
	PublicURL string `yaml:"public_url"`
}

// Log selects logging.
type Log struct {
	// Format is "json" or "console". Defaults to "json"; LOG_FORMAT overrides.
	Format string `yaml:"format"`
	// Level is a zerolog level name. Defaults to "info"; LOG_LEVEL overrides.
	Level string `yaml:"level"`
}

// Streams sets replication for every stream and bucket.
type Streams struct {
	// Replicas for each stream and bucket (1, 3 or 5). Defaults to 1.
	Replicas int `yaml:"replicas"`
	// Cluster places the streams in this cluster. Defaults to "" (none).
	Cluster string `yaml:"cluster"`
	// Tags places the streams on servers with these tags. Defaults to none.
	Tags []string `yaml:"tags"`
	// Retention is how long done and cancelled events are kept. Defaults to 168h (7 days).
	Retention Duration `yaml:"retention"`
	// AckWait is how long a message may go unacknowledged before it is
	// delivered again: a dispatch message by its account's owner (its
	// worker died or gave no sign), a submission or a timer by the server.
	// It is also the first step of that redelivery backoff (AckWait ×1,
	// ×2, ×4, ×10). Live calls send progress, so it need not exceed target
	// timeouts. Defaults to 30s.
	AckWait Duration `yaml:"ack_wait"`
	// Partitions is how many partitions hold the events' dispatch and
	// state, each its own EVENTS stream and state bucket (an account is in
	// one). 0: the store's own count, or 4 for a new store. A count that
	// is not the store's is refused at start-up.
	Partitions int `yaml:"partitions"`
	// TrimAfter is how long an account's settled messages may stay in
	// EVENTS before its dispatcher purges them, when fewer than a batch
	// (64) have gathered: a purge is a write, so a busy account is
	// trimmed once per batch, and the backlog metric (which counts the
	// account's messages in EVENTS) is right within this long. Defaults
	// to 1s.
	TrimAfter Duration `yaml:"trim_after"`
}

// Account holds one account's limits. Zero fields inherit from "*".
type Account struct {
	// Concurrency is how many calls to the account's targets one
	// dispatcher replica makes at once; the account's owner also holds at
	// most twice this of its messages unsettled. "auto" learns
	// it from the targets' answers (latency, 429 and 503, Retry-After),
	// between ConcurrencyMin and ConcurrencyMax. Defaults to 8.
	Concurrency Concurrency `yaml:"concurrency"`
	// ConcurrencyMin is the fewest calls at once "auto" goes down to.
	// Defaults to 1.
	ConcurrencyMin int `yaml:"concurrency_min"`
	// ConcurrencyMax is the most calls at once "auto" goes up to. Defaults
	// to 64.
	ConcurrencyMax int `yaml:"concurrency_max"`
	// Rate limits calls to the account's targets, e.g. "50/s", "600/m".
	// Defaults to "" (unlimited).
	Rate Rate `yaml:"rate"`
	// Breaker configures the circuit breaker per account + target.
	Breaker Breaker `yaml:"breaker"`
	// Targets overrides target settings for this account (credentials).
	Targets map[string]TargetOverride `yaml:"targets"`
	// DeadLetters is how many entries the account may keep in DEAD: an
	// account at its bound waits for room alone, while the others'
	// entries are still kept. Defaults to deadletter.max_per_account.
	DeadLetters int64 `yaml:"dead_letters"`
	// Repeats are the account's repeating events, by name (see Repeat).
	// Not inherited: the "*" entry may have none. Defaults to none.
	Repeats map[string]Repeat `yaml:"repeats"`
}

// Rate is "<n>/<unit>" with unit s, m or h. Zero means unlimited.
type Rate struct {
	PerSecond float64 // events per second; 0 = unlimited
	Text      string  // as written
}

// Breaker configures a circuit breaker.
type Breaker struct {
	// Failures in a row that open the breaker. Defaults to 5.
	Failures int `yaml:"failures"`
	// Cooldown is how long it stays open before one probe. Defaults to 2m.
	Cooldown Duration `yaml:"cooldown"`
}

// TargetOverride is what an account may override of a target.
type TargetOverride struct {
	// Headers added to (or replacing) the target's headers.
	Headers map[string]Secret `yaml:"headers"`
	// URL replaces the target's URL template. Defaults to "".
	URL string `yaml:"url"`
	// CallbackSecret verifies the webhooks sent for this account's events
	// in place of the target's: a provider tenancy of the account's own
	// signs with a key of its own. Its webhooks come to
	// /v1/callbacks/<target>/<account>, and no webhook verified with
	// another key completes the account's events. Not on "*".
	CallbackSecret Secret `yaml:"callback_secret"`
}

// Target is an external API.
type Target struct {
	// URL is a Go text/template over the event: {{.Kind}}, {{.Account}},
	// {{.ID}}, {{.EntityID}}, {{.Reference}}, {{.Replay}}. Required.
	URL string `yaml:"url"`
	// Method is the HTTP method. Defaults to "POST".
	Method string `yaml:"method"`
	// Timeout of one call (and of one poll of Poll.URL). At most
	// stop_timeout minus StopMargin, so that a stop never cuts a call.
	// Defaults to 10s.
	Timeout Duration `yaml:"timeout"`
	// Headers sent with every call; values may be ${ENV} secrets.
	Headers map[string]Secret `yaml:"headers"`
	// SigningSecret signs outbound calls with Standard Webhooks headers:
	// "whsec_" and the standard base64 of a key of at least
	// MinSecretBytes bytes. Defaults to "" (unsigned).
	SigningSecret Secret `yaml:"signing_secret"`
	// CallbackSecret verifies this target's webhooks; written as
	// SigningSecret is. Defaults to "".
	CallbackSecret Secret `yaml:"callback_secret"`
	// Callback says how to read this target's webhooks.
	Callback Callback `yaml:"callback"`
	// Classify maps an HTTP status ("409") to success, transient or
	// permanent, overriding the defaults (2xx success; 408, 429, 5xx except
	// 501 transient; other 4xx permanent).
	Classify map[string]string `yaml:"classify"`
	// ReferenceField is the JSON field of a 2xx response holding the
	// provider's job id (callback and poll modes). Defaults to "id".
	ReferenceField string `yaml:"reference_field"`
	// Poll configures polling (completion: poll).
	Poll *Poll `yaml:"poll"`
	// IdempotencyKey is what a call's Idempotency-Key header carries:
	// "event" (the event id, derived from account and key, so two accounts
	// never share one) or "caller" (the key the submitter chose, which
	// another account may have chosen too). Defaults to "event".
	IdempotencyKey string `yaml:"idempotency_key"`
	// Redirects says which redirects a call follows: "none" (a 3xx answer
	// is the call's outcome) or "same_host" (https redirects to the host
	// and port of the call). Defaults to "none".
	Redirects string `yaml:"redirects"`
	// Rate limits the calls to this target of every account and every
	// dispatcher replica together, e.g. "20/s": one every 1/rate (a
	// provider's limit on the one key all accounts share). A call needs
	// its account's rate and this one. Defaults to "" (unlimited).
	Rate Rate `yaml:"rate"`
	// Concurrency is how many calls to this target may be in flight at
	// once over every account and every dispatcher replica, polls of it
	// over every poller replica included. A call needs a slot of its
	// account and one of the target. "auto" learns it from the
	// target's answers (latency, 429 and 503, Retry-After), over every
	// replica, between ConcurrencyMin and ConcurrencyMax. Defaults to 0
	// (unlimited).
	Concurrency Concurrency `yaml:"concurrency"`
	// ConcurrencyMin is the fewest calls at once "auto" goes down to.
	// Defaults to 1.
	ConcurrencyMin int `yaml:"concurrency_min"`
	// ConcurrencyMax is the most calls at once "auto" goes up to. Defaults
	// to 64.
	ConcurrencyMax int `yaml:"concurrency_max"`
}

// Limited reports whether the target has a provider-wide rate or
// concurrency: its calls then count in the shared tenaz_quotas bucket.
func (t Target) Limited() bool {
	return !t.Rate.Unlimited() || t.Concurrency > 0 || t.Concurrency.Auto()
}

// Callback says how the webhook receiver reads a target's callbacks.
type Callback struct {
	// EventField is the JSON field of a callback holding the tenaz event
	// id (sent to the target as Tenaz-Event-Id). Defaults to "event_id".
	EventField string `yaml:"event_field"`
	// ReferenceField is the JSON field of a callback holding the
	// provider's reference, used when the event id is absent. Defaults
	// to "reference".
	ReferenceField string `yaml:"reference_field"`
	// ReplayField, when set, is the JSON field of a callback echoing the
	// replay count the call carried (Tenaz-Replay, {{.Replay}}). A
	// webhook whose count is not the event's answers a call made before
	// an operator's replay, and completes nothing. Defaults to unset.
	ReplayField string `yaml:"replay_field"`
	// DoneWhen, when set, says which callbacks carry the result; others
	// (e.g. "processing") are recorded in the history and change nothing.
	// Defaults to unset: every verified callback carries the result.
	DoneWhen DoneWhen `yaml:"done_when"`
	// Tolerance is how far a webhook-timestamp may be from now: the
	// window in which a captured webhook can be replayed. At most
	// MaxTolerance. Defaults to 5m (what Standard Webhooks recommends).
	Tolerance Duration `yaml:"tolerance"`
}

// Poller sets how the poller service polls and reconciles.
type Poller struct {
	// Concurrency is how many polls and deadlines one poller replica
	// handles at once. Defaults to 32.
	Concurrency int `yaml:"concurrency"`
	// ReconcileEvery is how often the reconciler sweeps the state bucket.
	// Defaults to 1m.
	ReconcileEvery Duration `yaml:"reconcile_every"`
	// Grace is how long past its due time an event's next step may be
	// late before the reconciler acts. Defaults to 2m.
	Grace Duration `yaml:"grace"`
	// RunningGrace is how long an event may stay running before the
	// reconciler takes the run for lost, once its message is gone from
	// EVENTS. Defaults to 1h (longer than the whole redelivery backoff
	// and any call timeout).
	RunningGrace Duration `yaml:"running_grace"`
}

// Outbox sets how `tenaz outbox relay` reads a PostgreSQL outbox table
// and submits its rows (docs/producers.md).
type Outbox struct {
	// DSN is the PostgreSQL connection string, a URL
	// ("postgres://user@host/db") or key=value pairs; a ${ENV} reference
	// keeps the password out of the file. Required by the relay. Defaults
	// to "".
	DSN Secret `yaml:"dsn"`
	// Table is the outbox table, optionally schema-qualified
	// ("app.tenaz_outbox"); also the LISTEN channel. Defaults to
	// "tenaz_outbox".
	Table string `yaml:"table"`
	// Batch is how many rows one relay claims in one transaction.
	// Defaults to 100.
	Batch int `yaml:"batch"`
	// PollInterval is how often the relay looks for rows without a
	// notification (NOTIFY is a hint; a poll finds what it missed).
	// Defaults to 1s.
	PollInterval Duration `yaml:"poll_interval"`
	// Account binds the relay to one account: a row of another account
	// fails, and the relay's replies come on _INBOX.tenaz-outbox-<account>,
	// so that a NATS user per producer can be granted that account's
	// submit endpoint and inbox only. Defaults to "" (any account).
	Account string `yaml:"account"`
}

// Poll configures how the poller asks a target for a result.
type Poll struct {
	// URL template of the status request. Required.
	URL string `yaml:"url"`
	// Interval between polls. Defaults to 30s.
	Interval Duration `yaml:"interval"`
	// DoneWhen says when a poll answer is final.
	DoneWhen DoneWhen `yaml:"done_when"`
}

// DoneWhen says when a poll answer is final: when Field's value is one of In.
type DoneWhen struct {
	// Field is the JSON field of the poll answer to look at, e.g.
	// "status". Required when poll is set.
	Field string `yaml:"field"`
	// In lists the values of Field that mean "final". Required when poll is set.
	In []string `yaml:"in"`
}

// Completion modes of a stage.
const (
	CompletionSync     = "sync"
	CompletionCallback = "callback"
	CompletionPoll     = "poll"
)

// Stage is one delivery stage (primary or fallback) of a kind.
type Stage struct {
	// Target names an entry of targets. Required unless Handler is set.
	Target string `yaml:"target"`
	// Handler names a Go handler registered with an embedded dispatcher
	// (dispatcher.Options.Handlers) that delivers this stage instead of an
	// HTTP call. Exactly one of Target and Handler is set. Defaults to "".
	Handler string `yaml:"handler"`
	// Completion is sync, callback or poll. Defaults to "sync".
	Completion string `yaml:"completion"`
	// Attempts is the most calls to the target. Defaults to 6.
	Attempts int `yaml:"attempts"`
	// Backoff between attempts.
	Backoff Backoff `yaml:"backoff"`
	// CallbackSLA is how long a callback is awaited. Defaults to 30m.
	CallbackSLA Duration `yaml:"callback_sla"`
	// PollSLA is how long polling goes on. Defaults to 2h.
	PollSLA Duration `yaml:"poll_sla"`
	// Timeout bounds one call of a handler stage, as a target's timeout
	// bounds its calls (a target stage takes its target's). It must fit in
	// the drain on stop, and a replica taken for dead keeps its accounts
	// this long before another takes them (its handlers may still run).
	// Defaults to 10s for a handler stage.
	Timeout Duration `yaml:"timeout"`
}

// Backoff is exponential backoff with jitter.
type Backoff struct {
	// Initial delay. Defaults to 30s.
	Initial Duration `yaml:"initial"`
	// Max delay. Defaults to 1h.
	Max Duration `yaml:"max"`
	// Multiplier per attempt. Defaults to 2.
	Multiplier float64 `yaml:"multiplier"`
	// Jitter as a fraction (0.2 = ±20%). Defaults to 0.2.
	Jitter float64 `yaml:"jitter"`
	// MaxRetryAfter caps a target's Retry-After. Defaults to 1h.
	MaxRetryAfter Duration `yaml:"max_retry_after"`
}

// Kind routes one event kind.
type Kind struct {
	// Stage is the primary stage (target, completion, attempts, backoff…).
	Stage `yaml:",inline"`
	// Entity is the payload field holding the entity id when the caller
	// gives none. Defaults to "".
	Entity string `yaml:"entity"`
	// OrderedBy is the payload field whose value is the ordering key when
	// the caller gives none. Defaults to "".
	OrderedBy string `yaml:"ordered_by"`
	// OnCallbackTimeout is manual_review or fallback. Defaults to "manual_review".
	OnCallbackTimeout string `yaml:"on_callback_timeout"`
	// Fallback is the stage used when the primary's attempts are exhausted.
	Fallback *Stage `yaml:"fallback"`
	// Schema is a JSON Schema (inline JSON/YAML object or a file path) the
	// payload must satisfy. Defaults to none.
	Schema string `yaml:"schema"`
}

// Demo configures the built-in demo provider of tenaz run.
type Demo struct {
	// Provider starts the demo provider on this address, e.g.
	// "127.0.0.1:9000". Defaults to "" (off).
	Provider string `yaml:"provider"`
	// FailureRate is the fraction of calls answered with 503. Defaults to 0.1.
	FailureRate float64 `yaml:"failure_rate"`
	// BureauA starts a demo credit bureau (tenaz run only) on this address
	// that accepts evaluations and answers later by a signed webhook to
	// /v1/callbacks/bureau_a: sometimes twice, sometimes late, sometimes
	// never. Defaults to "" (off).
	BureauA string `yaml:"bureau_a"`
	// BureauB starts a demo fallback bureau (tenaz run only) on this
	// address whose evaluations must be polled. Defaults to "" (off).
	BureauB string `yaml:"bureau_b"`
}

// Duration is a time.Duration written as "30s", "2m", "1h".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Secret is a string that never prints: String, GoString, MarshalJSON,
// MarshalText and MarshalYAML redact it. Reveal returns the value.
type Secret string

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

// String redacts.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// MarshalJSON redacts.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// MarshalText redacts (zerolog and fmt use it).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
