package outcome_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenaz/tenaz/pkg/outcome"
)

var backoff = outcome.Backoff{Initial: 30 * time.Second, Max: time.Hour, Multiplier: 2, Jitter: 0.2, MaxRetryAfter: 10 * time.Minute}

func TestDecide(t *testing.T) {
	t.Parallel()
	transient := errors.New("connection reset")
	http503 := &outcome.HTTPError{Status: 503}
	lo, hi := time.Duration(float64(backoff.Initial)*(1-backoff.Jitter)), time.Duration(float64(backoff.Initial)*(1+backoff.Jitter))
	tests := []struct {
		name         string
		err          error
		attempt, max int
		fallback     bool
		verdict      outcome.Verdict
		class        outcome.Class
		minD, maxD   time.Duration // VerdictRetry only
	}{
		{"success", nil, 1, 6, false, outcome.VerdictDone, outcome.ClassSuccess, 0, 0},
		{"success on the last attempt", nil, 6, 6, true, outcome.VerdictDone, outcome.ClassSuccess, 0, 0},
		{"permanent on attempt 1", outcome.Permanent(errors.New("unknown customer")), 1, 6, false, outcome.VerdictDead, outcome.ClassPermanent, 0, 0},
		{"permanent skips the fallback", outcome.Permanent(&outcome.HTTPError{Status: 422}), 1, 6, true, outcome.VerdictDead, outcome.ClassPermanent, 0, 0},
		{"permanent wrapped again", fmt.Errorf("call: %w", outcome.Permanent(nil)), 2, 6, false, outcome.VerdictDead, outcome.ClassPermanent, 0, 0},
		{"transient, attempts left", transient, 1, 6, false, outcome.VerdictRetry, outcome.ClassTransient, lo, hi},
		{"transient 503, attempts left", http503, 1, 6, true, outcome.VerdictRetry, outcome.ClassTransient, lo, hi},
		{"transient on the second attempt doubles", transient, 2, 6, false, outcome.VerdictRetry, outcome.ClassTransient, 2 * lo, 2 * hi},
		{"exhausted without fallback", transient, 6, 6, false, outcome.VerdictDead, outcome.ClassTransient, 0, 0},
		{"exhausted with fallback", transient, 6, 6, true, outcome.VerdictFallback, outcome.ClassTransient, 0, 0},
		{"past the limit (redelivery) without fallback", transient, 9, 6, false, outcome.VerdictDead, outcome.ClassTransient, 0, 0},
		{"one attempt allowed", transient, 1, 1, false, outcome.VerdictDead, outcome.ClassTransient, 0, 0},
		{"timeout, attempts left", fmt.Errorf("%w after 10s", outcome.ErrTimeout), 1, 6, false, outcome.VerdictRetry, outcome.ClassTimeout, lo, hi},
		{"timeout exhausted with fallback", fmt.Errorf("%w after 10s", outcome.ErrTimeout), 3, 3, true, outcome.VerdictFallback, outcome.ClassTimeout, 0, 0},
		{"retry-after longer than the backoff wins", outcome.RetryAfter(5*time.Minute, http503), 1, 6, false, outcome.VerdictRetry, outcome.ClassTransient, 5 * time.Minute, 5 * time.Minute},
		{"retry-after shorter than the backoff loses", outcome.RetryAfter(time.Second, http503), 1, 6, false, outcome.VerdictRetry, outcome.ClassTransient, lo, hi},
		{"retry-after capped by MaxRetryAfter", outcome.RetryAfter(24*time.Hour, http503), 1, 6, false, outcome.VerdictRetry, outcome.ClassTransient, 10 * time.Minute, 10 * time.Minute},
		{"retry-after does not extend the attempts", outcome.RetryAfter(time.Minute, http503), 6, 6, false, outcome.VerdictDead, outcome.ClassTransient, 0, 0},
		{"retry-after wrapped", fmt.Errorf("erp: %w", outcome.RetryAfter(7*time.Minute, nil)), 1, 6, false, outcome.VerdictRetry, outcome.ClassTransient, 7 * time.Minute, 7 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(50) {
				d := outcome.Decide(tt.err, tt.attempt, tt.max, tt.fallback, backoff, rand.New(rand.NewPCG(seed, 1)))
				if d.Verdict != tt.verdict || d.Class != tt.class {
					t.Fatalf("want %s/%s, got %s/%s", tt.verdict, tt.class, d.Verdict, d.Class)
				}
				if tt.verdict != outcome.VerdictRetry {
					if d.Delay != 0 {
						t.Fatalf("want no delay for %s, got %s", d.Verdict, d.Delay)
					}
					continue
				}
				if d.Delay < tt.minD || d.Delay > tt.maxD {
					t.Fatalf("seed %d: want a delay in [%s, %s], got %s", seed, tt.minD, tt.maxD, d.Delay)
				}
			}
		})
	}
}

func TestDecideNilRand(t *testing.T) {
	t.Parallel()
	d := outcome.Decide(errors.New("x"), 1, 3, false, backoff, nil)
	if d.Verdict != outcome.VerdictRetry || d.Delay < 24*time.Second || d.Delay > 36*time.Second {
		t.Errorf("want retry in [24s, 36s] with the global source, got %s %s", d.Verdict, d.Delay)
	}
}

func TestVerdictString(t *testing.T) {
	t.Parallel()
	for v, want := range map[outcome.Verdict]string{outcome.VerdictDone: "done", outcome.VerdictRetry: "retry", outcome.VerdictFallback: "fallback", outcome.VerdictDead: "dead"} {
		if v.String() != want {
			t.Errorf("Verdict(%d).String(): want %q, got %q", int(v), want, v.String())
		}
	}
}

func TestBackoffDelayExact(t *testing.T) {
	t.Parallel()
	b := outcome.Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2}
	for n, want := range map[int]time.Duration{
		0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		5: 10 * time.Second, 6: 10 * time.Second, 100: 10 * time.Second, 5000: 10 * time.Second, math.MaxInt: 10 * time.Second,
	} {
		if got := b.Delay(n, nil, nil); got != want {
			t.Errorf("Delay(%d) with 1s×2 capped at 10s: want %s, got %s", n, want, got)
		}
	}
	three := outcome.Backoff{Initial: 100 * time.Millisecond, Max: time.Hour, Multiplier: 3}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 300 * time.Millisecond, 3: 900 * time.Millisecond, 4: 2700 * time.Millisecond} {
		if got := three.Delay(n, nil, nil); got != want {
			t.Errorf("Delay(%d) with 100ms×3: want %s, got %s", n, want, got)
		}
	}
}

func TestBackoffEdgeCases(t *testing.T) {
	t.Parallel()
	rnd := func() *rand.Rand { return rand.New(rand.NewPCG(7, 7)) }
	tests := []struct {
		name string
		b    outcome.Backoff
		n    int
		want time.Duration
	}{
		{"multiplier below 1 counts as 1", outcome.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 0.5}, 5, time.Second},
		{"multiplier 0 counts as 1", outcome.Backoff{Initial: time.Second, Max: time.Minute}, 5, time.Second},
		{"NaN multiplier counts as 1", outcome.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: math.NaN()}, 5, time.Second},
		{"no cap still grows", outcome.Backoff{Initial: time.Second, Multiplier: 2}, 5, 16 * time.Second},
		{"no cap saturates instead of overflowing", outcome.Backoff{Initial: time.Hour, Multiplier: 2}, 200, math.MaxInt64},
		{"cap near the int64 limit saturates", outcome.Backoff{Initial: time.Hour, Max: math.MaxInt64, Multiplier: 2}, 100, math.MaxInt64},
		{"zero initial", outcome.Backoff{Max: time.Hour, Multiplier: 2}, 3000, 0},
		{"negative initial", outcome.Backoff{Initial: -time.Second, Max: time.Hour, Multiplier: 2}, 3, 0},
	}
	for _, tt := range tests {
		if got := tt.b.Delay(tt.n, nil, rnd()); got != tt.want {
			t.Errorf("%s: Delay(%d): want %s, got %s", tt.name, tt.n, tt.want, got)
		}
	}
}

// Jitter keeps every delay within ±Jitter of the exponential value, never
// negative, whatever the parameters and the random source.
func TestBackoffJitterBounds(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		b := outcome.Backoff{
			Initial:    time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "initial")),
			Max:        time.Duration(rapid.Int64Range(1, int64(24*time.Hour)).Draw(t, "max")),
			Multiplier: rapid.Float64Range(1, 4).Draw(t, "multiplier"),
			Jitter:     rapid.Float64Range(0, 2).Draw(t, "jitter"),
		}
		n := rapid.IntRange(1, 60).Draw(t, "n")
		base := float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1))
		base = math.Min(base, float64(b.Max))
		j := math.Min(b.Jitter, 1)
		got := b.Delay(n, nil, rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0)))
		lo, hi := base*(1-j), base*(1+j)
		// one part in 1e9 of slack for float rounding
		if got < 0 || float64(got) < lo*(1-1e-9)-1 || float64(got) > hi*(1+1e-9)+1 {
			t.Fatalf("%+v Delay(%d) = %s, want in [%s, %s]", b, n, got, time.Duration(lo), time.Duration(hi))
		}
	})
}

func TestBackoffJitterSpreads(t *testing.T) {
	t.Parallel()
	b := outcome.Backoff{Initial: 10 * time.Second, Max: time.Hour, Multiplier: 2, Jitter: 0.5}
	rnd := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	low, high := false, false
	for range 200 {
		d := b.Delay(1, nil, rnd)
		seen[d] = true
		low = low || d < 8*time.Second
		high = high || d > 12*time.Second
	}
	if len(seen) < 100 || !low || !high {
		t.Errorf("want jitter to spread 200 delays across [5s, 15s], got %d distinct (below 8s: %v, above 12s: %v)", len(seen), low, high)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, in string
		want     time.Duration
		ok       bool
	}{
		{"seconds", "7", 7 * time.Second, true},
		{"seconds with spaces", "  120 ", 2 * time.Minute, true},
		{"zero", "0", 0, true},
		{"negative", "-5", 0, false},
		{"huge seconds capped", "999999999999", outcome.RetryAfterCap, true},
		{"beyond int64 capped", "99999999999999999999999", outcome.RetryAfterCap, true},
		{"exactly the cap", fmt.Sprint(int64(outcome.RetryAfterCap / time.Second)), outcome.RetryAfterCap, true},
		{"HTTP date in the future", "Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"HTTP date in the past", "Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"HTTP date far in the future capped", "Fri, 31 Dec 9999 23:59:59 GMT", outcome.RetryAfterCap, true},
		{"RFC 850 date", "Sunday, 01-Mar-26 12:01:00 GMT", time.Minute, true},
		{"asctime date", "Sun Mar  1 12:02:00 2026", 2 * time.Minute, true},
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"garbage", "soon", 0, false},
		{"decimal seconds", "1.5", 0, false},
		{"unit suffix", "10s", 0, false},
		{"ISO date", "2026-03-01T12:00:30Z", 0, false},
		{"negative huge", "-99999999999999999999999", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := outcome.ParseRetryAfter(tt.in, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%q): want (%s, %v), got (%s, %v)", tt.in, tt.want, tt.ok, got, ok)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	p := outcome.Permanent(base)
	if !outcome.IsPermanent(p) || !errors.Is(p, base) || p.Error() != "base" {
		t.Errorf("Permanent(base): want permanent, wrapping base, message %q, got %v %v %q", "base", outcome.IsPermanent(p), errors.Is(p, base), p.Error())
	}
	if outcome.IsPermanent(base) || outcome.IsPermanent(nil) {
		t.Error("want plain errors and nil not permanent")
	}
	if np := outcome.Permanent(nil); np == nil || !outcome.IsPermanent(np) {
		t.Errorf("Permanent(nil): want a permanent error, got %v", np)
	}
	ra := outcome.RetryAfter(7*time.Second, base)
	var rae *outcome.RetryAfterError
	if !errors.As(ra, &rae) || rae.After != 7*time.Second || !errors.Is(ra, base) {
		t.Errorf("RetryAfter(7s, base): want a *RetryAfterError of 7s wrapping base, got %v", ra)
	}
	if outcome.RetryAfter(time.Second, nil) == nil {
		t.Error("RetryAfter(1s, nil): want an error, got nil")
	}
	h := &outcome.HTTPError{Status: 422, Body: "bad vat"}
	for err, want := range map[error]int{h: 422, fmt.Errorf("x: %w", outcome.Permanent(h)): 422, outcome.RetryAfter(1, h): 422, base: 0, nil: 0} {
		if got := outcome.StatusOf(err); got != want {
			t.Errorf("StatusOf(%v): want %d, got %d", err, want, got)
		}
	}
	if got := h.Error(); got != "target answered 422 Unprocessable Entity: bad vat" {
		t.Errorf("HTTPError.Error(): got %q", got)
	}
	if got := (&outcome.HTTPError{Status: 503}).Error(); got != "target answered 503 Service Unavailable" {
		t.Errorf("HTTPError.Error() without body: got %q", got)
	}
	for err, want := range map[error]outcome.Class{
		nil: outcome.ClassSuccess, base: outcome.ClassTransient, p: outcome.ClassPermanent, ra: outcome.ClassTransient,
		fmt.Errorf("%w", outcome.ErrTimeout):                    outcome.ClassTimeout,
		outcome.Permanent(fmt.Errorf("%w", outcome.ErrTimeout)): outcome.ClassPermanent,
	} {
		if got := outcome.ClassOf(err); got != want {
			t.Errorf("ClassOf(%v): want %s, got %s", err, want, got)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"7", "0", "-1", "99999999999999999999", "Sun, 01 Mar 2026 12:00:30 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "soon", "", " 5 ", "+5"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := outcome.ParseRetryAfter(v, now)
		if d < 0 || d > outcome.RetryAfterCap {
			t.Fatalf("ParseRetryAfter(%q) = %s, want within [0, %s]", v, d, outcome.RetryAfterCap)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = (%s, false), want 0 when not ok", v, d)
		}
	})
}

// Overloaded tells the answers that say the target has no room (429,
// 503, a Retry-After, a timeout) from those that say nothing of it.
func TestOverloaded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		want  bool
		after time.Duration
	}{
		{"success", nil, false, 0},
		{"429", &outcome.HTTPError{Status: 429}, true, 0},
		{"503", fmt.Errorf("call: %w", &outcome.HTTPError{Status: 503}), true, 0},
		{"retry-after", outcome.RetryAfter(7*time.Second, &outcome.HTTPError{Status: 500}), true, 7 * time.Second},
		{"timeout", fmt.Errorf("call: %w", outcome.ErrTimeout), true, 0},
		{"500", &outcome.HTTPError{Status: 500}, false, 0},
		{"permanent 400", outcome.Permanent(&outcome.HTTPError{Status: 400}), false, 0},
		{"connection refused", errors.New("dial tcp: connection refused"), false, 0},
	} {
		got, after := outcome.Overloaded(tc.err)
		if got != tc.want || after != tc.after {
			t.Errorf("%s: want %v %s, got %v %s", tc.name, tc.want, tc.after, got, after)
		}
	}
}
