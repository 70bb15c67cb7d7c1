package owner_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/streams"
)

const beat = 100 * time.Millisecond

type replica struct {
	g       *owner.Group
	nc      *nats.Conn
	changes atomic.Int64
}

func setup(t *testing.T) *natstest.Server {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return srv
}

// join starts a replica on its own connection, as a separate process has.
func join(t *testing.T, srv *natstest.Server, name string) *replica {
	return joinAs(t, srv, name, false)
}

// joinAs starts a member, or a guest.
func joinAs(t *testing.T, srv *natstest.Server, name string, guest bool) *replica {
	t.Helper()
	return joinWith(t, srv, owner.Options{Instance: name, Guest: guest})
}

// joinWith starts a replica with o, its heartbeat beat, counting its
// changes (o.OnChange is called too).
func joinWith(t *testing.T, srv *natstest.Server, o owner.Options) *replica {
	t.Helper()
	nc, js := srv.Conn(t)
	r := &replica{nc: nc}
	o.Heartbeat = beat
	onChange := o.OnChange
	o.OnChange = func(c owner.Change) {
		r.changes.Add(1)
		if onChange != nil {
			onChange(c)
		}
	}
	g, err := owner.Join(context.Background(), js, o)
	if err != nil {
		t.Fatal(err)
	}
	r.g = g
	t.Cleanup(func() { g.Leave(context.Background()) })
	return r
}

func accounts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("acct-%d", i)
	}
	return out
}

// assignment is who each replica thinks owns each account; it fails unless
// every account has exactly one owner.
func assignment(t *testing.T, rs map[string]*replica, accts []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range accts {
		var owners []string
		for name, r := range rs {
			if r.g.Assigned(a) {
				owners = append(owners, name)
			}
		}
		if len(owners) != 1 {
			t.Fatalf("account %s: want exactly one replica assigned, got %v", a, owners)
		}
		out[a] = owners[0]
	}
	return out
}

func waitLive(t *testing.T, rs map[string]*replica, want []string) {
	t.Helper()
	slices.Sort(want)
	for name, r := range rs {
		natstest.Eventually(t, 5*time.Second, func() bool { return slices.Equal(r.g.Live(), want) },
			"replica %s: want live %v, got %v", name, want, r.g.Live())
	}
}

// Every account has one owner among the replicas; a replica that joins
// takes a share and moves only accounts to itself; one that leaves gives
// its accounts to the others and none of the others' moves.
func TestAssignmentSpreadsAndMovesOnlyWhatItMust(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	rs := map[string]*replica{"d1": join(t, srv, "d1"), "d2": join(t, srv, "d2"), "d3": join(t, srv, "d3")}
	waitLive(t, rs, []string{"d1", "d2", "d3"})
	accts := accounts(300)
	three := assignment(t, rs, accts)
	per := map[string]int{}
	for _, o := range three {
		per[o]++
	}
	for name, n := range per {
		if n < 60 || n > 140 {
			t.Fatalf("want each of 3 replicas to own about 100 of 300 accounts, %s owns %d (%v)", name, n, per)
		}
	}

	rs["d4"] = join(t, srv, "d4")
	waitLive(t, rs, []string{"d1", "d2", "d3", "d4"})
	four := assignment(t, rs, accts)
	moved := 0
	for _, a := range accts {
		if four[a] != three[a] {
			moved++
			if four[a] != "d4" {
				t.Fatalf("account %s moved from %s to %s when d4 joined: only moves to d4 are expected", a, three[a], four[a])
			}
		}
	}
	if moved < 40 || moved > 110 {
		t.Fatalf("want about a quarter of 300 accounts to move to d4, got %d", moved)
	}

	rs["d4"].g.Leave(context.Background())
	delete(rs, "d4")
	waitLive(t, rs, []string{"d1", "d2", "d3"})
	if back := assignment(t, rs, accts); !equalMaps(back, three) {
		t.Fatal("after d4 left, want the assignment of before it joined")
	}
}

// The lease of an account has one holder: a second replica cannot take it
// while the holder lives, takes it once it is released, and takes it from
// a holder that died (its connection closed without leaving).
func TestLeaseHasOneHolder(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	d1, d2 := join(t, srv, "d1"), join(t, srv, "d2")
	rs := map[string]*replica{"d1": d1, "d2": d2}
	waitLive(t, rs, []string{"d1", "d2"})
	ctx := context.Background()

	mustAcquire(t, d1, "acme", true)
	mustAcquire(t, d2, "acme", false)
	mustAcquire(t, d1, "acme", true) // its own: still held
	natstest.Eventually(t, 5*time.Second, func() bool { return d2.g.Holder("acme") == "d1" },
		"d2: want d1 seen as acme's holder, got %q", d2.g.Holder("acme"))

	if err := d1.g.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return d2.g.Holder("acme") == "" },
		"d2: want acme's lease seen free after the release, holder %q", d2.g.Holder("acme"))
	mustAcquire(t, d2, "acme", true)
	mustAcquire(t, d1, "acme", false)

	// d2 dies: its connection goes, its heartbeat stops, its key stays.
	changes := d1.changes.Load()
	d2.nc.Close()
	natstest.Eventually(t, 5*time.Second, func() bool { return slices.Equal(d1.g.Live(), []string{"d1"}) },
		"d1: want d2 dead after its heartbeats stopped, live %v", d1.g.Live())
	// OnChange follows the new live set; it may run a moment after Live
	// has it.
	natstest.Eventually(t, 5*time.Second, func() bool { return d1.changes.Load() != changes },
		"d1: want OnChange called when d2 died")
	if !d1.g.Assigned("acme") {
		t.Fatal("d1: want acme assigned to the last live replica")
	}
	mustAcquire(t, d1, "acme", true)

	// Another replica took the lease (as from a replica it took for dead)
	// and d1 releases before or after it hears so: the new holder keeps it.
	_, js := srv.Conn(t)
	kv, err := js.KeyValue(ctx, names.NewSubjects("").Bucket(names.BucketOwners))
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "a.acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "a.acme", []byte("d3"), e.Revision()); err != nil {
		t.Fatal(err)
	}
	if err := d1.g.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "a.acme"); err != nil || string(e.Value()) != "d3" {
		t.Fatalf("after d1's release of a lease d3 took: want d3's, got %v %v", e, err)
	}
}

// A replica taken for dead may still have calls in flight, begun before
// it stopped being current (cut off from NATS, its calls to the provider
// go on). For Linger after it is taken for dead, its lease is not taken
// and its slots still count (Counted); then the account is reported
// changed, and the lease is taken. With Linger 0 it would be taken as
// soon as the holder is dead.
func TestDeadHoldersLeaseWaitsOutItsCalls(t *testing.T) {
	t.Parallel()
	const linger = 5 * time.Second // long enough that a loaded machine still checks within it
	srv := setup(t)
	var mu sync.Mutex
	var named []time.Time // when acme was named changed
	d1 := joinWith(t, srv, owner.Options{Instance: "d1", Linger: func() time.Duration { return linger }, OnChange: func(c owner.Change) {
		mu.Lock()
		defer mu.Unlock()
		if slices.Contains(c.Leases, "acme") {
			named = append(named, time.Now())
		}
	}})
	d2 := joinWith(t, srv, owner.Options{Instance: "d2", Linger: func() time.Duration { return linger }})
	waitLive(t, map[string]*replica{"d1": d1, "d2": d2}, []string{"d1", "d2"})
	mustAcquire(t, d2, "acme", true)
	natstest.Eventually(t, 5*time.Second, func() bool { return d1.g.Holder("acme") == "d2" }, "d1: want d2 seen as acme's holder")

	d2.nc.Close()
	died := time.Now()
	natstest.Eventually(t, 5*time.Second, func() bool { return slices.Equal(d1.g.Live(), []string{"d1"}) },
		"d1: want d2 dead after its heartbeats stopped, live %v", natstest.Lazy(func() any { return d1.g.Live() }))
	if got := d1.g.Counted(); !slices.Equal(got, []string{"d1", "d2"}) {
		t.Fatalf("d1: want d2's slots counted while its calls may run, counted %v", got)
	}
	mustAcquire(t, d1, "acme", false)
	due := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(named) > 0 && !named[len(named)-1].Before(died.Add(linger))
	}
	natstest.Eventually(t, linger+10*time.Second, due, "d1: want acme named changed once d2's calls can no longer run")
	mustAcquire(t, d1, "acme", true)
	if got := d1.g.Counted(); !slices.Equal(got, []string{"d1"}) {
		t.Fatalf("d1: want d2 no longer counted, counted %v", got)
	}
}

// A guest (a poller) is present to every replica, members and guests,
// from its heartbeat under its own key, and gone when it dies; it is
// never assigned an account nor takes a lease, and its coming and going
// moves no account (no OnChange of the members').
func TestGuestIsPresentAndHoldsNothing(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	d1 := join(t, srv, "d1")
	p1 := joinAs(t, srv, "p1", true)
	p2 := joinAs(t, srv, "p2", true)
	for _, r := range []*replica{d1, p1, p2} {
		natstest.Eventually(t, 5*time.Second, func() bool { return slices.Equal(r.g.Present(), []string{"d1", "p1", "p2"}) },
			"%s: want d1, p1 and p2 present, got %v", r.g.Self(), r.g.Present())
		if live := r.g.Live(); !slices.Equal(live, []string{"d1"}) {
			t.Fatalf("%s: want only the member d1 live for accounts, got %v", r.g.Self(), live)
		}
	}
	for _, a := range accounts(50) {
		if p1.g.Assigned(a) || !d1.g.Assigned(a) {
			t.Fatalf("want every account assigned to the member d1, not the guest p1: %s", a)
		}
	}
	if ok, _, err := p1.g.Acquire(context.Background(), "acme"); ok || err == nil {
		t.Fatalf("want a guest refused a lease, got %v %v", ok, err)
	}
	_, js := srv.Conn(t)
	kv, err := js.KeyValue(context.Background(), names.NewSubjects("").Bucket(names.BucketOwners))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(context.Background(), "g.p1"); err != nil {
		t.Fatalf("want the guest's heartbeat under g.p1: %v", err)
	}
	if _, err := kv.Get(context.Background(), "m.p1"); err == nil {
		t.Fatal("want no member heartbeat of the guest p1")
	}

	changes := d1.changes.Load()
	p2.nc.Close()
	natstest.Eventually(t, 5*time.Second, func() bool { return slices.Equal(d1.g.Present(), []string{"d1", "p1"}) },
		"d1: want p2 gone once its heartbeats stopped, present %v", d1.g.Present())
	p1.g.Leave(context.Background())
	natstest.Eventually(t, 5*time.Second, func() bool { return slices.Equal(d1.g.Present(), []string{"d1"}) },
		"d1: want p1 gone once it left, present %v", d1.g.Present())
	if n := d1.changes.Load(); n != changes {
		t.Fatalf("want no OnChange for guests coming and going, got %d", n-changes)
	}
}

// Of replicas racing for a free lease, exactly one wins.
func TestLeaseRaceHasOneWinner(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	rs := []*replica{join(t, srv, "d1"), join(t, srv, "d2"), join(t, srv, "d3"), join(t, srv, "d4")}
	for round := range 20 {
		acct := fmt.Sprintf("race-%d", round)
		var won atomic.Int64
		done := make(chan struct{})
		for _, r := range rs {
			go func() {
				defer func() { done <- struct{}{} }()
				ok, _, err := r.g.Acquire(context.Background(), acct)
				if err != nil {
					t.Error(err)
				}
				if ok {
					won.Add(1)
				}
			}()
		}
		for range rs {
			<-done
		}
		if won.Load() != 1 {
			t.Fatalf("round %d: want exactly one replica to win the free lease, %d did", round, won.Load())
		}
	}
}

func mustAcquire(t *testing.T, r *replica, acct string, want bool) {
	t.Helper()
	ok, _, err := r.g.Acquire(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	if ok != want {
		t.Fatalf("%s: Acquire(%s) = %v, want %v (holder %q)", r.g.Self(), acct, ok, want, r.g.Holder(acct))
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// An outage of NATS longer than Expiry moves no account: while a replica's
// heartbeats fail it takes nobody for dead, and after the outage it waits
// an Expiry of its own heartbeats before it does.
func TestOutageOfNATSMovesNothing(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	d1, d2 := join(t, srv, "d1"), join(t, srv, "d2")
	rs := map[string]*replica{"d1": d1, "d2": d2}
	waitLive(t, rs, []string{"d1", "d2"})
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	var shrank atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(beat / 4):
			}
			for _, r := range rs {
				if len(r.g.Live()) != 2 {
					shrank.Store(true)
				}
			}
		}
	}()
	srv.Stop()
	<-time.After(10 * beat) // the outage itself (over 3 Expiries), not a wait for an outcome
	natstest.Start(t, natstest.StoreDir(srv.Dir), natstest.Listen(u.Host))
	for _, r := range rs {
		natstest.Eventually(t, 10*time.Second, func() bool { return r.nc.IsConnected() }, "%s: want reconnected", r.g.Self())
	}
	<-time.After(10 * beat) // past the grace after the outage: a wrong death would show now
	close(stop)
	<-watched
	if shrank.Load() {
		t.Fatal("a replica took the other for dead during or after a NATS outage")
	}
	waitLive(t, rs, []string{"d1", "d2"})
}

// A replica whose Join context ends (the signal context of a service that
// got SIGTERM and drains) keeps heartbeating until Leave: the others do
// not take its accounts while its drain calls are in flight.
func TestJoinContextEndingKeepsTheHeartbeat(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithCancel(context.Background())
	g, err := owner.Join(ctx, js, owner.Options{Instance: "d1", Heartbeat: beat})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Leave(context.Background())
	d2 := join(t, srv, "d2")
	waitLive(t, map[string]*replica{"d2": d2}, []string{"d1", "d2"})
	cancel()
	tick := time.NewTicker(beat / 2)
	defer tick.Stop()
	for range 20 { // 10 heartbeats, over 3 Expiries: a silent d1 would be dead by then
		<-tick.C
		if !slices.Contains(d2.g.Live(), "d1") {
			t.Fatalf("d2 took d1 for dead after d1's Join context ended: live %v", d2.g.Live())
		}
	}
}

// A replica that joins while another's watch is blind after a nats-server
// restart is still seen by it: the other never takes its leases, and
// learns it is alive.
func TestReplicaJoiningAfterServerRestartIsSeen(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	d1 := join(t, srv, "d1")
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	srv2 := natstest.Start(t, natstest.StoreDir(srv.Dir), natstest.Listen(u.Host))
	natstest.Eventually(t, 10*time.Second, func() bool { return d1.nc.IsConnected() }, "d1: want reconnected")
	d3 := join(t, srv2, "d3")
	mustAcquire(t, d3, "acme", true)
	tick := time.NewTicker(beat)
	defer tick.Stop()
	for range 40 { // over 10 Expiries
		<-tick.C
		if ok, _, err := d1.g.Acquire(context.Background(), "acme"); err == nil && ok {
			t.Fatalf("d1 took acme's lease from the live d3 (d1 sees live %v)", d1.g.Live())
		}
	}
	waitLive(t, map[string]*replica{"d1": d1}, []string{"d1", "d3"})
}

// OnChange names the accounts whose lease changed holder, so that a
// replica with many accounts looks at those only, and says when the live
// replicas changed, when every account's assignment may have moved.
func TestChangeNamesTheLeasesThatMoved(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	var mu sync.Mutex
	leases, replicas := map[string]int{}, 0
	_, js := srv.Conn(t)
	watcher, err := owner.Join(context.Background(), js, owner.Options{Instance: "w", Heartbeat: beat,
		OnChange: func(c owner.Change) {
			mu.Lock()
			defer mu.Unlock()
			for _, a := range c.Leases {
				leases[a]++
			}
			if c.Replicas {
				replicas++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { watcher.Leave(context.Background()) })
	seen := func(f func() bool) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return f() }
	}

	d1 := join(t, srv, "d1")
	natstest.Eventually(t, 5*time.Second, seen(func() bool { return replicas > 0 }), "want a change of the live replicas when d1 joined")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, _, err := d1.g.Acquire(ctx, "acct-a"); err != nil || !ok {
		t.Fatalf("d1 acquiring acct-a: ok %v, err %v", ok, err)
	}
	natstest.Eventually(t, 5*time.Second, seen(func() bool { return leases["acct-a"] == 1 }), "want acct-a's lease named once when d1 took it, got %v", leases)
	if err := d1.g.Release(ctx, "acct-a"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, seen(func() bool { return leases["acct-a"] == 2 }), "want acct-a's lease named again when d1 gave it back, got %v", leases)
	mu.Lock()
	defer mu.Unlock()
	if len(leases) != 1 {
		t.Fatalf("want only acct-a's lease named, got %v", leases)
	}
}

// A replica whose heartbeats stop getting through stops being current
// within an Expiry less half a heartbeat, before any other could take it
// for dead, and is current again once one gets through: a dispatcher
// claims nothing meanwhile. Heard lists the replicas by their heartbeats
// in the bucket, and forgets one that left.
func TestCurrentEndsBeforeOthersMayTakeOver(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	d1, d2 := join(t, srv, "d1"), join(t, srv, "d2")
	if !d1.g.Current() {
		t.Fatal("a replica that just joined: want it current")
	}
	_, js := srv.Conn(t)
	heard, err := owner.Heard(context.Background(), js, "", time.Minute)
	if err != nil || !slices.Equal(heard, []string{"d1", "d2"}) {
		t.Fatalf("Heard: want d1 and d2, got %v %v", heard, err)
	}
	d2.g.Leave(context.Background())
	if heard, err = owner.Heard(context.Background(), js, "", time.Minute); err != nil || !slices.Equal(heard, []string{"d1"}) {
		t.Fatalf("Heard after d2 left: want d1 alone, got %v %v", heard, err)
	}

	// A heartbeat of a second: the margin (half a heartbeat) is then
	// wide against a loaded host's scheduling.
	nc, js3 := srv.Conn(t)
	defer nc.Close()
	d3, err := owner.Join(context.Background(), js3, owner.Options{Instance: "d3", Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Leave(context.Background())
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	cut := time.Now()
	natstest.Eventually(t, 10*time.Second, func() bool { return !d3.Current() }, "d3: want it no longer current once its heartbeats fail")
	if expiry := 3 * time.Second; time.Since(cut) >= expiry {
		t.Fatalf("d3 was current %s after its heartbeats stopped, past the %s after which others may take it for dead", time.Since(cut), expiry)
	}
	natstest.Start(t, natstest.StoreDir(srv.Dir), natstest.Listen(u.Host))
	natstest.Eventually(t, 10*time.Second, d3.Current, "d3: want it current again once a heartbeat gets through")
	natstest.Eventually(t, 10*time.Second, d1.g.Current, "d1: want it current again too")
}

// Acquire's since: nothing for a lease nobody held, the time its holder
// gave it back for the next replica to take it, nothing for a replica
// that gave it back itself and takes it again with nobody holding it in
// between. Whether somebody did is read from the lease's last message,
// not from what the watch has told: b taking and giving the lease back
// just before a takes it again makes a's since b's give-back, however
// far a's watch lags.
func TestAcquireSaysSinceWhenOthersMayHaveCalled(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	a, b := join(t, srv, "a"), join(t, srv, "b")
	ctx := t.Context()
	const acct = "acct-held"
	take := func(r *replica) time.Time {
		t.Helper()
		ok, since, err := r.g.Acquire(ctx, acct)
		if !ok || err != nil {
			t.Fatalf("%s: Acquire: %v, %v", r.g.Self(), ok, err)
		}
		return since
	}
	give := func(r *replica) time.Time {
		t.Helper()
		if err := r.g.Release(ctx, acct); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	if since := take(a); !since.IsZero() {
		t.Fatalf("a lease nobody held: want no since, got %v", since)
	}
	give(a)
	if since := take(a); !since.IsZero() {
		t.Fatalf("a lease a gave back and takes again: want no since, got %v", since)
	}
	released := give(a)
	natstest.Eventually(t, 5*time.Second, func() bool { return b.g.Holder(acct) == "" }, "want b to hear that a gave the lease back")
	if since := take(b); since.IsZero() || since.After(released) || released.Sub(since) > time.Second {
		t.Fatalf("a lease a gave back at %v: want since then, got %v", released, since)
	}
	give(b)
	if since := take(b); !since.IsZero() {
		t.Fatalf("a lease b gave back and takes again: want no since, got %v", since)
	}
	give(b)
	for round := range 100 {
		if since := take(a); since.IsZero() {
			t.Fatalf("round %d: a takes the lease a gave back before b took it: want since b's give-back, got none", round)
		}
		give(a)
		natstest.Eventually(t, 5*time.Second, func() bool { return b.g.Holder(acct) == "" }, "want b to hear that a gave the lease back")
		take(b)
		released := give(b)
		since := take(a)
		if since.IsZero() || since.After(released) {
			t.Fatalf("round %d: b gave the lease back at %v just before a took it: want since then, got %v", round, released, since)
		}
		give(a)
		take(b)
		give(b)
	}
}
