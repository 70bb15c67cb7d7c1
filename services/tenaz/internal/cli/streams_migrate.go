package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// StreamsMigrateCmd is `tenaz streams migrate`.
type StreamsMigrateCmd struct {
	Partitions int  `required:"" help:"The partition count to move the store to (1 to 64)."`
	DryRun     bool `name:"dry-run" help:"Print what would move from each partition to each other, and change nothing (the services may be running)."`
}

// MigrationReport is the JSON of `streams migrate`.
type MigrationReport struct {
	Prefix  string `json:"prefix"`
	From    int    `json:"from"`
	To      int    `json:"to"`
	DryRun  bool   `json:"dry_run,omitempty"`
	Resumed bool   `json:"resumed,omitempty"`
	// Busy says what would refuse the run (a dry run only: the real run
	// fails with it).
	Busy      string          `json:"busy,omitempty"`
	Moves     []PartitionMove `json:"moves"`
	Consumers []string        `json:"consumers_deleted,omitempty"`
	Dropped   []string        `json:"dropped,omitempty"`
	Seconds   float64         `json:"seconds"`
}

// PartitionMove is what moves (or would) from one partition to another.
type PartitionMove struct {
	From      int `json:"from"`
	To        int `json:"to"`
	Records   int `json:"records"`
	Messages  int `json:"messages"`
	Schedules int `json:"schedules"`
}

// Run moves the store.
func (c *StreamsMigrateCmd) Run(cl *Connection, env *Env) error {
	if c.Partitions < 1 || c.Partitions > streams.MaxPartitions {
		return failf(ErrUsage, "--partitions %d: want 1 to %d", c.Partitions, streams.MaxPartitions)
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	js, err := jetStream(s.nc, s.nctx)
	if err != nil {
		return err
	}
	var progress io.Writer = env.Stderr
	if cl.JSON {
		progress = io.Discard
	}
	m := &migration{js: js, prefix: cl.Prefix, to: c.Partitions, dry: c.DryRun, log: progress, now: time.Now}
	rep, err := m.run(context.Background())
	if err != nil {
		return err
	}
	return s.emit(rep, func(w io.Writer) { printMigration(w, rep) })
}

// migration moves a store of m.from partitions to m.to: every state record,
// every message waiting in EVENTS and every pending schedule of an account
// whose partition changes goes to its new partition, copied first and then
// deleted from the old, so that a run stopped anywhere loses nothing and a
// run again finishes it without a duplicate. EVENTS' metadata marks the
// store as moving (streams.MetaMigrateTo) from the first write to the
// switch, and no service starts on a store so marked.
type migration struct {
	js     jetstream.JetStream
	prefix string
	to     int
	dry    bool
	log    io.Writer
	now    func() time.Time

	from int
	// byAccount: the store's records are in their account's partition (a
	// store from before), to be moved to their event id's even when the
	// count stays.
	byAccount bool
	id        string // the migration's, in EVENTS' metadata and on its copies
	resumed   bool   // begun by an earlier run
	old       names.Subjects
	new       names.Subjects
	events    []jetstream.Stream // EVENTS of partition p, over both layouts
	state     []jetstream.Stream // KV_<state bucket> of partition p
	// copies maps a message copied from partition p (at its sequence
	// there) to its copy's sequence, by (p, new partition), in the order of
	// p's sequences: a moved record's RunSeq is translated with it.
	copies map[[2]int][]copied
	done   map[[2]uint64]bool // (p, seq) already copied by an earlier run
	moves  map[[2]int]*PartitionMove
	rep    MigrationReport
	// afterCopy, when set, runs between a message's copy and the delete
	// of its original; an error stops the run there (a test's crash).
	afterCopy func() error
}

type copied struct{ from, to uint64 }

// HeaderMigrated marks a message or record copied by a migration: "<id>
// <partition> <sequence>" of its original, so that a run again knows what
// is copied.
const HeaderMigrated = "Tenaz-Migrated"

// dueHorizon is how close to its time a schedule is left to fire where it
// is (and the message it fires is moved instead): moving it that close
// could let both the original and the copy fire.
const dueHorizon = 3 * time.Second

func (m *migration) run(ctx context.Context) (MigrationReport, error) {
	start := m.now()
	if err := m.plan(ctx); err != nil {
		return m.rep, err
	}
	busy, err := m.checkOffline(ctx)
	if err != nil {
		return m.rep, err
	}
	switch {
	case m.dry:
		m.rep.Busy = busy
	case busy != "":
		return m.rep, failf(ErrConflict, "the store is in use: %s; stop every tenaz service on it (tenaz run, or tenaz-ingest, -dispatcher, -poller, -deadletter), then run this again", busy)
	case m.from == m.to && !m.resumed && !(m.byAccount && m.from > 1):
		// Nothing to move; a version before may have left its consumers
		// per account, and a run stopped after its switch the emptied
		// partitions of a smaller count.
		if err := m.cleanUp(ctx); err != nil {
			return m.rep, err
		}
		if err := m.dropExtra(ctx); err != nil {
			return m.rep, err
		}
		m.finish(start)
		return m.rep, nil
	default:
		if err := m.begin(ctx); err != nil {
			return m.rep, err
		}
		// Again, now that the mark keeps any service from starting: one
		// that started since the first check works on the old layout.
		busy, err := m.checkOffline(ctx)
		if err != nil {
			return m.rep, err
		}
		if busy != "" {
			return m.rep, failf(ErrConflict, "a service started on the store meanwhile: %s; stop it and run this again to finish", busy)
		}
	}
	if err := m.open(ctx); err != nil {
		return m.rep, err
	}
	if err := m.copyAll(ctx); err != nil {
		return m.rep, err
	}
	if !m.dry {
		if err := m.cleanUp(ctx); err != nil {
			return m.rep, err
		}
		if err := m.switchCount(ctx); err != nil {
			return m.rep, err
		}
		if err := m.dropExtra(ctx); err != nil {
			return m.rep, err
		}
	}
	m.finish(start)
	return m.rep, nil
}

func (m *migration) finish(start time.Time) {
	m.rep.Moves = []PartitionMove{}
	for _, mv := range m.moves {
		m.rep.Moves = append(m.rep.Moves, *mv)
	}
	sort.Slice(m.rep.Moves, func(i, j int) bool {
		a, b := m.rep.Moves[i], m.rep.Moves[j]
		return a.From < b.From || a.From == b.From && a.To < b.To
	})
	m.rep.Seconds = m.now().Sub(start).Seconds()
}

func (m *migration) logf(format string, args ...any) { fmt.Fprintf(m.log, format+"\n", args...) }

// plan reads the store's count and any migration in progress.
func (m *migration) plan(ctx context.Context) error {
	name := streams.EventsStream(m.prefix, 0)
	st, err := m.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return failf(ErrNotFound, "no tenaz store with prefix %q here (no stream %s): nothing to migrate", m.prefix, name)
	}
	if err != nil {
		return jsError("read stream "+name, err)
	}
	md := st.CachedInfo().Config.Metadata
	m.from = 1 // a store from before partitions
	if v, ok := md[streams.MetaPartitions]; ok {
		if m.from, err = strconv.Atoi(v); err != nil || m.from < 1 {
			return fmt.Errorf("stream %s: metadata %s is %q, not a partition count", name, streams.MetaPartitions, v)
		}
	}
	m.byAccount = md[streams.MetaRecords] != streams.MetaRecordsByEvent
	if v, ok := md[streams.MetaMigrateTo]; ok {
		if v != strconv.Itoa(m.to) {
			return failf(ErrConflict, "a migration of this store to %s partitions is unfinished: finish it first with `tenaz streams migrate --partitions %s`", v, v)
		}
		m.id, m.resumed = md[streams.MetaMigrateID], true
	}
	m.old = names.NewSubjects(m.prefix).WithPartitions(m.from)
	m.new = names.NewSubjects(m.prefix).WithPartitions(m.to)
	m.rep = MigrationReport{Prefix: m.prefix, From: m.from, To: m.to, DryRun: m.dry, Resumed: m.resumed}
	m.moves = map[[2]int]*PartitionMove{}
	m.copies = map[[2]int][]copied{}
	m.done = map[[2]uint64]bool{}
	return nil
}

// migratingCount is how many partitions a store being migrated has in
// its two layouts together.
func migratingCount(ctx context.Context, js jetstream.JetStream, prefix string) (int, error) {
	m := &migration{js: js, prefix: prefix}
	st, err := js.Stream(ctx, streams.EventsStream(prefix, 0))
	if err != nil {
		return 0, err
	}
	to, err := strconv.Atoi(st.CachedInfo().Config.Metadata[streams.MetaMigrateTo])
	if err != nil {
		return 0, fmt.Errorf("stream %s: metadata %s is not a partition count", streams.EventsStream(prefix, 0), streams.MetaMigrateTo)
	}
	m.to = to
	if err := m.plan(ctx); err != nil {
		return 0, err
	}
	return max(m.from, m.to), nil
}

// layout is the store's layout over n partitions, with EVENTS' replicas
// and placement.
func (m *migration) layout(ctx context.Context, n int) (streams.Options, error) {
	st, err := m.js.Stream(ctx, streams.EventsStream(m.prefix, 0))
	if err != nil {
		return streams.Options{}, jsError("read stream "+streams.EventsStream(m.prefix, 0), err)
	}
	c := st.CachedInfo().Config
	return streams.Options{Prefix: m.prefix, Replicas: c.Replicas, Placement: c.Placement, Partitions: n}, nil
}

// checkOffline says which dispatchers run (heard in tenaz_owners) and
// which of the installation's consumers a client is reading right now: a
// pull request waiting (the server counts only those whose client is
// still there; a dispatcher's watch has one), a client pinned to a
// consumer per account a version before left (until its pinned_ttl after
// its last pull), a push consumer bound to a client (a bucket's watcher).
// "" when none.
func (m *migration) checkOffline(ctx context.Context) (string, error) {
	o, err := m.layout(ctx, max(m.from, m.to))
	if err != nil {
		return "", err
	}
	ss, err := streams.Streams(o)
	if err != nil {
		return "", err
	}
	bs, err := streams.Buckets(o)
	if err != nil {
		return "", err
	}
	var all []string
	for _, c := range ss {
		all = append(all, c.Name)
	}
	for _, b := range bs {
		all = append(all, "KV_"+b.Bucket)
	}
	// A dispatcher of a store whose EVENTS is a work queue has no
	// consumer there: its heartbeat says it runs.
	replicas, err := owner.Heard(ctx, m.js, m.prefix, 10*time.Second)
	if err != nil {
		return "", err
	}
	var busy []string
	for _, r := range replicas {
		busy = append(busy, "dispatcher "+r+" (tenaz-dispatcher) is heard in "+names.BucketOwners)
	}
	for _, name := range all {
		st, err := m.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return "", jsError("read stream "+name, err)
		}
		l := st.ListConsumers(ctx)
		for ci := range l.Info() {
			who := "consumer " + ci.Name + " on " + name + " (" + consumerService(ci) + ")"
			switch {
			case ci.NumWaiting > 0:
				busy = append(busy, fmt.Sprintf("%s has %d pull request(s) waiting", who, ci.NumWaiting))
			case ci.PushBound:
				busy = append(busy, who+" is bound to a client")
			default:
				for _, g := range ci.PriorityGroups {
					if g.PinnedClientID != "" {
						busy = append(busy, fmt.Sprintf("%s is pinned to a client since %s (a pin ends %s after its client's last pull)", who, g.PinnedTS.Format(time.RFC3339), ci.Config.PinnedTTL))
					}
				}
			}
		}
		if err := l.Err(); err != nil {
			return "", jsError("consumers of "+name, err)
		}
	}
	const shown = 5
	if len(busy) > shown {
		busy = append(busy[:shown], fmt.Sprintf("and %d more", len(busy)-shown))
	}
	return strings.Join(busy, "; "), nil
}

// consumerService names who reads a consumer, for the error saying what
// to stop.
func consumerService(ci *jetstream.ConsumerInfo) string {
	switch name := ci.Name; {
	case strings.HasPrefix(name, names.ConsumerWatchPrefix), strings.HasPrefix(name, "acct_"):
		return "tenaz-dispatcher"
	case name == names.ConsumerPoller:
		return "tenaz-poller"
	case strings.HasPrefix(name, "ingest"):
		return "tenaz-ingest"
	case strings.HasPrefix(name, "deadletter"):
		return "tenaz-deadletter"
	case ci.Config.Durable == "":
		return "a watcher"
	}
	return "a client"
}

// begin marks the store as moving (a resumed run keeps its mark) and
// makes the partitions the new count adds, with their poller consumers.
func (m *migration) begin(ctx context.Context) error {
	name := streams.EventsStream(m.prefix, 0)
	if !m.resumed {
		st, err := m.js.Stream(ctx, name)
		if err != nil {
			return jsError("read stream "+name, err)
		}
		c := st.CachedInfo().Config
		md := map[string]string{}
		for k, v := range c.Metadata {
			md[k] = v
		}
		m.id = m.now().UTC().Format("20060102T150405.000000000Z")
		md[streams.MetaMigrateTo], md[streams.MetaMigrateID] = strconv.Itoa(m.to), m.id
		c.Metadata = md
		if _, err := m.js.UpdateStream(ctx, c); err != nil {
			return jsError("mark "+name+" as migrating", err)
		}
		m.logf("marked %s: moving from %d to %d partition(s) (migration %s); the services refuse to start until it is done", name, m.from, m.to, m.id)
	} else {
		m.logf("resuming migration %s from %d to %d partition(s)", m.id, m.from, m.to)
	}
	o, err := m.layout(ctx, m.to)
	if err != nil {
		return err
	}
	ss, err := streams.Streams(o)
	if err != nil {
		return err
	}
	bs, err := streams.Buckets(o)
	if err != nil {
		return err
	}
	for p := m.from; p < m.to; p++ {
		for _, c := range ss {
			if c.Name == streams.EventsStream(m.prefix, p) {
				if _, err := m.js.CreateOrUpdateStream(ctx, c); err != nil {
					return jsError("create stream "+c.Name, err)
				}
			}
		}
		for _, c := range bs {
			if c.Bucket == streams.StateBucket(m.prefix, p) {
				if _, err := m.js.CreateOrUpdateKeyValue(ctx, c); err != nil {
					return jsError("create bucket "+c.Bucket, err)
				}
			}
		}
		pc, err := streams.PollerConsumer(o, p)
		if err != nil {
			return err
		}
		if _, err := m.js.CreateOrUpdateConsumer(ctx, streams.EventsStream(m.prefix, p), pc); err != nil {
			return jsError("create consumer "+pc.Durable, err)
		}
	}
	return nil
}

// open binds every partition's EVENTS and state stream of both layouts
// (in a dry run, those that exist) and, resuming, learns what an earlier
// run copied from the marks on the copies.
func (m *migration) open(ctx context.Context) error {
	n := max(m.from, m.to)
	if m.dry {
		n = m.from
	}
	m.events, m.state = make([]jetstream.Stream, n), make([]jetstream.Stream, n)
	for p := range n {
		var err error
		if m.events[p], err = m.js.Stream(ctx, streams.EventsStream(m.prefix, p)); err != nil {
			return jsError("read stream "+streams.EventsStream(m.prefix, p), err)
		}
		if m.state[p], err = m.js.Stream(ctx, "KV_"+streams.StateBucket(m.prefix, p)); err != nil {
			return jsError("read bucket "+streams.StateBucket(m.prefix, p), err)
		}
	}
	if !m.resumed || m.dry {
		return nil
	}
	for q := range m.to {
		err := each(ctx, m.events[q], streams.Root(m.prefix, q)+".>", func(msg *jetstream.RawStreamMsg) error {
			var id string
			var p int
			var seq uint64
			if _, err := fmt.Sscanf(msg.Header.Get(HeaderMigrated), "%s %d %d", &id, &p, &seq); err != nil || id != m.id {
				return nil
			}
			m.done[[2]uint64{uint64(p), seq}] = true
			k := [2]int{p, q}
			m.copies[k] = append(m.copies[k], copied{from: seq, to: msg.Sequence})
			return nil
		})
		if err != nil {
			return jsError("read stream "+m.events[q].CachedInfo().Config.Name, err)
		}
	}
	for k := range m.copies {
		sort.Slice(m.copies[k], func(i, j int) bool { return m.copies[k][i].from < m.copies[k][j].from })
	}
	m.logf("the earlier run copied %d message(s) still to delete or already deleted", len(m.done))
	return nil
}

// each calls fn with every message of st on filter, in sequence order, up
// to the last one, including those stored meanwhile.
func each(ctx context.Context, st jetstream.Stream, filter string, fn func(*jetstream.RawStreamMsg) error) error {
	for seq := uint64(1); ; {
		msg, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(msg); err != nil {
			return err
		}
		seq = msg.Sequence + 1
	}
}

func (m *migration) move(p, q int) *PartitionMove {
	k := [2]int{p, q}
	if m.moves[k] == nil {
		m.moves[k] = &PartitionMove{From: p, To: q}
	}
	return m.moves[k]
}

// copyAll moves every partition's messages and schedules, then its
// records (a record's RunSeq is translated through its messages' copies),
// and again while schedules left to fire where they are fire.
func (m *migration) copyAll(ctx context.Context) error {
	for {
		var wait time.Time
		for p := range m.from {
			w, err := m.copyMessages(ctx, p)
			if err != nil {
				return jsError("move the messages of "+m.events[p].CachedInfo().Config.Name, err)
			}
			if !w.IsZero() && (wait.IsZero() || w.Before(wait)) {
				wait = w
			}
		}
		for p := range m.from {
			if err := m.copyRecords(ctx, p); err != nil {
				return jsError("move the records of "+streams.StateBucket(m.prefix, p), err)
			}
		}
		if wait.IsZero() || m.dry {
			return nil
		}
		m.logf("waiting for the schedules due by %s to fire where they are, to move what they fire", wait.Format(time.RFC3339))
		t := time.NewTimer(time.Until(wait) + time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// copyMessages moves partition p's dispatch and timer messages and its
// schedules whose account is in another partition now. It returns the
// due time of the last schedule it left to fire in p (zero: none).
func (m *migration) copyMessages(ctx context.Context, p int) (time.Time, error) {
	root := streams.Root(m.prefix, p) + "."
	var wait time.Time
	err := each(ctx, m.events[p], root+">", func(msg *jetstream.RawStreamMsg) error {
		mid, rest, _ := strings.Cut(strings.TrimPrefix(msg.Subject, root), ".")
		var account string
		switch mid {
		case "events", "timers":
			account, _, _ = strings.Cut(rest, ".")
		case "sched":
			target := msg.Header.Get("Nats-Schedule-Target")
			_, after, _ := strings.Cut(strings.TrimPrefix(target, root), ".")
			account, _, _ = strings.Cut(after, ".")
		default:
			return nil // keeper messages
		}
		if names.ValidateAccount(account) != nil {
			return nil
		}
		q := m.new.PartitionOf(account)
		if q == p {
			return nil
		}
		mv := m.move(p, q)
		if mid == "sched" {
			if due, ok := scheduleDue(msg.Header.Get("Nats-Schedule")); ok && due.Before(m.now().Add(dueHorizon)) {
				if due.After(wait) {
					wait = due
				}
				return nil
			}
			mv.Schedules++
		} else {
			mv.Messages++
		}
		if m.dry {
			return nil
		}
		if !m.done[[2]uint64{uint64(p), msg.Sequence}] {
			c := nats.NewMsg(streams.Root(m.prefix, q) + "." + mid + "." + rest)
			c.Data = msg.Data
			c.Header = copyHeader(msg.Header, mid == "sched")
			if mid == "sched" {
				c.Header.Set("Nats-Schedule-Target", streams.Root(m.prefix, q)+strings.TrimPrefix(msg.Header.Get("Nats-Schedule-Target"), streams.Root(m.prefix, p)))
			} else {
				// A schedule's copy replaces itself (rollup); a message's
				// is found by its mark when a run again resumes this one.
				c.Header.Set(HeaderMigrated, fmt.Sprintf("%s %d %d", m.id, p, msg.Sequence))
			}
			ack, err := m.js.PublishMsg(ctx, c)
			if err != nil {
				return err
			}
			if mid != "sched" {
				k := [2]int{p, q}
				m.copies[k] = append(m.copies[k], copied{from: msg.Sequence, to: ack.Sequence})
			}
			if m.afterCopy != nil {
				if err := m.afterCopy(); err != nil {
					return err
				}
			}
		}
		if err := m.events[p].DeleteMsg(ctx, msg.Sequence); err != nil && !store.IsGone(err) {
			return err
		}
		return nil
	})
	return wait, err
}

// copyHeader is h without what belongs to the original's publish: its
// message id (a copy is no re-send), expectations, the state record's
// revision (the record's copy has another; the dispatcher reads it
// instead), what a direct get adds (the original's sequence, subject and
// time), and on a fired message what the scheduler added.
func copyHeader(h nats.Header, schedule bool) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		switch {
		case k == jetstream.MsgIDHeader, k == queue.HeaderRev, k == HeaderMigrated, strings.HasPrefix(k, "Nats-Expected-"):
		case k == jetstream.StreamHeader, k == jetstream.SequenceHeader, k == jetstream.SubjectHeader, k == jetstream.TimeStampHeaer,
			k == "Nats-Num-Pending", k == "Nats-Last-Sequence":
		case !schedule && strings.HasPrefix(k, "Nats-Schedule"):
		default:
			out[k] = v
		}
	}
	return out
}

// scheduleDue is the time of an "@at" schedule.
func scheduleDue(pattern string) (time.Time, bool) {
	at, ok := strings.CutPrefix(pattern, "@at ")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, at)
	return t, err == nil
}

// copyRecords moves partition p's state records to their partition in
// the new layout (their event id's: a migrated store places records by
// event), keeping the time a finished one has left, and translates the
// run sequence of a record whose account's messages moved (in place when
// the record stays). What it writes carries HeaderMigrated, so that the
// next pass, or a run again, leaves it alone.
func (m *migration) copyRecords(ctx context.Context, p int) error {
	prefix := "$KV." + streams.StateBucket(m.prefix, p) + "."
	for _, cs := range m.copies {
		sort.Slice(cs, func(i, j int) bool { return cs[i].from < cs[j].from })
	}
	placed := streams.Layout{Partitions: m.to, RecordsByEvent: true}
	return each(ctx, m.state[p], prefix+">", func(msg *jetstream.RawStreamMsg) error {
		if msg.Header.Get("KV-Operation") != "" {
			return nil // a delete or purge marker: nothing to move
		}
		if strings.HasPrefix(msg.Header.Get(HeaderMigrated), m.id+" ") {
			return nil // written by this migration
		}
		id := strings.TrimPrefix(msg.Subject, prefix)
		var rec state.Record
		if err := json.Unmarshal(msg.Data, &rec); err != nil || names.ValidateAccount(rec.Account) != nil {
			m.logf("left record %s in %s: not a readable record", id, streams.StateBucket(m.prefix, p))
			return nil
		}
		q := placed.RecordPartition(rec.Account, id)
		from, to := m.old.PartitionOf(rec.Account), m.new.PartitionOf(rec.Account)
		translate := rec.RunSeq != 0 && from != to
		if q == p && !translate {
			return nil
		}
		if q != p {
			m.move(p, q).Records++
		}
		if m.dry {
			return nil
		}
		c := nats.NewMsg("$KV." + streams.StateBucket(m.prefix, q) + "." + id)
		c.Header.Set(HeaderMigrated, fmt.Sprintf("%s %d %d", m.id, p, msg.Sequence))
		c.Data = msg.Data
		if translate {
			rec.RunSeq = m.runSeq(from, to, rec.RunSeq)
			c.Data = rec.AppendJSON(nil)
		}
		keep := true
		if ttl := msg.Header.Get("Nats-TTL"); ttl != "" {
			d, err := time.ParseDuration(ttl)
			if err != nil {
				d, err = time.ParseDuration(ttl + "s")
			}
			left := d - m.now().Sub(msg.Time)
			switch {
			case err != nil:
				c.Header.Set("Nats-TTL", ttl)
			case left < time.Second:
				keep = false // it expires anyway
			default:
				c.Header.Set("Nats-TTL", left.Truncate(time.Second).String())
			}
		}
		upTo := msg.Sequence + 1
		if keep {
			ack, err := m.js.PublishMsg(ctx, c)
			if err != nil {
				return err
			}
			if q == p {
				upTo = ack.Sequence // rewritten in place: the copy stays
			}
		}
		// A bucket's stream denies deleting a message; a purge of the key
		// up to this revision removes it, leaving no marker to watchers.
		return m.state[p].Purge(ctx, jetstream.WithPurgeSubject(msg.Subject), jetstream.WithPurgeSequence(upTo))
	})
}

// runSeq translates a run's EVENTS sequence in partition p to partition
// q: the copy of the last message moved from p to q at or before it, so
// that every message of the event keeps its side of the run (older ones
// at or below it, newer ones above); 0 when none was.
func (m *migration) runSeq(p, q int, seq uint64) uint64 {
	cs := m.copies[[2]int{p, q}]
	i := sort.Search(len(cs), func(i int) bool { return cs[i].from > seq })
	if i == 0 {
		return 0
	}
	return cs[i-1].to
}

// cleanUp deletes every consumer per account (acct_<account>) that a
// version before left on any partition's EVENTS, whether its account
// moved or not: the dispatchers read each account's messages without one,
// and a leftover holds server memory until it expires.
func (m *migration) cleanUp(ctx context.Context) error {
	for p := range streams.MaxPartitions {
		name := streams.EventsStream(m.prefix, p)
		st, err := m.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			break
		}
		if err != nil {
			return jsError("read stream "+name, err)
		}
		l := st.ConsumerNames(ctx)
		var gone []string
		for c := range l.Name() {
			if _, ok := names.AccountOfConsumer(c); ok {
				gone = append(gone, c)
			}
		}
		if err := l.Err(); err != nil {
			return jsError("consumers of "+name, err)
		}
		for _, c := range gone {
			if err := st.DeleteConsumer(ctx, c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return jsError("delete consumer "+c, err)
			}
			m.rep.Consumers = append(m.rep.Consumers, name+"/"+c)
		}
	}
	return nil
}

// switchCount records the new count in EVENTS' metadata and clears the
// mark: the services start on the new layout from now on.
func (m *migration) switchCount(ctx context.Context) error {
	name := streams.EventsStream(m.prefix, 0)
	st, err := m.js.Stream(ctx, name)
	if err != nil {
		return jsError("read stream "+name, err)
	}
	c := st.CachedInfo().Config
	md := map[string]string{}
	for k, v := range c.Metadata {
		if k != streams.MetaMigrateTo && k != streams.MetaMigrateID {
			md[k] = v
		}
	}
	md[streams.MetaPartitions] = strconv.Itoa(m.to)
	// The records are by event now, and the messages' revisions of
	// before are stale: the new epoch tells the dispatchers to read.
	md[streams.MetaRecords], md[streams.MetaEpoch] = streams.MetaRecordsByEvent, m.id
	c.Metadata = md
	if _, err := m.js.UpdateStream(ctx, c); err != nil {
		return jsError("switch "+name+" to "+strconv.Itoa(m.to)+" partitions", err)
	}
	m.logf("switched %s to %d partition(s)", name, m.to)
	return nil
}

// dropExtra deletes the EVENTS streams and state buckets of partitions at
// or above the store's count, once nothing but keeper messages is left
// in them (a smaller count's leftovers).
func (m *migration) dropExtra(ctx context.Context) error {
	for p := m.to; p < streams.MaxPartitions; p++ {
		name := streams.EventsStream(m.prefix, p)
		st, err := m.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			break
		}
		if err != nil {
			return jsError("read stream "+name, err)
		}
		for _, f := range []string{m.new.EventsIn(p), m.new.TimersIn(p), m.new.SchedulesIn(p)} {
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(f))
			if err != nil {
				return jsError("read stream "+name, err)
			}
			if len(info.State.Subjects) > 0 {
				return failf(ErrConflict, "stream %s is beyond the store's %d partitions and still holds messages on %s: left as it is", name, m.to, f)
			}
		}
		bucket := streams.StateBucket(m.prefix, p)
		if kv, err := m.js.Stream(ctx, "KV_"+bucket); err == nil {
			records := 0
			err := each(ctx, kv, "$KV."+bucket+".>", func(msg *jetstream.RawStreamMsg) error {
				if msg.Header.Get("KV-Operation") == "" {
					records++
				}
				return nil
			})
			if err != nil {
				return jsError("read bucket "+bucket, err)
			}
			if records > 0 {
				return failf(ErrConflict, "bucket %s is beyond the store's %d partitions and still holds %d record(s): left as it is", bucket, m.to, records)
			}
			if err := m.js.DeleteKeyValue(ctx, bucket); err != nil {
				return jsError("delete bucket "+bucket, err)
			}
			m.rep.Dropped = append(m.rep.Dropped, bucket)
		}
		if err := m.js.DeleteStream(ctx, name); err != nil {
			return jsError("delete stream "+name, err)
		}
		m.rep.Dropped = append(m.rep.Dropped, name)
	}
	return nil
}

func printMigration(w io.Writer, r MigrationReport) {
	verb := "moved"
	switch {
	case r.DryRun:
		verb = "would move"
		fmt.Fprintf(w, "dry run: the store (prefix %q) has %d partition(s); to %d:\n", r.Prefix, r.From, r.To)
	case r.From == r.To && !r.Resumed && len(r.Moves) == 0:
		fmt.Fprintf(w, "the store (prefix %q) has %d partition(s) already: nothing to move\n", r.Prefix, r.To)
	default:
		fmt.Fprintf(w, "the store (prefix %q) is moved from %d to %d partition(s) in %.1fs\n", r.Prefix, r.From, r.To, r.Seconds)
	}
	if r.Busy != "" {
		fmt.Fprintf(w, "a real run would be refused now: %s\n", r.Busy)
	}
	if len(r.Moves) > 0 {
		row(w, "FROM", "TO", "RECORDS", "MESSAGES", "SCHEDULES")
		for _, mv := range r.Moves {
			row(w, mv.From, mv.To, mv.Records, mv.Messages, mv.Schedules)
		}
	} else if r.From != r.To {
		fmt.Fprintf(w, "nothing %s: no event is in a partition it leaves\n", verb)
	}
	if len(r.Consumers) > 0 {
		row(w, "consumers deleted:", strings.Join(r.Consumers, " "))
	}
	if len(r.Dropped) > 0 {
		row(w, "dropped:", strings.Join(r.Dropped, " "))
	}
}
