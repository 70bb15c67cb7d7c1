package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
)

// Repeat is a repeating event of one account: the NATS server's message
// schedule fires it on a cron schedule or at an interval, and each
// occurrence is submitted as an ordinary event of Kind with Payload,
// its idempotency key derived from the repeat's name and the occurrence's
// time (so an occurrence fired twice makes one event).
type Repeat struct {
	// Kind of each event: a configured kind. Required.
	Kind string `yaml:"kind"`
	// Cron is a six-field cron expression, seconds first, as the NATS
	// server's message schedules read it ("0 30 6 * * 1-5": 06:30 on
	// weekdays), or @yearly, @monthly, @weekly, @daily or @hourly. Set
	// Cron or Every. Defaults to "".
	Cron string `yaml:"cron"`
	// Every is the interval of a repeat that fires every so often, at
	// least 1s. Set Cron or Every. Defaults to 0.
	Every Duration `yaml:"every"`
	// Timezone is the IANA zone Cron is read in (the server applies
	// daylight saving). Every takes none. Defaults to "" (UTC).
	Timezone string `yaml:"timezone"`
	// Payload of each event, JSON text (in the file a mapping or list is
	// written as JSON). It must fit http.max_body_bytes and the kind's
	// schema. Defaults to "{}".
	Payload string `yaml:"payload"`
	// EntityID of each event. Defaults to "" (the kind's entity field of
	// the payload, if it has one).
	EntityID string `yaml:"entity_id"`
}

var repeatType = reflect.TypeFor[Repeat]()

// MinRepeatEvery is the shortest interval: the server fires schedules with
// second precision and refuses shorter ones.
const MinRepeatEvery = Duration(time.Second)

// cronParser reads cron expressions as the NATS server does: its parser is
// robfig/cron's, six fields, seconds first, with the same descriptors.
var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Pattern is the repeat's schedule as the server's Nats-Schedule header
// takes it: the cron expression, or "@every <interval>".
func (r Repeat) Pattern() string {
	if r.Cron != "" {
		return r.Cron
	}
	return "@every " + time.Duration(r.Every).String()
}

// WithDefaults returns r with an empty payload written as "{}".
func (r Repeat) WithDefaults() Repeat {
	if strings.TrimSpace(r.Payload) == "" {
		r.Payload = "{}"
	}
	return r
}

// schedule parses the repeat's cron expression in its time zone.
func (r Repeat) schedule() (*cron.SpecSchedule, error) {
	expr := strings.TrimSpace(r.Cron)
	switch {
	case strings.HasPrefix(expr, "@every"):
		return nil, fmt.Errorf("write an interval as every: %q, not in cron", strings.TrimSpace(strings.TrimPrefix(expr, "@every")))
	case strings.Contains(expr, "TZ="):
		return nil, fmt.Errorf("write the time zone in timezone, not in cron")
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("must be a cron expression of 6 fields, seconds first (e.g. \"0 30 6 * * 1-5\"), or @daily, @hourly, …: %v", err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("must be a cron expression, got %q", expr)
	}
	spec.Location = time.UTC
	if r.Timezone != "" {
		if spec.Location, err = loadZone(r.Timezone); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

func loadZone(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fmt.Errorf("must be an IANA time zone such as UTC or Europe/Madrid, got %q", name)
	}
	return loc, nil
}

// Next is the first time after t at which a cron repeat fires, in its
// time zone; zero for an interval repeat (its phase is the server's: it
// counts from when the schedule was stored) or an invalid one.
func (r Repeat) Next(t time.Time) time.Time {
	if r.Cron == "" {
		return time.Time{}
	}
	s, err := r.schedule()
	if err != nil {
		return time.Time{}
	}
	next := s.Next(t)
	if next.IsZero() {
		return next
	}
	return next.In(s.Location)
}

// Occurrence is the time of the firing the server announced with next
// (the Nats-Schedule-Next header of a fired message: when the schedule
// fires after it): next minus the interval, or the cron expression's last
// match before next. A cron expression the server fired always has one;
// if r cannot be parsed, next itself names the occurrence.
func (r Repeat) Occurrence(next time.Time) time.Time {
	next = next.Truncate(time.Second)
	if r.Cron == "" {
		return next.Add(-time.Duration(r.Every)).Truncate(time.Second)
	}
	s, err := r.schedule()
	if err != nil {
		return next
	}
	// s.Next(t) == next exactly for t in [previous match, next), and is
	// earlier for any t before: widen a window back from next until its
	// start is before the previous match, then halve it down to the second.
	after := func(t time.Time) bool { return !s.Next(t).Before(next) }
	hi, step := next.Add(-time.Second), 2*time.Second
	lo := next.Add(-step)
	for after(lo) {
		if step > 6*366*24*time.Hour { // beyond the parser's five years: no match
			return next
		}
		hi, step = lo, 2*step
		lo = next.Add(-step)
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add((hi.Sub(lo) / 2).Truncate(time.Second))
		if after(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// ValidateRepeat checks the repeat name of account as Validate does a
// declared one (for repeats made over the API); nil when it is valid.
func (c *Config) ValidateRepeat(account, name string, r Repeat) error {
	v := &validator{c: c}
	v.repeat(join(join("accounts", account), "repeats."+name), account, name, r.WithDefaults())
	return joinSorted(v.errs)
}

// repeats checks the repeats declared under the account at key.
func (v *validator) repeats(key, account string, a Account) {
	if len(a.Repeats) > 0 && account == DefaultAccountName {
		v.add(join(key, "repeats"), "a repeat belongs to one account; declare it under that account, not under %q", DefaultAccountName)
		return
	}
	for _, name := range sorted(a.Repeats) {
		v.repeat(join(key, "repeats."+name), account, name, a.Repeats[name])
	}
}

func (v *validator) repeat(key, account, name string, r Repeat) {
	if err := names.ValidateAccount(account); err != nil {
		v.addErr(key, err)
	}
	if !token(name) {
		v.add(key, "a repeat's name must be 1-%d characters of [A-Za-z0-9_-], got %q", names.MaxAccountLen, name)
	}
	k, kindOK := v.c.Kinds[r.Kind]
	switch {
	case r.Kind == "":
		v.add(join(key, "kind"), "is required")
	case !kindOK:
		msg := fmt.Sprintf("unknown kind %q", r.Kind)
		if s := suggest(r.Kind, sorted(v.c.Kinds)); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		v.add(join(key, "kind"), "%s", msg)
	}
	switch {
	case r.Cron == "" && r.Every == 0:
		v.add(key, "set cron (a cron expression) or every (an interval)")
	case r.Cron != "" && r.Every != 0:
		v.add(key, "set either cron or every, not both")
	case r.Cron != "":
		if s, err := r.schedule(); err != nil {
			v.addErr(join(key, "cron"), err)
		} else if s.Next(time.Now()).IsZero() {
			v.add(join(key, "cron"), "%q matches no time within five years", r.Cron)
		}
	case r.Every < MinRepeatEvery:
		v.add(join(key, "every"), "must be at least %s (the server fires schedules to the second), got %s", MinRepeatEvery, r.Every)
	}
	if r.Timezone != "" {
		if r.Every != 0 {
			v.add(join(key, "timezone"), "an interval takes no time zone; remove timezone (or use cron)")
		} else if _, err := loadZone(r.Timezone); err != nil {
			v.addErr(join(key, "timezone"), err)
		}
	}
	if r.EntityID != "" {
		if err := names.ValidateKey("entity_id", r.EntityID); err != nil {
			v.addErr(join(key, "entity_id"), err)
		}
	}
	v.repeatPayload(join(key, "payload"), r, k, kindOK)
}

func (v *validator) repeatPayload(key string, r Repeat, k Kind, kindOK bool) {
	p := []byte(r.WithDefaults().Payload)
	if max := v.c.HTTP.MaxBodyBytes; max > 0 && int64(len(p)) > max {
		v.add(key, "is %d bytes; http.max_body_bytes is %d", len(p), max)
		return
	}
	if err := event.CheckPayload(p); err != nil {
		if json.Valid(p) { // JSON, but no payload every way in takes (a member given twice, ...)
			v.add(key, "is refused as a submission's would be: %v", err)
			return
		}
		v.add(key, "must be JSON (a mapping or list in the file is written as JSON): %v", err)
		return
	}
	if !kindOK {
		return
	}
	// The entity and ordering key the kind reads from the payload are
	// checked as a submission's: else every firing is refused into DEAD.
	if _, err := event.New(event.Fields{Account: "repeat", Kind: r.Kind, EntityID: r.EntityID}, p, k.Entity, k.OrderedBy, time.Now()); err != nil {
		v.add(key, "is refused as a submission's would be: %v", err)
		return
	}
	if strings.TrimSpace(k.Schema) == "" {
		return
	}
	sch, err := v.c.SchemaFor(r.Kind)
	if err != nil || sch == nil {
		return // reported at the kind's schema key
	}
	if err := MatchSchema(sch, p); err != nil {
		v.add(key, "does not match the schema of %q: %s", r.Kind, SchemaViolation(err))
	}
}
