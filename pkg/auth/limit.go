package auth

import (
	"math"
	"sync"
	"time"
)

// bucket is a token bucket: rate tokens a second, at most burst saved.
// It counts in this process only: a key's shared rate is counted in
// tenaz_quotas (ShareRates), and this bucket stands in while that does
// not answer.
type bucket struct {
	rate  float64
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// newBucket returns nil (no limit) for a rate of 0. burst 0 means the
// rate per second rounded up, at least 1.
func newBucket(rate float64, burst int) *bucket {
	if !(rate > 0) {
		return nil
	}
	b := float64(burst)
	if burst <= 0 {
		b = math.Max(1, math.Ceil(rate))
	}
	return &bucket{rate: rate, burst: b, tokens: b}
}

// take spends one token at now. When none is left it returns false and
// how long until one is.
func (b *bucket) take(now time.Time) (bool, time.Duration) {
	if b == nil {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
	return false, wait
}

// same reports whether b and o limit alike (both nil: no limit).
func (b *bucket) same(o *bucket) bool {
	if b == nil || o == nil {
		return b == o
	}
	return b.rate == o.rate && b.burst == o.burst
}
