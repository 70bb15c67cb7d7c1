package config

import (
	"time"

	"github.com/tenaz/tenaz/pkg/names"
)

// Built-in defaults, as stated in the field comments.
const (
	defaultStoreDir        = "./.tenaz"
	defaultSync            = "always"
	defaultEmbeddedListen  = "127.0.0.1:4222"
	defaultHTTPAddr        = ":8080"
	defaultMaxBodyBytes    = 768 << 10 // fits a stock nats-server's 1 MiB max_payload (pkg/size)
	defaultLogFormat       = "json"
	defaultLogLevel        = "info"
	defaultReplicas        = 1
	defaultRetention       = Duration(168 * time.Hour)
	defaultConcurrency     = 8
	defaultConcurrencyMin  = 1
	defaultConcurrencyMax  = 64
	defaultBreakerFailures = 5
	defaultBreakerCooldown = Duration(2 * time.Minute)
	defaultMethod          = "POST"
	defaultTimeout         = Duration(10 * time.Second)
	defaultReferenceField  = "id"
	defaultPollInterval    = Duration(30 * time.Second)
	defaultCompletion      = CompletionSync
	defaultAttempts        = 6
	defaultInitial         = Duration(30 * time.Second)
	defaultMax             = Duration(time.Hour)
	defaultMultiplier      = 2.0
	defaultJitter          = 0.2
	defaultMaxRetryAfter   = Duration(time.Hour)
	defaultCallbackSLA     = Duration(30 * time.Minute)
	defaultPollSLA         = Duration(2 * time.Hour)
	defaultOnTimeout       = OnCallbackTimeoutManualReview
	defaultFailureRate     = 0.1
	defaultCallbackEvent   = "event_id"
	defaultCallbackRef     = "reference"
	defaultTolerance       = Duration(5 * time.Minute)
	defaultPollerConc      = 32
	defaultReconcileEvery  = Duration(time.Minute)
	defaultGrace           = Duration(2 * time.Minute)
	defaultRunningGrace    = Duration(time.Hour)
)

// DefaultOutboxTable is the default of outbox.table.
const DefaultOutboxTable = "tenaz_outbox"

// MaxOutboxBatch bounds outbox.batch: a batch is one transaction holding
// its rows' locks while they are submitted.
const MaxOutboxBatch = 10000

const defaultOutboxBatch = 100

// DefaultStopTimeout is the default of stop_timeout.
const DefaultStopTimeout = Duration(20 * time.Second)

// Values of Kind.OnCallbackTimeout.
const (
	OnCallbackTimeoutManualReview = "manual_review"
	OnCallbackTimeoutFallback     = "fallback"
)

// Values of Target.IdempotencyKey.
const (
	IdempotencyKeyEvent  = "event"
	IdempotencyKeyCaller = "caller"
)

// Values of Target.Redirects.
const (
	RedirectsNone     = "none"
	RedirectsSameHost = "same_host"
)

// DefaultAccountName is the key of the account every other account
// inherits from.
const DefaultAccountName = "*"

// builtinAccount is what the "*" account inherits.
func builtinAccount() Account {
	return Account{
		Concurrency:    defaultConcurrency,
		ConcurrencyMin: defaultConcurrencyMin,
		ConcurrencyMax: defaultConcurrencyMax,
		Breaker:        Breaker{Failures: defaultBreakerFailures, Cooldown: defaultBreakerCooldown},
	}
}

// WithDefaults fills every unset (zero) value with its default, as stated
// in each field's comment, and returns c. It fills the "*" account (adding
// it if missing), every target, and every kind's primary and fallback
// stage. Other accounts keep their zero fields, which inherit from "*"
// (see Account). A jitter or failure_rate written as 0 stays 0.
// It is idempotent.
func (c *Config) WithDefaults() *Config {
	if c == nil {
		return nil
	}
	setStr(&c.Prefix, names.DefaultPrefix)
	setStr(&c.NATS.Embedded.StoreDir, defaultStoreDir)
	setStr(&c.NATS.Embedded.Sync, defaultSync)
	setStr(&c.NATS.Embedded.Listen, defaultEmbeddedListen)
	setStr(&c.HTTP.Addr, defaultHTTPAddr)
	if c.HTTP.MaxBodyBytes == 0 {
		c.HTTP.MaxBodyBytes = defaultMaxBodyBytes
	}
	setDur(&c.HTTP.ReadHeaderTimeout, Duration(5*time.Second))
	setDur(&c.HTTP.ReadTimeout, Duration(30*time.Second))
	setDur(&c.HTTP.WriteTimeout, Duration(60*time.Second))
	setDur(&c.HTTP.IdleTimeout, Duration(120*time.Second))
	setStr(&c.Log.Format, defaultLogFormat)
	setStr(&c.Log.Level, defaultLogLevel)
	if c.Streams.Replicas == 0 {
		c.Streams.Replicas = defaultReplicas
	}
	setDur(&c.Streams.Retention, defaultRetention)
	setDur(&c.Streams.AckWait, Duration(30*time.Second))
	setDur(&c.Streams.TrimAfter, Duration(time.Second))

	if c.Accounts == nil {
		c.Accounts = map[string]Account{}
	}
	c.Accounts[DefaultAccountName] = mergeAccount(c.Accounts[DefaultAccountName], builtinAccount())

	for name, t := range c.Targets {
		setStr(&t.Method, defaultMethod)
		setDur(&t.Timeout, defaultTimeout)
		setStr(&t.ReferenceField, defaultReferenceField)
		setStr(&t.IdempotencyKey, IdempotencyKeyEvent)
		setStr(&t.Redirects, RedirectsNone)
		setStr(&t.Callback.EventField, defaultCallbackEvent)
		setStr(&t.Callback.ReferenceField, defaultCallbackRef)
		setDur(&t.Callback.Tolerance, defaultTolerance)
		if t.Concurrency.Auto() {
			if t.ConcurrencyMin == 0 {
				t.ConcurrencyMin = defaultConcurrencyMin
			}
			if t.ConcurrencyMax == 0 {
				t.ConcurrencyMax = defaultConcurrencyMax
			}
		}
		if t.Poll != nil {
			p := *t.Poll
			setDur(&p.Interval, defaultPollInterval)
			t.Poll = &p
		}
		c.Targets[name] = t
	}

	for name, k := range c.Kinds {
		path := join("kinds", name)
		c.stageDefaults(&k.Stage, path)
		setStr(&k.OnCallbackTimeout, defaultOnTimeout)
		if k.Fallback != nil {
			fb := *k.Fallback
			c.stageDefaults(&fb, join(path, "fallback"))
			k.Fallback = &fb
		}
		c.Kinds[name] = k
	}

	if c.Poller.Concurrency == 0 {
		c.Poller.Concurrency = defaultPollerConc
	}
	setDur(&c.Poller.ReconcileEvery, defaultReconcileEvery)
	setDur(&c.Poller.Grace, defaultGrace)
	setDur(&c.Poller.RunningGrace, defaultRunningGrace)
	setStr(&c.Outbox.Table, DefaultOutboxTable)
	if c.Outbox.Batch == 0 {
		c.Outbox.Batch = defaultOutboxBatch
	}
	setDur(&c.Outbox.PollInterval, Duration(time.Second))
	setDur(&c.StopTimeout, DefaultStopTimeout)
	c.Deadletter.withDefaults()
	c.Audit.withDefaults()
	c.Metrics.withDefaults(c.explicitZero)
	if c.Demo.FailureRate == 0 && !c.explicitZero["demo.failure_rate"] {
		c.Demo.FailureRate = defaultFailureRate
	}
	return c
}

func (c *Config) stageDefaults(s *Stage, path string) {
	setStr(&s.Completion, defaultCompletion)
	if s.Handler != "" {
		setDur(&s.Timeout, defaultTimeout)
	}
	if s.Attempts == 0 {
		s.Attempts = defaultAttempts
	}
	b := &s.Backoff
	setDur(&b.Initial, defaultInitial)
	setDur(&b.Max, defaultMax)
	if b.Multiplier == 0 {
		b.Multiplier = defaultMultiplier
	}
	if b.Jitter == 0 && !c.explicitZero[join(path, "backoff.jitter")] {
		b.Jitter = defaultJitter
	}
	setDur(&b.MaxRetryAfter, defaultMaxRetryAfter)
	setDur(&s.CallbackSLA, defaultCallbackSLA)
	setDur(&s.PollSLA, defaultPollSLA)
}

func setStr(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

func setDur(p *Duration, def Duration) {
	if *p == 0 {
		*p = def
	}
}
