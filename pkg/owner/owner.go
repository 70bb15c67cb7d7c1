package owner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/store"
)

// Defaults of Options.
const (
	DefaultHeartbeat = time.Second
	// expiryBeats is how many heartbeats a replica may miss before the
	// others take it for dead.
	expiryBeats = 3
)

// forgetAfter is how many Expiries a dead replica's heartbeat stays in
// the bucket.
const forgetAfter = 20

// Key prefixes in the bucket: a member's heartbeat, a guest's, an
// account's lease.
const (
	memberPrefix = "m."
	guestPrefix  = "g."
	leasePrefix  = "a."
)

// Options configure a replica's membership.
type Options struct {
	// Instance names this replica; characters other than [A-Za-z0-9_-]
	// become '_'. Required.
	Instance string
	// Heartbeat is how often the replica says it is alive. Defaults to 1s.
	Heartbeat time.Duration
	// Expiry is how long a replica may go unheard before the others take
	// it for dead and its accounts move. Defaults to 3 heartbeats.
	Expiry time.Duration
	// OnChange is called, from one goroutine and never concurrently, after
	// the live replicas or a lease changed, with what changed: the caller
	// then starts and stops what it owns. Calls are coalesced: one call
	// may cover several changes.
	OnChange func(Change)
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Prefix is the installation's subject prefix, which its bucket names
	// carry (config prefix). Defaults to names.DefaultPrefix.
	Prefix string
	// Linger is how long a replica taken for dead may still have calls in
	// flight: those it began before it knew (it stops beginning them once
	// it is no longer Current), bounded by their timeout. Until it has
	// been unheard for Expiry + Linger, its leases are not taken (Acquire)
	// and its slots of shared limits still count (Counted), so that a
	// replica cut off from NATS, whose calls go on at the provider, is not
	// called beside. The longest call's timeout, read when needed (a
	// reload may change it); nil takes the dead at once.
	Linger func() time.Duration
	// Guest joins a replica that holds no account (a poller, whose polls
	// take slots of the targets' concurrency beside the dispatchers'
	// calls): every replica hears it (Present), none assigns it an
	// account (Live, Assigned), and it takes no lease. Its heartbeat has
	// a key of its own (g.<instance>), so that its NATS user may write
	// that one and no member's heartbeat or lease.
	Guest bool
}

// Change is what changed since the last OnChange.
type Change struct {
	// Replicas: the live replicas changed, so any account's assignment
	// may have moved.
	Replicas bool
	// Leases are the accounts whose lease changed holder.
	Leases []string
}

// Group is a replica's view of the live replicas and the account leases.
type Group struct {
	o      Options
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	kvs    jetstream.Stream // kv's stream: a lease's last message, its delete marker once given back
	nc     *nats.Conn
	status chan nats.Status // the connection's reconnects: the watch is made again
	self   string
	log    zerolog.Logger

	mu     sync.Mutex
	seen   map[string]heard // replica → its last heartbeat heard, guests' too
	cut    bool             // this replica's last heartbeat failed: it hears nobody
	sent   time.Time        // when the last heartbeat that got through was sent
	lapses uint64           // how often it stopped being Current and became so again
	since  time.Time        // when this replica's heartbeats got through again, or it was current again
	// fence is the revision of the first heartbeat that got through after
	// a lapse, and applied the latest revision the watch applied: until
	// the watch reaches the fence, what it told of the leases may be what
	// they were before the lapse (Current).
	fence, applied uint64
	fenced         time.Time        // when the fence was set, or the watch last made again to reach it
	live           []string         // the live members, sorted, self included unless a guest
	present        []string         // the live members and guests, sorted, self included
	leases         map[string]lease // account → its holder as last known
	// lingering are the accounts whose lease a dead replica holds while
	// its calls may still run (Linger), and when they may be taken: each
	// is then reported as changed, for the caller to Acquire it again.
	lingering map[string]time.Time
	// taking are the accounts whose lease this replica was writing as
	// its own, from another holder, with the since of that takeover: a
	// write whose answer was lost is found done by the next Acquire,
	// which must say since all the same (Acquire).
	taking map[string]time.Time
	// pending is what changed since the last OnChange. With many accounts
	// a caller cannot look at every one on each lease change: the leases
	// of new accounts change thousands of times a second.
	pending Change

	changed chan struct{}
	stop    context.CancelFunc
	done    sync.WaitGroup
	left    bool
}

// Join puts this replica's first heartbeat, reads the others' and the
// leases, and keeps both current until Leave. The bucket
// (names.BucketOwners) must exist: streams.Apply creates it.
func Join(ctx context.Context, js jetstream.JetStream, o Options) (*Group, error) {
	if o.Instance == "" {
		return nil, errors.New("owner: Instance is required")
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Expiry <= 0 {
		o.Expiry = expiryBeats * o.Heartbeat
	}
	if o.Linger == nil {
		o.Linger = func() time.Duration { return 0 }
	}
	kv, err := js.KeyValue(ctx, names.NewSubjects(o.Prefix).Bucket(names.BucketOwners))
	if err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	kvs, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = *o.Logger
	}
	g := &Group{o: o, js: js, kv: kv, kvs: kvs, nc: js.Conn(), self: token(o.Instance), log: log,
		seen: map[string]heard{}, leases: map[string]lease{}, lingering: map[string]time.Time{}, taking: map[string]time.Time{}, changed: make(chan struct{}, 1), sent: time.Now()}
	if _, err := g.beat(ctx); err != nil {
		return nil, fmt.Errorf("owner: heartbeat: %w", err)
	}
	// The watch outlives ctx: a service's start context is its signal
	// context, which ends when a stop begins, and a draining replica must
	// keep heartbeating until it leaves.
	w, err := kv.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("owner: watch: %w", err)
	}
	// The initial values: a heartbeat is dated by the server's stamp, so a
	// replica killed long ago is dead from the start.
	for e := range w.Updates() {
		if e == nil {
			break
		}
		g.apply(e, e.Created())
	}
	g.mu.Lock()
	g.seen[g.self] = heard{at: time.Now(), guest: o.Guest}
	g.refreshLocked(time.Now())
	g.mu.Unlock()
	g.status = g.nc.StatusChanged(nats.CONNECTED)
	runCtx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	g.done.Add(2)
	go g.loop(runCtx, w)
	go g.notify()
	return g, nil
}

// Self is this replica's name in the bucket.
func (g *Group) Self() string { return g.self }

// Live returns the live members, sorted: the replicas accounts are
// assigned to.
func (g *Group) Live() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.live)
}

// Present returns the live replicas, members and guests, sorted: those
// that take turns for a shared limit's slots (pkg/quota's Options.Live).
func (g *Group) Present() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.present)
}

// Counted returns the replicas whose slots of a shared limit count
// (pkg/quota's Options.Counted), sorted: the Present ones, and those
// taken for dead less than Linger ago, whose calls may still run.
//
// A replica whose last heartbeat failed, or that is not current (it
// stalled: a SIGSTOP, a paused VM), counts every replica it knows of: it
// cannot tell who is alive, having heard nobody meanwhile, and counting
// too many only holds calls back, while a slot forgotten is one called
// beside.
func (g *Group) Counted() []string {
	linger := g.o.Linger()
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	blind := g.cut || !g.currentLocked(now)
	if linger <= 0 && !blind {
		return slices.Clone(g.present)
	}
	counted := make([]string, 0, len(g.seen))
	for m, h := range g.seen {
		if m == g.self || blind || now.Sub(g.heardLocked(h)) < g.o.Expiry+linger {
			counted = append(counted, m)
		}
	}
	slices.Sort(counted)
	return counted
}

// heardLocked is when h was heard, at the earliest when this replica's own
// heartbeats got through again, or it was current again (since): cut off
// or stalled, it heard nobody.
func (g *Group) heardLocked(h heard) time.Time {
	if h.at.Before(g.since) {
		return g.since
	}
	return h.at
}

// Assigned reports whether account belongs to this replica among the live
// ones (rendezvous hashing: the replica with the highest score wins).
func (g *Group) Assigned(account string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Assign(g.live, account) == g.self
}

// Holder returns the replica holding account's lease ("" when free).
func (g *Group) Holder(account string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leases[account].holder
}

// Current reports whether no other replica can have taken this one for
// dead yet: its last heartbeat that got through was sent less than an
// Expiry ago, less half a heartbeat for the margin. It is dated from the
// sending, not the answer, so a replica stopped for longer than Expiry
// (SIGSTOP, a long pause) knows on waking that its leases may be gone
// before it hears so.
//
// After a lapse it is Current again only once its watch has caught up
// with the bucket as it was when its heartbeats got through again: the
// leases taken meanwhile (another replica took this one for dead) reach
// it through the watch, and until they do, Holds would answer from
// before the lapse, and its tails would read and call beside the new
// owner's.
func (g *Group) Current() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.currentLocked(time.Now()) && g.applied >= g.fence
}

func (g *Group) currentLocked(now time.Time) bool {
	return now.Sub(g.sent) < g.o.Expiry-g.o.Heartbeat/2
}

// Lapses counts the times this replica stopped being Current and became
// so again (a stall, heartbeats that did not get through). Being current
// again says nothing of the leases meanwhile: another replica may have
// taken them, and this one hears so only later. So a step begun under
// one count, a call that waited for its rate through a SIGSTOP, must not
// act under another (CurrentSince).
func (g *Group) Lapses() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lapses
}

// CurrentSince reports whether this replica is Current and has been
// since Lapses read lapses.
func (g *Group) CurrentSince(lapses uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.currentLocked(time.Now()) && g.applied >= g.fence && g.lapses == lapses
}

// Holds reports whether this replica holds account's lease.
func (g *Group) Holds(account string) bool { return g.Holder(account) == g.self }

// Acquire takes account's lease when it is free, already this replica's,
// or held by a replica that is no longer alive and has been unheard for
// Expiry + Linger. ok is false when a live replica holds it (it gives it
// back once its last call returned), when a dead one's calls may still
// run (the account is reported changed once they cannot: OnChange), or
// when another replica took it first.
//
// since is how late another replica may have called for the account,
// for the new holder's pace: the time its holder gave the lease back
// (its delete marker's: its calls had returned), or now when it is taken
// from a dead replica; the zero time when nobody held it before, or this
// replica gave it back itself and nobody held it since (its own pace
// knows). The lease is written conditional on the message since is read
// from, so nobody can hold it in between.
func (g *Group) Acquire(ctx context.Context, account string) (ok bool, since time.Time, err error) {
	if g.o.Guest {
		return false, time.Time{}, errors.New("owner: a guest holds no account")
	}
	key := leasePrefix + account
	m, err := g.kvs.GetLastMsgForSubject(ctx, g.leaseSubject(key))
	var rev uint64
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Not kv.Create, which takes a lease given back meanwhile too.
		rev, err = g.kv.Update(ctx, key, []byte(g.self), 0)
	case err != nil:
		return false, time.Time{}, err
	case m.Header.Get(kvOperation) != "":
		if m.Header.Get(gaveBackHeader) != g.self {
			since = m.Time
		}
		rev, err = g.update(ctx, account, since, m.Sequence)
	default:
		holder := string(m.Data)
		if holder == g.self {
			rev = m.Sequence
			g.mu.Lock()
			since = g.taking[account] // a takeover of ours whose answer was lost
			delete(g.taking, account)
			g.mu.Unlock()
			break
		}
		if g.isLive(holder) {
			return false, time.Time{}, nil
		}
		alive, last := g.alive(ctx, holder)
		if alive {
			return false, time.Time{}, nil
		}
		if free := last.Add(g.o.Expiry + g.o.Linger()); time.Now().Before(free) {
			g.mu.Lock()
			g.lingering[account] = free
			g.mu.Unlock()
			return false, time.Time{}, nil
		}
		since = time.Now()
		rev, err = g.update(ctx, account, since, m.Sequence)
	}
	if err != nil {
		if isConflict(err) {
			return false, time.Time{}, nil
		}
		return false, time.Time{}, err
	}
	g.learn(account, lease{holder: g.self, rev: rev})
	return true, since, nil
}

// update writes account's lease as this replica's, by compare-and-set on
// last, for a takeover whose since is since: kept in taking until the
// write's answer comes, so that a write stored whose answer was lost
// still says since to the Acquire that finds it done.
func (g *Group) update(ctx context.Context, account string, since time.Time, last uint64) (uint64, error) {
	if !since.IsZero() {
		g.mu.Lock()
		g.taking[account] = since
		g.mu.Unlock()
	}
	rev, err := g.kv.Update(ctx, leasePrefix+account, []byte(g.self), last)
	if err == nil || isConflict(err) {
		g.mu.Lock()
		delete(g.taking, account)
		g.mu.Unlock()
	}
	return rev, err
}

// A lease's delete marker: the KV API's operation header, and who gave
// the lease back (its holder), for the next Acquire's since.
const (
	kvOperation    = "KV-Operation"
	gaveBackHeader = "Tenaz-Gave-Back"
)

func (g *Group) leaseSubject(key string) string { return "$KV." + g.kv.Bucket() + "." + key }

// giveBack deletes key's lease if its last revision is rev, with a
// marker that names this replica.
func (g *Group) giveBack(ctx context.Context, key string, rev uint64) error {
	m := nats.NewMsg(g.leaseSubject(key))
	m.Header.Set(kvOperation, "DEL")
	m.Header.Set(gaveBackHeader, g.self)
	_, err := g.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	return err
}

// Release gives account's lease back if this replica holds it.
func (g *Group) Release(ctx context.Context, account string) error {
	key := leasePrefix + account
	g.mu.Lock()
	known, ok := g.leases[account]
	g.mu.Unlock()
	if ok && known.holder == g.self {
		// One round trip while the lease is still the revision this
		// replica wrote or last heard (a replica stopping gives back every
		// lease it holds); a conflict means it changed: read it.
		err := g.giveBack(ctx, key, known.rev)
		if err == nil {
			g.learn(account, lease{rev: known.rev + 1})
			return nil
		}
		if !isConflict(err) {
			return err
		}
	}
	e, err := g.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// Given back already (its delete marker is newer than anything
		// known): known so at once, not only once the watch tells.
		if ok {
			g.learn(account, lease{rev: known.rev + 1})
		}
		return nil
	}
	if err != nil {
		return err
	}
	if string(e.Value()) != g.self {
		g.learn(account, lease{holder: string(e.Value()), rev: e.Revision()})
		return nil
	}
	if err := g.giveBack(ctx, key, e.Revision()); err != nil && !isConflict(err) {
		return err
	}
	// The delete marker comes after e: what the watch still brings of e
	// or before it is older.
	g.learn(account, lease{rev: e.Revision() + 1})
	return nil
}

// lease is an account's lease as known: its holder ("" when free) and the
// bucket revision that said so (a lower bound for a release).
type lease struct {
	holder string
	rev    uint64
}

// learn records l unless a newer state of the lease is known already; it
// reports whether the holder changed. The watch may bring an entry after
// this replica's own newer write was recorded.
func (g *Group) learn(account string, l lease) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	before, ok := g.leases[account]
	if ok && l.rev < before.rev {
		return false
	}
	if l.holder == "" {
		delete(g.leases, account)
	} else {
		g.leases[account] = l
	}
	if before.holder == l.holder {
		return false
	}
	g.pending.Leases = append(g.pending.Leases, account)
	return true
}

// Leave stops the heartbeat and removes it, so the others move this
// replica's accounts at once rather than after Expiry. Release the leases
// first. Idempotent.
func (g *Group) Leave(ctx context.Context) {
	g.mu.Lock()
	if g.left {
		g.mu.Unlock()
		return
	}
	g.left = true
	g.mu.Unlock()
	g.stop()
	g.done.Wait()
	if err := g.kv.Delete(ctx, heartbeatKey(g.self, g.o.Guest)); err != nil {
		g.log.Debug().Err(err).Msg("owner: removing the heartbeat")
	}
}

func (g *Group) loop(ctx context.Context, w jetstream.KeyWatcher) {
	defer g.done.Done()
	defer close(g.changed)
	defer func() { _ = w.Stop() }()
	defer g.nc.RemoveStatusListener(g.status)
	t := time.NewTicker(g.o.Heartbeat)
	defer t.Stop()
	replaying := false // the values a new watch starts with: dated by the server's stamp
	rewatch := func(why string) {
		nw, err := g.kv.WatchAll(context.WithoutCancel(ctx))
		if err != nil {
			g.log.Warn().Err(err).Msg("owner: watching again " + why + " failed")
			return
		}
		_ = w.Stop()
		w, replaying = nw, true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.status:
			// After a nats-server restart the watch can stay blind: a
			// replica that joined meanwhile would never be heard.
			rewatch("after a reconnect")
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				replaying = false
				continue
			}
			at := time.Now()
			if replaying {
				at = e.Created()
			}
			if g.apply(e, at) {
				g.signal()
			}
			g.mu.Lock()
			g.applied = max(g.applied, e.Revision())
			g.mu.Unlock()
		case now := <-t.C:
			bctx, cancel := context.WithTimeout(ctx, g.o.Heartbeat)
			rev, err := g.beat(bctx)
			if err == nil {
				g.mu.Lock()
				if !g.currentLocked(now) {
					g.lapses++                   // taken for dead, maybe, until now (Lapses)
					g.since = now                // and it heard nobody meanwhile (heardLocked)
					g.fence, g.fenced = rev, now // nor how the leases went (Current)
				}
				g.sent = now
				// A watch that does not reach the fence within a few
				// heartbeats is blind (one made again after a reconnect
				// failed): made again, it replays the bucket. Otherwise
				// the replica would never be Current again.
				blind := g.applied < g.fence && now.Sub(g.fenced) > 3*g.o.Heartbeat
				if blind {
					g.fenced = now
				}
				g.mu.Unlock()
				if blind {
					rewatch("behind its heartbeat")
				}
				g.confirm(bctx, now)
			}
			cancel()
			if err != nil && ctx.Err() == nil {
				g.log.Warn().Err(err).Msg("owner: heartbeat failed")
			}
			g.mu.Lock()
			if err == nil && g.cut {
				g.since = now
			}
			g.cut = err != nil
			g.seen[g.self] = heard{at: now, guest: g.o.Guest}
			changed := g.refreshLocked(now)
			changed = g.dueLocked(now) || changed
			g.mu.Unlock()
			if changed {
				g.signal()
			}
		}
	}
}

func (g *Group) notify() {
	defer g.done.Done()
	for range g.changed {
		g.mu.Lock()
		c := g.pending
		g.pending = Change{}
		g.mu.Unlock()
		if g.o.OnChange != nil {
			g.o.OnChange(c)
		}
	}
}

func (g *Group) signal() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

func (g *Group) beat(ctx context.Context) (rev uint64, err error) {
	return g.kv.Put(ctx, heartbeatKey(g.self, g.o.Guest), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
}

// heartbeatKey is the key of replica m's heartbeat.
func heartbeatKey(m string, guest bool) string {
	if guest {
		return guestPrefix + m
	}
	return memberPrefix + m
}

// heartbeatOf reads key as a heartbeat's (heartbeatKey): its replica,
// and whether a guest's; ok is false for any other key.
func heartbeatOf(key string) (m string, guest, ok bool) {
	if m, ok := strings.CutPrefix(key, guestPrefix); ok {
		return m, true, true
	}
	m, ok = strings.CutPrefix(key, memberPrefix)
	return m, false, ok
}

// apply takes one bucket entry in, heard at when; it reports whether the
// live replicas or a lease changed.
func (g *Group) apply(e jetstream.KeyValueEntry, at time.Time) bool {
	gone := e.Operation() != jetstream.KeyValuePut
	k := e.Key()
	if m, guest, ok := heartbeatOf(k); ok {
		g.mu.Lock()
		defer g.mu.Unlock()
		if gone {
			delete(g.seen, m)
		} else if h := g.seen[m]; e.Revision() > h.rev {
			g.seen[m] = heard{at: at, rev: e.Revision(), guest: guest}
		}
		return g.refreshLocked(time.Now())
	}
	account, ok := strings.CutPrefix(k, leasePrefix)
	if !ok {
		return false
	}
	l := lease{rev: e.Revision()}
	if !gone {
		l.holder = string(e.Value())
	}
	return g.learn(account, l)
}

// heard is a replica's last heartbeat: when this replica heard it, and its
// revision in the bucket.
type heard struct {
	at    time.Time
	rev   uint64
	guest bool
}

// confirm reads the heartbeat of every replica about to be taken for dead
// from the bucket itself: the watch can fall behind (after a reconnect it
// is blind until its consumer is made again), and a newer heartbeat there
// means the replica lives.
func (g *Group) confirm(ctx context.Context, now time.Time) {
	linger := g.o.Linger()
	g.mu.Lock()
	stale := map[string]bool{} // replica → a guest
	for m, h := range g.seen {
		if m != g.self && now.Sub(h.at) >= g.o.Expiry/2 {
			stale[m] = h.guest
		}
	}
	g.mu.Unlock()
	for m, guest := range stale {
		e, err := g.kv.Get(ctx, heartbeatKey(m, guest))
		var forget uint64 // the revision of a long-dead heartbeat to remove
		g.mu.Lock()
		switch h, ok := g.seen[m]; {
		case !ok:
		case errors.Is(err, jetstream.ErrKeyNotFound):
			delete(g.seen, m)
		case err == nil && e.Revision() > h.rev:
			g.seen[m] = heard{at: now, rev: e.Revision(), guest: guest}
		case err == nil && now.Sub(h.at) > forgetAfter*g.o.Expiry+linger:
			delete(g.seen, m)
			forget = h.rev
		}
		g.mu.Unlock()
		if forget != 0 && !g.o.Guest {
			// Long dead (every restarted pod has a new name): its key
			// goes, unless it came back meanwhile. A member removes it; a
			// guest may write only its own.
			_ = g.kv.Delete(ctx, heartbeatKey(m, guest), jetstream.LastRevision(forget))
		}
	}
}

// alive reads m's heartbeat from the bucket before its lease is taken: a
// heartbeat newer than the last one heard, or stamped by the server within
// Expiry, means m lives though this replica did not hear it (its watch
// fell behind, or m joined while it was blind). m is then heard now.
// Otherwise last is when m was last heard, by this replica or the server
// (zero when neither knows it).
func (g *Group) alive(ctx context.Context, m string) (alive bool, last time.Time) {
	e, err := g.kv.Get(ctx, memberPrefix+m)
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	h, known := g.seen[m]
	if known {
		last = g.heardLocked(h)
	}
	if err != nil {
		return false, last
	}
	if !(known && e.Revision() > h.rev) && now.Sub(e.Created()) >= g.o.Expiry {
		return false, laterOf(last, e.Created())
	}
	g.seen[m] = heard{at: now, rev: e.Revision()}
	if g.refreshLocked(now) {
		g.signal()
	}
	return true, now
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dueLocked reports the accounts whose dead holder's calls can no longer
// run at now as changed (Acquire may take them); it reports whether any
// was.
func (g *Group) dueLocked(now time.Time) bool {
	due := false
	for account, free := range g.lingering {
		if !now.Before(free) {
			delete(g.lingering, account)
			g.pending.Leases = append(g.pending.Leases, account)
			due = true
		}
	}
	return due
}

// refreshLocked recomputes the live replicas at now; it reports a change
// of the live members (a guest's coming or going moves no account).
// A replica that cannot reach NATS hears nobody, and nobody hears it: it
// takes no one for dead until its own heartbeats have got through for an
// Expiry, so an outage of NATS moves no account when it ends.
func (g *Group) refreshLocked(now time.Time) bool {
	if g.cut {
		return false
	}
	live, present := make([]string, 0, len(g.seen)), make([]string, 0, len(g.seen))
	for m, h := range g.seen {
		at := h.at
		if at.Before(g.since) {
			at = g.since
		}
		if m == g.self || now.Sub(at) < g.o.Expiry {
			present = append(present, m)
			if !h.guest {
				live = append(live, m)
			}
		}
	}
	slices.Sort(live)
	slices.Sort(present)
	g.present = present
	if slices.Equal(live, g.live) {
		return false
	}
	g.live = live
	g.pending.Replicas = true
	return true
}

func (g *Group) isLive(m string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := slices.BinarySearch(g.live, m)
	return ok
}

// Assign is account's replica among live: the highest rendezvous score,
// so a replica joining or leaving moves only the accounts it wins or held.
func Assign(live []string, account string) string {
	best, bestScore := "", uint64(0)
	for _, m := range live {
		if s := score(m, account); best == "" || s > bestScore {
			best, bestScore = m, s
		}
	}
	return best
}

func score(member, account string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(account))
	// splitmix64's finalizer: FNV's low bits alone spread similar names badly.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// token makes s one key token of [A-Za-z0-9_-].
func token(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// isConflict reports a compare-and-set that lost (wrong last sequence,
// whichever code the server answers it with: a replicated bucket's is
// not a single server's).
func isConflict(err error) bool { return store.IsWrongSequence(err) }

// Heard lists the replicas whose last heartbeat in the bucket was stored
// less than within ago (by the server's stamp): for a tool that must know
// whether any replica runs. A replica that left removed its heartbeat.
func Heard(ctx context.Context, js jetstream.JetStream, prefix string, within time.Duration) ([]string, error) {
	kv, err := js.KeyValue(ctx, names.NewSubjects(prefix).Bucket(names.BucketOwners))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	keys, err := kv.ListKeysFiltered(ctx, memberPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("owner: listing the replicas: %w", err)
	}
	var heard []string
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			_ = keys.Stop()
			return nil, fmt.Errorf("owner: %w", err)
		}
		if time.Since(e.Created()) < within {
			heard = append(heard, strings.TrimPrefix(k, memberPrefix))
		}
	}
	slices.Sort(heard)
	return heard, nil
}
