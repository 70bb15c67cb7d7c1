package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Deadletter sets the deadletter service: the operator screen's counts,
// replay jobs and the nightly digest.
type Deadletter struct {
	// CountsEvery is how often, at most, the screen's retrying and
	// scheduled counts rescan the state bucket (the counts are cached in
	// between; the dead and review counts are always live). Defaults to 30s.
	CountsEvery Duration `yaml:"counts_every"`
	// ReplayRate is how many events per second a replay-matching job
	// replays unless the request says otherwise. At most MaxReplayRate.
	// Defaults to 100.
	ReplayRate float64 `yaml:"replay_rate"`
	// Digest is the nightly digest of what died. Off unless At or
	// Schedule is set.
	Digest Digest `yaml:"digest"`
	// Retention is how long the DEAD stream keeps an entry nobody acted
	// on (a replay or discard deletes it at once). An expired entry of an
	// event leaves the event dead and listed (its record keeps the
	// payload); an expired refused submission is gone. Defaults to 720h
	// (30 days).
	Retention Duration `yaml:"retention"`
	// MaxBytes bounds the DEAD stream. When it is full, new entries are
	// refused and their writers retry until an operator or Retention
	// frees room; nothing already kept is dropped. 0 or at least
	// 4 × http.max_body_bytes. Defaults to 0 (bounded by the server's
	// storage only).
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxPerAccount bounds how many entries one account keeps in DEAD.
	// An account at its bound waits for room as for a full DEAD (its
	// refused submissions in INTAKE, its dying events where they are),
	// while every other account's entries are still kept: one account's
	// failures cannot fill DEAD for the others. Defaults to 0 (no bound
	// of its own).
	MaxPerAccount int64 `yaml:"max_per_account"`
	// MaxRefusalsPerAccount is how many entries one account may keep, in
	// DEAD and waiting in TENAZ_DEAD_WAITING for room together, before
	// its refused NATS submissions are no longer kept (counted in
	// tenaz_dead_not_kept_total): nothing accepted stands for them, and
	// one account's flood of bad submissions must not fill the server's
	// storage for every account, even with DEAD and the account unbounded
	// (the defaults). An event that dies, and a submission whose HTTP
	// caller may hold a 202, are always kept. Defaults to 10,000.
	MaxRefusalsPerAccount int64 `yaml:"max_refusals_per_account"`
}

// Digest configures the digest: a server-side JetStream message schedule
// fires it (never a process timer), it is published on
// <prefix>.advisory.digest and optionally POSTed to a webhook.
type Digest struct {
	// At is the daily time of the digest, "HH:MM" (24 h) in Timezone.
	// Defaults to "" (no digest unless Schedule is set).
	At string `yaml:"at"`
	// Schedule is a six-field cron expression (seconds first, as the
	// NATS server's message schedules take it: "0 30 6 * * 1-5") used
	// instead of At. Defaults to "".
	Schedule string `yaml:"schedule"`
	// Timezone is the IANA zone At and Schedule are read in. Defaults
	// to "UTC".
	Timezone string `yaml:"timezone"`
	// Webhook is a Slack-compatible incoming webhook URL that receives
	// {"text": "..."} with each digest. Defaults to "" (advisory only).
	Webhook Secret `yaml:"webhook"`
}

// MaxReplayRate is the fastest a replay job runs, in events per second,
// whether the config or the request sets its rate.
const MaxReplayRate = 10_000.0

const (
	defaultCountsEvery   = Duration(30 * time.Second)
	defaultReplayRate    = 100.0
	defaultTimezone      = "UTC"
	defaultDeadRetention = Duration(30 * 24 * time.Hour)
	// DefaultMaxRefusalsPerAccount is deadletter.max_refusals_per_account's
	// default.
	DefaultMaxRefusalsPerAccount = 10_000
)

func (d *Deadletter) withDefaults() {
	setDur(&d.CountsEvery, defaultCountsEvery)
	setDur(&d.Retention, defaultDeadRetention)
	if d.ReplayRate == 0 {
		d.ReplayRate = defaultReplayRate
	}
	if d.MaxRefusalsPerAccount == 0 {
		d.MaxRefusalsPerAccount = DefaultMaxRefusalsPerAccount
	}
	setStr(&d.Digest.Timezone, defaultTimezone)
}

// Enabled reports whether a digest is configured.
func (d Digest) Enabled() bool { return d.At != "" || d.Schedule != "" }

// Cron is the six-field cron expression of the digest ("" when off).
func (d Digest) Cron() string {
	if d.Schedule != "" {
		return d.Schedule
	}
	if d.At == "" {
		return ""
	}
	t, err := time.Parse("15:04", d.At)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("0 %d %d * * *", t.Minute(), t.Hour())
}

func (v *validator) deadletter() {
	d := v.c.Deadletter
	v.positive("deadletter.counts_every", d.CountsEvery)
	v.positive("deadletter.retention", d.Retention)
	if min := 4 * v.c.HTTP.MaxBodyBytes; d.MaxBytes < 0 || d.MaxBytes > 0 && d.MaxBytes < min {
		v.add("deadletter.max_bytes", "must be 0 (no bound) or at least 4 × http.max_body_bytes (%d), room for a few of the largest entries; got %d", min, d.MaxBytes)
	}
	if d.MaxPerAccount < 0 {
		v.add("deadletter.max_per_account", "must be 0 (no bound) or a number of entries, got %d", d.MaxPerAccount)
	}
	if d.MaxRefusalsPerAccount < 0 {
		v.add("deadletter.max_refusals_per_account", "must be a number of entries, got %d", d.MaxRefusalsPerAccount)
	}
	if r := d.ReplayRate; !(r > 0 && r <= MaxReplayRate) {
		v.add("deadletter.replay_rate", "must be a number of events per second in (0, %g], got %g", MaxReplayRate, r)
	}
	g := d.Digest
	if g.At != "" {
		if _, err := time.Parse("15:04", g.At); err != nil || len(g.At) != 5 {
			v.add("deadletter.digest.at", `must be a time of day "HH:MM" (24 h), got %q`, g.At)
		}
	}
	if g.Schedule != "" {
		if g.At != "" {
			v.add("deadletter.digest.schedule", "set either at or schedule, not both")
		}
		if err := digestSchedule(g.Schedule); err != nil {
			v.add("deadletter.digest.schedule", "%v", err)
		}
	}
	if strings.HasPrefix(g.Schedule, "@every") && g.Timezone != defaultTimezone {
		v.add("deadletter.digest.schedule", "an @every schedule takes no time zone; leave timezone at UTC")
	}
	if _, err := time.LoadLocation(g.Timezone); err != nil || g.Timezone == "" || g.Timezone == "Local" {
		v.add("deadletter.digest.timezone", "must be an IANA time zone such as UTC or Europe/Madrid, got %q", g.Timezone)
	}
	if w := g.Webhook.Reveal(); w != "" {
		if u, err := url.Parse(w); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add("deadletter.digest.webhook", "must be an http(s) URL") // the URL is a secret: never echoed
		}
	}
}

// digestSchedule checks a digest schedule as the server will read it:
// refused here, naming its key, not by the server when the deadletter
// starts. A cron expression is checked as a repeat's is.
func digestSchedule(expr string) error {
	if strings.TrimSpace(expr) != expr {
		return fmt.Errorf("has spaces around it: %q", expr)
	}
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		if every, err := time.ParseDuration(d); err != nil || every < MinRepeatEvery.D() {
			return fmt.Errorf("an @every schedule takes an interval of %s or more (e.g. \"@every 12h\"), got %q", MinRepeatEvery.D(), expr)
		}
		return nil
	}
	s, err := Repeat{Cron: expr}.schedule()
	if err != nil {
		return err
	}
	if s.Next(time.Now()).IsZero() {
		return fmt.Errorf("%q matches no time within five years", expr)
	}
	return nil
}
