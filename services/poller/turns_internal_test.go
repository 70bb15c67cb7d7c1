package poller

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
)

func timerOf(account string, kept time.Time) fired {
	return fired{env: event.Envelope{Account: account}, kept: kept}
}

// The workers take the accounts in turn, whatever order their timers
// came in, and an account runs at most its share (3 of 4 workers) until
// one of its timers is done.
func TestTurnsTakeAccountsInTurn(t *testing.T) {
	tu := newTurns(4)
	now := time.Now()
	for _, a := range []string{"a", "a", "a", "a", "a", "b", "b", "c"} {
		if err := tu.add(timerOf(a, now)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for range 6 {
		f, ok := tu.next()
		if !ok {
			t.Fatal("turns closed")
		}
		got = append(got, f.env.Account)
	}
	if s := strings.Join(got, ""); s != "abcaba" {
		t.Fatalf("want the accounts in turn, a at most 3 at once (abcaba), got %s", s)
	}
	if len(tu.ready) != 0 {
		t.Fatalf("want a (3 running, its share) to have no turn until one is done, got turns %v", tu.ready)
	}
	tu.done(timerOf("a", time.Now()))
	if f, ok := tu.next(); !ok || f.env.Account != "a" {
		t.Fatalf("want a's turn once one of its timers is done, got %q", f.env.Account)
	}
	for _, a := range []string{"a", "a", "a", "b", "b", "c"} {
		tu.done(timerOf(a, time.Now()))
	}
	if len(tu.lines) != 1 || len(tu.lines["a"].waiting) != 1 {
		t.Fatalf("want only a's last timer left, got %d lines", len(tu.lines))
	}
}

// An account holds at most 8 timers per worker on a replica, waiting or
// running; the others are not crowded by it.
func TestTurnsHoldAnAccountsTimersUpToItsShare(t *testing.T) {
	tu := newTurns(2)
	now := time.Now()
	for i := range 16 {
		if err := tu.add(timerOf("a", now)); err != nil {
			t.Fatalf("timer %d: %v", i, err)
		}
	}
	if err := tu.add(timerOf("a", now)); !errors.Is(err, errCrowded) {
		t.Fatalf("want a's 17th timer crowded, got %v", err)
	}
	if f, _ := tu.next(); f.env.Account != "a" {
		t.Fatal("want a's first timer")
	}
	if err := tu.add(timerOf("a", now)); !errors.Is(err, errCrowded) {
		t.Fatalf("want a running timer still held, got %v", err)
	}
	if err := tu.add(timerOf("b", now)); err != nil {
		t.Fatalf("want b's timer taken beside a's, got %v", err)
	}
	tu.done(timerOf("a", time.Now()))
	if err := tu.add(timerOf("a", now)); err != nil {
		t.Fatalf("want a's timer taken once one is done, got %v", err)
	}
}

// A crowd's timers come back at most hold (16 at 2 workers) an interval,
// each behind those put off before it, however many there are; once
// the crowd has come back, a timer put off again comes back an interval
// on.
func TestTurnsBringACrowdBackAtHoldAnInterval(t *testing.T) {
	tu := newTurns(2)
	now := time.Now()
	for range 16 {
		if err := tu.add(timerOf("a", now)); err != nil {
			t.Fatal(err)
		}
	}
	back := map[time.Duration]int{}
	for i := range 40 {
		if err := tu.add(timerOf("a", now)); !errors.Is(err, errCrowded) {
			t.Fatalf("want a crowded, got %v", err)
		}
		// Put off a millisecond apart, as they come: each interval
		// counted from the first of its timers.
		earliest := now.Add(time.Second + time.Duration(i)*time.Millisecond)
		at := tu.backAt("a", earliest, time.Second)
		if at.Before(earliest) {
			t.Fatalf("timer %d back at %s, before its earliest %s", i, at.Sub(now), earliest.Sub(now))
		}
		back[at.Sub(now).Truncate(time.Second)]++
	}
	if want := map[time.Duration]int{time.Second: 16, 2 * time.Second: 16, 3 * time.Second: 8}; !maps.Equal(back, want) {
		t.Fatalf("want a's 40 put-off timers back 16 an interval, got %v", back)
	}
	if at := tu.backAt("a", now.Add(5*time.Second), time.Second); !at.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("want a timer put off once the crowd is back to come back an interval on, got %s", at.Sub(now))
	}
	if at := tu.backAt("b", now.Add(time.Second), time.Second); !at.Equal(now.Add(time.Second)) {
		t.Fatalf("want an account with no crowd's timer back an interval on, got %s", at.Sub(now))
	}
}

// Held timers, waiting or running, are kept alive once each time they
// have been held long enough; a timer done is no longer held.
func TestTurnsKeepHeldTimers(t *testing.T) {
	tu := newTurns(1)
	old, now := time.Now().Add(-time.Minute), time.Now()
	for _, f := range []fired{timerOf("a", old), timerOf("a", old), timerOf("b", now)} {
		if err := tu.add(f); err != nil {
			t.Fatal(err)
		}
	}
	running, ok := tu.next() // a's first runs
	if !ok {
		t.Fatal("turns closed")
	}
	if n := len(tu.stale(now.Add(-time.Second))); n != 2 {
		t.Fatalf("want a's running and waiting timers kept alive, got %d", n)
	}
	if n := len(tu.stale(now.Add(-time.Second))); n != 0 {
		t.Fatalf("want none kept again so soon, got %d", n)
	}
	tu.done(running)
	if n := len(tu.stale(now.Add(time.Minute))); n != 2 {
		t.Fatalf("want a's waiting timer and b's held once a's first is done, got %d", n)
	}
}

// Closed, turns give the waiting timers back and take no more, and the
// workers' waits end.
func TestTurnsClose(t *testing.T) {
	tu := newTurns(1)
	for _, a := range []string{"a", "a", "b"} {
		if err := tu.add(timerOf(a, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := tu.next(); !ok {
		t.Fatal("turns closed")
	}
	if n := len(tu.close()); n != 2 {
		t.Fatalf("want the 2 waiting timers given back, got %d", n)
	}
	if _, ok := tu.next(); ok {
		t.Fatal("want no turn once closed")
	}
	if err := tu.add(timerOf("a", time.Now())); !errors.Is(err, errStopping) {
		t.Fatalf("want errStopping once closed, got %v", err)
	}
	tu.done(timerOf("a", time.Now()))
}
