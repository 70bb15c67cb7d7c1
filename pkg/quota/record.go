package quota

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/outcome"
)

// Lateness is how early a call of a Smooth limit may come. A replica that
// waits for the next token acts a little after it is due (a timer, a
// compare-and-set); the bucket holds that much more than one token, so
// that the lateness is made up by the next call instead of lost from the
// rate.
const Lateness = 20 * time.Millisecond

// Limit is what one key allows over every replica.
type Limit struct {
	// Rate is how many tokens the bucket gains per second; every call or
	// submission takes one. 0: no rate limit.
	Rate float64
	// Burst is how many tokens the bucket holds; a new bucket is full.
	// Below 1: 1.
	Burst float64
	// Concurrency is how many calls may be in flight at once over all live
	// replicas. 0: no concurrency limit. Learn, when set, replaces it.
	Concurrency int
	// Learn makes the concurrency a learned one, kept in the record: every
	// replica's refused calls cut it, its calls that succeed while it holds
	// them back grow it (see Answer).
	Learn *Learn
}

// Learn bounds a learned concurrency: it starts at Start and stays
// within Min and Max.
type Learn struct {
	Min, Max, Start int
}

// equal reports whether l and o limit alike (Learn compared by value).
func (l Limit) equal(o Limit) bool {
	if (l.Learn == nil) != (o.Learn == nil) || l.Learn != nil && *l.Learn != *o.Learn {
		return false
	}
	return l.Rate == o.Rate && l.Burst == o.Burst && l.Concurrency == o.Concurrency
}

// concurrency is the calls l allows in flight, given the stored record.
func (l Limit) concurrency(r record) int {
	if l.Learn == nil {
		return l.Concurrency
	}
	c := r.Learned
	if c <= 0 {
		c = l.Learn.Start
	}
	return min(max(c, l.Learn.Min, 1), max(l.Learn.Max, l.Learn.Min, 1))
}

// Answer is what a call made in a slot says of the target's capacity; the
// zero value says nothing (the call was not made, or its answer was not
// about load).
type Answer struct {
	// Refused: the target refused the call for load (429, 503, an answer
	// with Retry-After, a timeout).
	Refused bool
	// RetryAfter is how long a refusal asked to wait.
	RetryAfter time.Duration
	// OK: the call succeeded.
	OK bool
	// NotMade: the call was not made after all (its caller gave its slot
	// back first): its token goes back too, for another call to take.
	NotMade bool
}

// AnswerOf is what the outcome of a call (or a poll) that was made says
// of its target's capacity.
func AnswerOf(err error) Answer {
	if refused, after := outcome.Overloaded(err); refused {
		return Answer{Refused: true, RetryAfter: after}
	}
	return Answer{OK: err == nil}
}

// A learned concurrency moves as the account-level "auto" does
// (services/dispatcher/autolimit.go), but over every replica: a refusal
// cuts it at once to learnCut of the calls in flight, cluster-wide, when
// the refused call was served; it grows by one (doubling while under half
// the level last refused) at most every learnGrowEvery, only while it
// holds calls back, and not before learnHold, or the Retry-After (at
// most learnHoldMax), has passed since a refusal. Each change rides on
// the compare-and-set that gives the slot back: learning costs no write
// of its own.
const (
	learnCut       = 0.9
	learnGrowEvery = time.Second
	learnHold      = time.Second
	// learnHoldMax bounds the hold of one Retry-After: one answer to one
	// account's call (a year, say) must not keep every account's share
	// of a target down for as long. A provider still overloaded after it
	// refuses again, and cuts the limit again.
	learnHoldMax = 10 * time.Minute
)

// Smooth is the limit of a target: at most rate calls a second, one
// every 1/rate (Lateness early at most), and at most concurrency in
// flight. Any window of w seconds sees at most rate × w + 1 + rate ×
// Lateness calls.
func Smooth(rate float64, concurrency int) Limit {
	return Limit{Rate: rate, Burst: 1 + rate*Lateness.Seconds(), Concurrency: concurrency}
}

// learnStart is where a target's learned concurrency starts, with none
// stored: the accounts' default concurrency.
const learnStart = 8

// OfTarget is a target's provider-wide limit (targets.<t>.rate and
// .concurrency, learned under "auto"), the same on every replica.
func OfTarget(t config.Target) Limit {
	l := Smooth(t.Rate.PerSecond, int(max(t.Concurrency, 0)))
	if t.Concurrency.Auto() {
		l.Learn = &Learn{Min: t.ConcurrencyMin, Max: t.ConcurrencyMax, Start: learnStart}
	}
	return l
}

func (l Limit) burst() float64 { return math.Max(1, l.Burst) }

// record is one key's stored state.
type record struct {
	// Tokens in the bucket at At.
	Tokens float64 `json:"tokens"`
	// At is when Tokens was counted (unix nanoseconds of the replica that
	// wrote it). It never goes back: a replica whose clock is behind adds
	// no tokens until its clock passes it.
	At int64 `json:"at,omitempty"`
	// Held is each replica's calls in flight.
	Held map[string]int `json:"held,omitempty"`
	// Queue is each waiting replica's place in line: lower goes first.
	Queue map[string]uint64 `json:"queue,omitempty"`
	// Seq is the last place given.
	Seq uint64 `json:"seq,omitempty"`
	// Learned is a learned concurrency (Limit.Learn) as it stands; 0: its
	// start.
	Learned int `json:"learned,omitempty"`
	// Refused is the calls in flight when a call was last refused; 0: none
	// yet.
	Refused int `json:"refused,omitempty"`
	// Hold is when the learned concurrency may grow again, and Grown when
	// it last moved (unix nanoseconds).
	Hold  int64 `json:"hold,omitempty"`
	Grown int64 `json:"grown,omitempty"`
}

func (r record) clone() record {
	r.Held, r.Queue = maps.Clone(r.Held), maps.Clone(r.Queue)
	return r
}

// refill adds the tokens earned from At to now.
func (r *record) refill(l Limit, now time.Time) {
	if l.Rate <= 0 {
		return
	}
	n := now.UnixNano()
	switch {
	case r.At == 0:
		r.Tokens, r.At = l.burst(), n
	case n > r.At:
		r.Tokens += float64(n-r.At) / float64(time.Second) * l.Rate
		r.At = n
	}
	r.Tokens = math.Min(r.Tokens, l.burst())
}

// whole is how many whole tokens the bucket holds (float error aside).
func (r record) whole() int { return int(math.Floor(r.Tokens + 1e-9)) }

// due is how long until the bucket holds a whole token.
func (r record) due(l Limit) time.Duration {
	if l.Rate <= 0 || r.whole() >= 1 {
		return 0
	}
	d := time.Duration((1 - r.Tokens) / l.Rate * float64(time.Second))
	return d.Truncate(time.Microsecond) + time.Microsecond
}

// othersHeld is the calls in flight of the counted replicas other than
// self (every replica's when counted is nil).
func (r record) othersHeld(counted []string, self string) int {
	n := 0
	for m, h := range r.Held {
		if m != self && in(counted, m) {
			n += h
		}
	}
	return n
}

// turn reports whether self goes first among the live replicas that
// wait: none waits, or self's place is the lowest.
func (r record) turn(live []string, self string) bool {
	mine, queued := r.Queue[self]
	for m, p := range r.Queue {
		if m != self && in(live, m) && (!queued || p < mine) {
			return false
		}
	}
	return true
}

func (r *record) setHeld(self string, n int) {
	if n <= 0 {
		delete(r.Held, self)
		return
	}
	if r.Held == nil {
		r.Held = map[string]int{}
	}
	r.Held[self] = n
}

// line puts self at the back of the line.
func (r *record) line(self string) {
	if r.Queue == nil {
		r.Queue = map[string]uint64{}
	}
	r.Seq++
	r.Queue[self] = r.Seq
}

// prune forgets the slots of the replicas not counted, and the places in
// line of those not live (none when the list is nil): a replica taken for
// dead gives up its turn at once, and its slots once its calls cannot
// run.
func (r *record) prune(live, counted []string, self string) {
	if counted != nil {
		for m := range r.Held {
			if m != self && !in(counted, m) {
				delete(r.Held, m)
			}
		}
	}
	if live != nil {
		for m := range r.Queue {
			if m != self && !in(live, m) {
				delete(r.Queue, m)
			}
		}
	}
}

// in reports whether m is in list (sorted); a nil list holds everyone.
func in(list []string, m string) bool {
	if list == nil {
		return true
	}
	_, ok := slices.BinarySearch(list, m)
	return ok
}
