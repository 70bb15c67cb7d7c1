package effect_test

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/tenaz/tenaz/pkg/effect"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/outcome"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait on something that needs no retry.
const waitFor = 10 * time.Second

// env is one test's embedded server.
type env struct {
	t   *testing.T
	srv *natstest.Server
	js  jetstream.JetStream
	ctx context.Context
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, srv: natstest.Start(t)}
	_, e.js = e.srv.Conn(t)
	var cancel context.CancelFunc
	e.ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return e
}

// ledger opens a ledger on its own connection, as another process would.
func (e *env) ledger(o effect.Options) *effect.Ledger {
	e.t.Helper()
	_, js := e.srv.Conn(e.t)
	l, err := effect.Open(e.ctx, js, o)
	if err != nil {
		e.t.Fatalf("effect.Open: %v", err)
	}
	return l
}

func (e *env) get(l *effect.Ledger, key string) effect.Record {
	e.t.Helper()
	r, err := l.Get(e.ctx, "acme", key)
	if err != nil {
		e.t.Fatalf("Get(%q): want a record, got %v", key, err)
	}
	return r
}

// returns is fn that returns result and counts its runs.
func returns(runs *atomic.Int32, result string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(result), nil
	}
}

// mustNotRun is fn for a Do that must not run it.
func mustNotRun(t *testing.T) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		t.Error("fn ran for a key that must not run it")
		return nil, errors.New("must not run")
	}
}

// Eight concurrent Do calls for one key while fn runs: fn runs once, the
// seven others are told the key is in progress, and later calls get the
// recorded result.
func TestOncePerKeyWhileRunning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 8
	var runs atomic.Int32
	returned := make(chan struct{}, n)
	type res struct {
		out effect.Outcome
		err error
	}
	results := make([]res, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		l := e.ledger(effect.Options{Owner: fmt.Sprintf("w%d", i)})
		wg.Go(func() {
			<-start
			out, err := l.Do(e.ctx, "acme", "reward:o-1", func(context.Context) ([]byte, error) {
				runs.Add(1)
				for range n - 1 { // hold the claim until every other call answered
					select {
					case <-returned:
					case <-time.After(waitFor):
						return nil, errors.New("the other calls did not return")
					}
				}
				return []byte("credited 100"), nil
			})
			results[i] = res{out, err}
			returned <- struct{}{}
		})
	}
	close(start)
	wg.Wait()

	if got := runs.Load(); got != 1 {
		t.Fatalf("want fn to run once, ran %d times", got)
	}
	applied := 0
	for i, r := range results {
		switch {
		case r.err == nil && r.out.Applied && string(r.out.Result) == "credited 100":
			applied++
		case errors.Is(r.err, effect.ErrInProgress):
			var ip *effect.InProgressError
			if !errors.As(r.err, &ip) || !strings.HasPrefix(ip.Owner, "w") || !ip.LeaseUntil.After(time.Now()) {
				t.Fatalf("call %d: want an InProgressError naming the owner and a live lease, got %v", i, r.err)
			}
		default:
			t.Fatalf("call %d: want applied or in progress, got %+v, %v", i, r.out, r.err)
		}
	}
	if applied != 1 {
		t.Fatalf("want exactly one call to report Applied, got %d", applied)
	}
	out, err := e.ledger(effect.Options{}).Do(e.ctx, "acme", "reward:o-1", mustNotRun(t))
	if err != nil || out.Applied || string(out.Result) != "credited 100" || out.At.IsZero() {
		t.Fatalf("after the run: want the recorded result, not applied, got %+v, %v", out, err)
	}
}

// Concurrent Do calls racing on many keys, fn quick: for each key fn runs
// once; every other call gets the same result or is told it is in
// progress, and a retry of those gets the result.
func TestOncePerKeyUnderRace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n, keys = 8, 16
	ledgers := make([]*effect.Ledger, n)
	for i := range ledgers {
		ledgers[i] = e.ledger(effect.Options{Owner: fmt.Sprintf("w%d", i)})
	}
	var runs [keys]atomic.Int32
	var applied [keys]atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range ledgers {
		wg.Go(func() {
			<-start
			for k := range keys {
				key := fmt.Sprintf("k-%d", (k+i)%keys) // each worker starts elsewhere
				want := "result of " + key
				fn := returns(&runs[(k+i)%keys], want)
				out, err := l.Do(e.ctx, "acme", key, fn)
				if errors.Is(err, effect.ErrInProgress) {
					for errors.Is(err, effect.ErrInProgress) { // the job's retry
						out, err = l.Do(e.ctx, "acme", key, fn)
					}
				}
				if err != nil || string(out.Result) != want {
					t.Errorf("%s: want result %q, got %+v, %v", key, want, out, err)
				}
				if out.Applied {
					applied[(k+i)%keys].Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for k := range keys {
		if r, a := runs[k].Load(), applied[k].Load(); r != 1 || a != 1 {
			t.Errorf("k-%d: want fn run once and one call Applied, got %d runs, %d applied", k, r, a)
		}
	}
}

// A done key never runs fn again, from any ledger.
func TestDoneKeyNeverRunsAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.ledger(effect.Options{Owner: "a"})
	var runs atomic.Int32
	first, err := a.Do(e.ctx, "acme", "email:welcome:u-1", returns(&runs, "msg-1"))
	if err != nil || !first.Applied || string(first.Result) != "msg-1" {
		t.Fatalf("first Do: want applied with msg-1, got %+v, %v", first, err)
	}
	for _, l := range []*effect.Ledger{a, e.ledger(effect.Options{Owner: "b"})} {
		for range 3 {
			out, err := l.Do(e.ctx, "acme", "email:welcome:u-1", mustNotRun(t))
			if err != nil || out.Applied || string(out.Result) != "msg-1" || !out.At.Equal(first.At) {
				t.Fatalf("repeat Do: want {Applied false, msg-1, At %s}, got %+v, %v", first.At, out, err)
			}
		}
	}
	r := e.get(a, "email:welcome:u-1")
	if r.Status != effect.StatusDone || r.Runs != 1 || r.Owner != "a" || string(r.Result) != "msg-1" || r.Key != "email:welcome:u-1" {
		t.Fatalf("want a done record run once by a, got %+v", r)
	}
	if runs.Load() != 1 {
		t.Fatalf("want fn run once, got %d", runs.Load())
	}
}

// A transient error from fn releases the key: the error comes back as it
// was (RetryAfter too), and the next Do runs fn again.
func TestTransientErrorReleasesTheKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.ledger(effect.Options{Owner: "a"})
	boom := errors.New("wallet unavailable")
	_, err := l.Do(e.ctx, "acme", "k", func(context.Context) ([]byte, error) { return nil, boom })
	if !errors.Is(err, boom) || outcome.IsPermanent(err) {
		t.Fatalf("want fn's transient error back, got %v", err)
	}
	if r := e.get(l, "k"); r.Status != effect.StatusReleased || r.Error != boom.Error() || r.Runs != 1 || !r.LeaseUntil.IsZero() {
		t.Fatalf("want a released record with the error, got %+v", r)
	}
	_, err = l.Do(e.ctx, "acme", "k", func(context.Context) ([]byte, error) { return nil, outcome.RetryAfter(5*time.Second, boom) })
	var ra *outcome.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 5*time.Second {
		t.Fatalf("want the RetryAfter error back, got %v", err)
	}
	var runs atomic.Int32
	out, err := l.Do(e.ctx, "acme", "k", returns(&runs, "ok"))
	if err != nil || !out.Applied || runs.Load() != 1 {
		t.Fatalf("after a release: want fn to run and apply, got %+v, %v", out, err)
	}
	if r := e.get(l, "k"); r.Status != effect.StatusDone || r.Runs != 3 || r.Error != "" {
		t.Fatalf("want done after 3 runs, error cleared, got %+v", r)
	}
}

// A permanent error is recorded: fn never runs again and every later Do
// returns ErrFailed, still permanent.
func TestPermanentErrorIsRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.ledger(effect.Options{})
	_, err := l.Do(e.ctx, "acme", "k", func(context.Context) ([]byte, error) {
		return nil, outcome.Permanent(errors.New("card closed"))
	})
	if !outcome.IsPermanent(err) || err.Error() != "card closed" {
		t.Fatalf("want fn's permanent error back, got %v", err)
	}
	if r := e.get(l, "k"); r.Status != effect.StatusFailed || r.Error != "card closed" {
		t.Fatalf("want a failed record, got %+v", r)
	}
	for range 2 {
		out, err := e.ledger(effect.Options{}).Do(e.ctx, "acme", "k", mustNotRun(t))
		if !errors.Is(err, effect.ErrFailed) || !outcome.IsPermanent(err) || !strings.Contains(err.Error(), "card closed") || out.Applied {
			t.Fatalf("want a permanent ErrFailed naming the cause, got %+v, %v", out, err)
		}
	}
}

// A claim whose lease ran out (its owner died mid-fn, simulated by a clock
// an hour ahead) is taken over: fn runs again. The original owner, if it
// comes back after all, learns that it lost the key.
func TestExpiredLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.ledger(effect.Options{Owner: "a"})
	later := e.ledger(effect.Options{Owner: "b", Now: func() time.Time { return time.Now().Add(time.Hour) }})
	now := e.ledger(effect.Options{Owner: "c"})

	started, release := make(chan struct{}), make(chan struct{})
	type res struct {
		out effect.Outcome
		err error
	}
	done := make(chan res, 1)
	go func() {
		out, err := a.Do(e.ctx, "acme", "k", func(ctx context.Context) ([]byte, error) {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return []byte("by a"), nil
		})
		done <- res{out, err}
	}()
	<-started
	var ip *effect.InProgressError
	if _, err := now.Do(e.ctx, "acme", "k", mustNotRun(t)); !errors.As(err, &ip) || ip.Owner != "a" {
		t.Fatalf("a live claim: want InProgressError owned by a, got %v", err)
	}
	var runs atomic.Int32
	out, err := later.Do(e.ctx, "acme", "k", returns(&runs, "by b"))
	if err != nil || !out.Applied || string(out.Result) != "by b" || runs.Load() != 1 {
		t.Fatalf("an expired claim: want b to take over and apply, got %+v, %v", out, err)
	}
	close(release)
	var ra res
	select {
	case ra = <-done:
	case <-time.After(waitFor):
		t.Fatal("a's Do did not return")
	}
	if !errors.Is(ra.err, effect.ErrLeaseLost) || !ra.out.Applied {
		t.Fatalf("the superseded owner: want Applied with ErrLeaseLost, got %+v, %v", ra.out, ra.err)
	}
	if r := e.get(a, "k"); r.Status != effect.StatusDone || r.Owner != "b" || r.Runs != 2 || string(r.Result) != "by b" {
		t.Fatalf("want done by b after 2 runs, got %+v", r)
	}
	out, err = now.Do(e.ctx, "acme", "k", mustNotRun(t))
	if err != nil || out.Applied || string(out.Result) != "by b" {
		t.Fatalf("after the takeover: want b's result, got %+v, %v", out, err)
	}
}

// While fn runs the claim is renewed, so a slow fn is not taken for a dead
// one: past the first lease the key is still in progress.
func TestLeaseIsRenewedWhileFnRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const lease = 300 * time.Millisecond
	a := e.ledger(effect.Options{Owner: "a", Lease: lease})
	b := e.ledger(effect.Options{Owner: "b", Lease: lease})
	out, err := a.Do(e.ctx, "acme", "slow", func(ctx context.Context) ([]byte, error) {
		first := e.get(b, "slow")
		natstest.Eventually(t, waitFor, func() bool {
			r, err := b.Get(e.ctx, "acme", "slow")
			return err == nil && r.LeaseUntil.After(first.LeaseUntil.Add(lease))
		}, "lease of %q not renewed past %s", "slow", first.LeaseUntil.Add(lease))
		if !time.Now().After(first.LeaseUntil) {
			t.Errorf("want the first lease over by now")
		}
		if _, err := b.Do(e.ctx, "acme", "slow", mustNotRun(t)); !errors.Is(err, effect.ErrInProgress) {
			t.Errorf("past the first lease of a running fn: want ErrInProgress, got %v", err)
		}
		return []byte("done"), ctx.Err()
	})
	if err != nil || !out.Applied {
		t.Fatalf("want the slow fn applied, got %+v, %v", out, err)
	}
	if r := e.get(a, "slow"); r.Runs != 1 || r.Status != effect.StatusDone {
		t.Fatalf("want done in one run, got %+v", r)
	}
}

// A run whose claim was taken over learns it at its next renewal: fn's
// context is cancelled with cause ErrLeaseLost.
func TestLostLeaseCancelsFn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.ledger(effect.Options{Owner: "a", Lease: 300 * time.Millisecond})
	later := e.ledger(effect.Options{Owner: "b", Now: func() time.Time { return time.Now().Add(time.Hour) }})
	var cause error
	_, err := a.Do(e.ctx, "acme", "k", func(ctx context.Context) ([]byte, error) {
		var runs atomic.Int32
		if out, err := later.Do(e.ctx, "acme", "k", returns(&runs, "by b")); err != nil || !out.Applied {
			t.Errorf("want b to take over, got %+v, %v", out, err)
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(waitFor):
		}
		return nil, cause
	})
	if !errors.Is(cause, effect.ErrLeaseLost) {
		t.Fatalf("want fn cancelled with cause ErrLeaseLost, got %v", cause)
	}
	if !errors.Is(err, effect.ErrLeaseLost) {
		t.Fatalf("want Do to report ErrLeaseLost, got %v", err)
	}
	if r := e.get(a, "k"); r.Status != effect.StatusDone || r.Owner != "b" {
		t.Fatalf("want b's done record untouched, got %+v", r)
	}
}

// A write of the run's own whose answer was lost (stored, but the
// publish timed out or the connection dropped) is not a lost claim: the
// next renewal, which conflicts with it, finds the record still this
// run's and goes on, and fn's success is recorded. Taken for a lost
// claim, fn would run again for the key once the lease ran out.
func TestARenewalWhoseAnswerWasLostKeepsTheClaim(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const lease = 300 * time.Millisecond
	a := e.ledger(effect.Options{Owner: "a", Lease: lease})
	_, js := e.srv.Conn(t)
	var runs atomic.Int32
	out, err := a.Do(e.ctx, "acme", "k", func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		// What the renewal's lost answer leaves: the record renewed at a
		// revision the run has not heard of.
		r := e.get(a, "k")
		r.LeaseUntil, r.UpdatedAt = time.Now().Add(lease), time.Now()
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		subj := "$KV." + names.NewSubjects("").Bucket(names.BucketEffects) + "." + effect.StorageKey("acme", "k")
		stored, err := js.Publish(e.ctx, subj, b, jetstream.WithExpectLastSequencePerSubject(r.Revision))
		if err != nil {
			t.Fatal(err)
		}
		// Until the run's next renewal, which comes after that write.
		natstest.Eventually(t, waitFor, func() bool { return ctx.Err() != nil || e.get(a, "k").Revision > stored.Sequence },
			"a renewal after the one whose answer was lost")
		return []byte("credited"), context.Cause(ctx)
	})
	if err != nil || !out.Applied {
		t.Fatalf("want fn's success recorded, got %+v, %v", out, err)
	}
	if r := e.get(a, "k"); r.Status != effect.StatusDone {
		t.Fatalf("want the key done, got %+v", r)
	}
	if _, err := a.Do(e.ctx, "acme", "k", returns(&runs, "again")); err != nil || runs.Load() != 1 {
		t.Fatalf("want fn run once for the key, got %d runs (%v)", runs.Load(), err)
	}
}

// Any UTF-8 string up to MaxKeyLen is a key: each gets its own record and
// none collides with another.
func TestAnyStringIsAKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.ledger(effect.Options{})
	keys := []string{
		"a", "a b", " a", "a ", "a.b", "a..b", ".", "..", "a.", ".a", "*", ">", "a.*", "a.>", "*.>",
		"$KV.tenaz_effects.x", "a/b", "a=b", "tab\there", "line\nbreak", "nul\x00byte",
		"ключ", "鍵", "🙂", "e\u0301", "\u00e9", strings.Repeat("x", 1024), strings.Repeat("é", 2048),
	}
	kv, err := e.js.KeyValue(e.ctx, names.BucketEffects)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, k := range keys {
		sk := effect.StorageKey("acme", k)
		if prev, ok := seen[sk]; ok {
			t.Fatalf("keys %q and %q share storage key %s", prev, k, sk)
		}
		seen[sk] = k
		out, err := l.Do(e.ctx, "acme", k, func(context.Context) ([]byte, error) { return []byte(k), nil })
		if err != nil || !out.Applied {
			t.Fatalf("key %q: want applied, got %+v, %v", k, out, err)
		}
		// The storage key is a plain KV key: the KV API reads it.
		ent, err := kv.Get(e.ctx, sk)
		if err != nil {
			t.Fatalf("key %q: KV get %s: %v", k, sk, err)
		}
		var r effect.Record
		if err := json.Unmarshal(ent.Value(), &r); err != nil || r.Key != k {
			t.Fatalf("key %q: want the record to keep the key, got %q (%v)", k, r.Key, err)
		}
	}
	for _, k := range keys {
		out, err := l.Do(e.ctx, "acme", k, mustNotRun(t))
		if err != nil || out.Applied || string(out.Result) != k {
			t.Fatalf("key %q again: want its own result, got %q, %v", k, out.Result, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", effect.MaxKeyLen+1), "\xff\xfe"} {
		if _, err := l.Do(e.ctx, "acme", bad, mustNotRun(t)); !errors.Is(err, effect.ErrInvalidKey) {
			t.Fatalf("key %q: want ErrInvalidKey from Do, got %v", bad, err)
		}
		if _, err := l.Get(e.ctx, "acme", bad); !errors.Is(err, effect.ErrInvalidKey) {
			t.Fatalf("key %q: want ErrInvalidKey from Get, got %v", bad, err)
		}
	}
	if _, err := l.Get(e.ctx, "acme", "never"); !errors.Is(err, effect.ErrNotFound) {
		t.Fatalf("unknown key: want ErrNotFound, got %v", err)
	}
}

// Storage keys are valid KV keys, and distinct for distinct keys or
// accounts.
func TestStorageKeyProperty(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[A-Z2-7]{52}$`)
	account := rapid.StringMatching(`[A-Za-z0-9_-]{1,64}`)
	rapid.Check(t, func(t *rapid.T) {
		aa, ab := account.Draw(t, "account a"), account.Draw(t, "account b")
		a := rapid.String().Draw(t, "a")
		b := rapid.String().Draw(t, "b")
		sa, sb := effect.StorageKey(aa, a), effect.StorageKey(ab, b)
		if !valid.MatchString(sa) {
			t.Fatalf("storage key of %q is %q, not 52 base32 characters", a, sa)
		}
		if (sa == sb) != (aa == ab && a == b) {
			t.Fatalf("keys %s/%q and %s/%q: storage keys %s and %s", aa, a, ab, b, sa, sb)
		}
	})
}

// A panic in fn releases the key and goes on panicking.
func TestPanicReleasesTheKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.ledger(effect.Options{})
	func() {
		defer func() {
			if p := recover(); p != "wallet exploded" {
				t.Fatalf("want the panic to reach the caller, got %v", p)
			}
		}()
		_, _ = l.Do(e.ctx, "acme", "k", func(context.Context) ([]byte, error) { panic("wallet exploded") })
	}()
	if r := e.get(l, "k"); r.Status != effect.StatusReleased || r.Error != "fn panicked" {
		t.Fatalf("want a released record after the panic, got %+v", r)
	}
	var runs atomic.Int32
	if out, err := l.Do(e.ctx, "acme", "k", returns(&runs, "ok")); err != nil || !out.Applied {
		t.Fatalf("after a panic: want fn to run again, got %+v, %v", out, err)
	}
}

// A result over MaxResult is not kept, but the effect is recorded done.
func TestResultTooLarge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.ledger(effect.Options{})
	big := make([]byte, effect.MaxResult+1)
	out, err := l.Do(e.ctx, "acme", "k", func(context.Context) ([]byte, error) { return big, nil })
	if !errors.Is(err, effect.ErrResultTooLarge) || !out.Applied || len(out.Result) != len(big) {
		t.Fatalf("want Applied with the result and ErrResultTooLarge, got Applied=%v %d bytes, %v", out.Applied, len(out.Result), err)
	}
	out, err = l.Do(e.ctx, "acme", "k", mustNotRun(t))
	if err != nil || out.Applied || out.Result != nil {
		t.Fatalf("want done without a result, got %+v, %v", out, err)
	}
}

// Records expire Retention after their last write (a per-key TTL); then
// the key is forgotten and fn would run again.
func TestRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	long := e.ledger(effect.Options{Retention: 90 * 24 * time.Hour})
	var runs atomic.Int32
	if _, err := long.Do(e.ctx, "acme", "kept", returns(&runs, "x")); err != nil {
		t.Fatal(err)
	}
	s, err := e.js.Stream(e.ctx, "KV_"+names.BucketEffects)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(e.ctx, "$KV."+names.BucketEffects+"."+effect.StorageKey("acme", "kept"))
	if err != nil {
		t.Fatal(err)
	}
	if ttl := m.Header.Get(jetstream.MsgTTLHeader); ttl != (90 * 24 * time.Hour).String() {
		t.Fatalf("want the record's TTL to be the retention, got %q", ttl)
	}

	short := e.ledger(effect.Options{Retention: time.Second, Lease: effect.MinLease})
	if _, err := short.Do(e.ctx, "acme", "brief", returns(&runs, "y")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitFor, func() bool {
		_, err := short.Get(e.ctx, "acme", "brief")
		return errors.Is(err, effect.ErrNotFound)
	}, "record not expired after its 1s retention")
	out, err := short.Do(e.ctx, "acme", "brief", returns(&runs, "z"))
	if err != nil || !out.Applied || string(out.Result) != "z" {
		t.Fatalf("an expired key: want fn to run again, got %+v, %v", out, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		o    effect.Options
		ok   bool
	}{
		{"defaults", effect.Options{}, true},
		{"min lease", effect.Options{Lease: effect.MinLease}, true},
		{"lease too short", effect.Options{Lease: time.Millisecond}, false},
		{"negative lease", effect.Options{Lease: -time.Second}, false},
		{"retention too short", effect.Options{Retention: 500 * time.Millisecond, Lease: effect.MinLease}, false},
		{"retention not above lease", effect.Options{Retention: time.Minute, Lease: time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o.WithDefaults()
			err := o.Validate()
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, effect.ErrInvalidOptions) {
				t.Fatalf("want ok=%v (or ErrInvalidOptions), got %v", tc.ok, err)
			}
			if o.Owner == "" || o.Now == nil {
				t.Fatalf("want defaults for Owner and Now, got %+v", o)
			}
		})
	}
}

// Keys are per account: two accounts' events with one business key (each
// its own order o-1) each apply their effect and read their own result,
// and neither learns the other's.
func TestKeysArePerAccount(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.ledger(effect.Options{})
	var runs atomic.Int32
	for _, account := range []string{"acme", "globex"} {
		out, err := l.Do(e.ctx, account, "reward:o-1", returns(&runs, "credited for "+account))
		if err != nil || !out.Applied || string(out.Result) != "credited for "+account {
			t.Fatalf("%s: want its own effect applied, got %+v, %v", account, out, err)
		}
	}
	for _, account := range []string{"acme", "globex"} {
		out, err := l.Do(e.ctx, account, "reward:o-1", mustNotRun(t))
		if err != nil || out.Applied || string(out.Result) != "credited for "+account {
			t.Fatalf("%s again: want its own recorded result, got %q, %v", account, out.Result, err)
		}
		if r, err := l.Get(e.ctx, account, "reward:o-1"); err != nil || r.Account != account {
			t.Fatalf("%s: want its own record, got %+v, %v", account, r, err)
		}
	}
	if _, err := l.Do(e.ctx, "bad.account", "k", mustNotRun(t)); !errors.Is(err, effect.ErrInvalidKey) {
		t.Fatalf("an invalid account: want ErrInvalidKey, got %v", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("want fn run once per account (2), got %d", n)
	}
}

// A record written before keys were per account (under the key alone)
// still counts once the ledger is upgraded: a done one is not run again,
// for any account; a released one runs, recorded in the account's own
// record from then on.
func TestRecordFromBeforeKeysWerePerAccount(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.ledger(effect.Options{})
	kv, err := e.js.KeyValue(e.ctx, names.BucketEffects)
	if err != nil {
		t.Fatal(err)
	}
	old := func(key string, st effect.Status, result string) {
		sum := sha256.Sum256([]byte(key))
		b, _ := json.Marshal(effect.Record{Key: key, Status: st, Runs: 1, Result: []byte(result), CreatedAt: time.Now(), UpdatedAt: time.Now()})
		if _, err := kv.Put(e.ctx, base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]), b); err != nil {
			t.Fatal(err)
		}
	}
	old("reward:o-7", effect.StatusDone, "credited before")
	old("reward:o-8", effect.StatusReleased, "")
	out, err := l.Do(e.ctx, "acme", "reward:o-7", mustNotRun(t))
	if err != nil || out.Applied || string(out.Result) != "credited before" {
		t.Fatalf("a done record from before: want not run again, its result; got %+v, %v", out, err)
	}
	var runs atomic.Int32
	if out, err := l.Do(e.ctx, "acme", "reward:o-8", returns(&runs, "credited now")); err != nil || !out.Applied {
		t.Fatalf("a released record from before: want run, got %+v, %v", out, err)
	}
	r, err := kv.Get(e.ctx, effect.StorageKey("acme", "reward:o-8"))
	if err != nil {
		t.Fatalf("the account's own record: %v", err)
	}
	var rec effect.Record
	if err := json.Unmarshal(r.Value(), &rec); err != nil || rec.Status != effect.StatusDone || rec.Account != "acme" || rec.Runs != 2 {
		t.Fatalf("the account's own record: want done for acme after 2 runs, got %s (%v)", r.Value(), err)
	}
}
