package names

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tenaz/tenaz/streams"
)

// Header names on NATS messages and HTTP requests.
const (
	HeaderMsgID          = "Nats-Msg-Id"        // NATS: the idempotency key on intake
	HeaderEntityID       = "Tenaz-Entity-Id"    // NATS intake: entity the event is about
	HeaderOrderingKey    = "Tenaz-Ordering-Key" // NATS intake: events with one key run in order
	HeaderNotBefore      = "Tenaz-Not-Before"   // NATS intake: RFC 3339 time before which nothing runs
	HeaderEventID        = "Tenaz-Event-Id"     // outbound call and internal messages: the event id
	HeaderAttempt        = "Tenaz-Attempt"      // outbound call: 1-based attempt number
	HeaderReplay         = "Tenaz-Replay"       // outbound call: operators' replays of the event so far
	HeaderIdempotencyKey = "Idempotency-Key"    // HTTP ingest and outbound call
)

// Names of the streams and buckets as the default prefix has them: an
// installation's own are Subjects.Stream and Subjects.Bucket of these
// (another prefix puts its token in tenaz's place: ACME_INTAKE,
// acme_owners; see streams.StreamName).
const (
	StreamIntake = streams.StreamIntake
	// StreamEvents and BucketState are partition 0's names; every
	// partition has its own (Subjects.EventsStreamOf, Subjects.StateBucketOf).
	StreamEvents = streams.StreamEvents
	StreamDead   = "DEAD"
	// StreamDeadWaiting holds the entries DEAD has no room for yet
	// (dead.Writer.Keep).
	StreamDeadWaiting = "TENAZ_DEAD_WAITING"
	BucketState       = streams.BucketState
	BucketBreakers    = "tenaz_breakers"
	BucketEffects     = "tenaz_effects"
	// BucketCallbacks maps provider references to events and remembers
	// webhook-ids (replay protection).
	BucketCallbacks = "tenaz_callbacks"
	// BucketOwners holds the dispatcher replicas' heartbeats and which
	// replica owns each account (pkg/owner).
	BucketOwners = "tenaz_owners"
	// BucketQuotas holds the limits every replica shares (pkg/quota): a
	// target's token bucket and calls in flight, an API key's submission
	// rate.
	BucketQuotas = "tenaz_quotas"
	// ConsumerPoller is the poller's shared consumer of the timers.
	ConsumerPoller = "poller"
	// ConsumerWatchPrefix begins the name of each dispatcher replica's
	// watch of a partition's dispatch subjects (an ordered consumer).
	ConsumerWatchPrefix = "dispatch-watch-"
	// HeaderTimer says what a timer message is for ("deadline" or "poll").
	HeaderTimer = "Tenaz-Timer"
)

// Instance names a replica among its peers (in leases, owners and the
// history's actors): its host, its pid and a random suffix. Host and pid
// are not enough alone (one process running two replicas, or containers on
// the host's network each with pid 1): two replicas with one name would
// both hold every lease.
func Instance() string {
	h, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b[:]))
}

// DefaultPrefix is the subject prefix unless configured otherwise.
const DefaultPrefix = "tenaz"

// Limits on caller-supplied tokens.
const (
	MaxAccountLen = 64
	MaxKindLen    = 128
	MaxKindTokens = 8
	MaxKeyLen     = 255 // idempotency key, entity id, ordering key
)

// ErrInvalidName is wrapped by every account, kind or key validation error.
var ErrInvalidName = errors.New("invalid name")

func tokenOK(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidateAccount checks that a is one subject token of [A-Za-z0-9_-],
// 1 to 64 bytes: nothing in it can widen (*, >) or split (.) a subject.
func ValidateAccount(a string) error {
	if len(a) > MaxAccountLen || !tokenOK(a) {
		return fmt.Errorf("%w: account %q must be 1-%d characters of [A-Za-z0-9_-]", ErrInvalidName, a, MaxAccountLen)
	}
	if a == InvalidToken {
		return fmt.Errorf("%w: account %q is reserved: it holds what names no valid account", ErrInvalidName, a)
	}
	return nil
}

// InvalidToken stands in, in subjects, for an account or kind that cannot
// be a subject token (the DEAD entries of submissions that name none). No
// account may be called so: it would share their bounds.
const InvalidToken = "_invalid"

// ValidateKind checks that k is 1 to 8 dot-separated tokens of
// [A-Za-z0-9_-], at most 128 bytes ("order.create").
func ValidateKind(k string) error {
	if k == "" || len(k) > MaxKindLen {
		return fmt.Errorf("%w: kind %q must be 1-%d characters", ErrInvalidName, k, MaxKindLen)
	}
	toks := strings.Split(k, ".")
	if len(toks) > MaxKindTokens {
		return fmt.Errorf("%w: kind %q has more than %d tokens", ErrInvalidName, k, MaxKindTokens)
	}
	for _, t := range toks {
		if !tokenOK(t) {
			return fmt.Errorf("%w: kind %q must be dot-separated tokens of [A-Za-z0-9_-]", ErrInvalidName, k)
		}
	}
	return nil
}

// ValidateKey checks a caller-supplied key (idempotency key, entity id,
// ordering key): 1 to 255 bytes of printable ASCII. Keys never go into
// subjects; the limit keeps records and headers bounded.
func ValidateKey(field, v string) error {
	if v == "" || len(v) > MaxKeyLen {
		return fmt.Errorf("%w: %s must be 1-%d characters", ErrInvalidName, field, MaxKeyLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return fmt.Errorf("%w: %s must be printable ASCII without spaces", ErrInvalidName, field)
		}
	}
	return nil
}

// ValidateEventID checks the shape of an event id as made by the event
// package ("ev_" and 26 base32 characters); used before an id from a URL
// becomes a KV key.
func ValidateEventID(id string) error {
	if len(id) != 29 || !strings.HasPrefix(id, "ev_") {
		return fmt.Errorf("%w: event id %q", ErrInvalidName, id)
	}
	for i := 3; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return fmt.Errorf("%w: event id %q", ErrInvalidName, id)
		}
	}
	return nil
}

// Subjects builds every subject under one prefix, and knows the store's
// partitions: an account's dispatch, schedule and timer subjects and its
// EVENTS stream are its partition's (package streams lays them out).
type Subjects struct {
	Prefix string
	// Partitions is the store's partition count (streams.Apply returns
	// it); below 1: 1.
	Partitions int
	// Epoch is the store's (streams.Layout): the record revisions that
	// messages carry are tagged with it (pkg/queue, RevOf).
	Epoch string
}

// NewSubjects returns subject builders for prefix ("" means DefaultPrefix)
// over one partition; WithPartitions sets the store's count.
func NewSubjects(prefix string) Subjects {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Subjects{Prefix: prefix, Partitions: 1}
}

// WithPartitions returns s over n partitions.
func (s Subjects) WithPartitions(n int) Subjects {
	s.Partitions = max(n, 1)
	return s
}

// WithLayout returns s over the store's layout: its partitions and epoch.
func (s Subjects) WithLayout(l streams.Layout) Subjects {
	s.Epoch = l.Epoch
	return s.WithPartitions(l.Partitions)
}

// Parts is the partition count (at least 1).
func (s Subjects) Parts() int { return max(s.Partitions, 1) }

// PartitionOf is account's partition.
func (s Subjects) PartitionOf(account string) int { return streams.PartitionOf(account, s.Parts()) }

// EventsStream is the EVENTS stream of account's partition.
func (s Subjects) EventsStream(account string) string {
	return streams.EventsStream(s.Prefix, s.PartitionOf(account))
}

// EventsStreamOf is partition p's EVENTS stream.
func (s Subjects) EventsStreamOf(p int) string { return streams.EventsStream(s.Prefix, p) }

// StateBucketOf is partition p's state bucket.
func (s Subjects) StateBucketOf(p int) string { return streams.StateBucket(s.Prefix, p) }

// Stream is this installation's name of the stream the default prefix
// calls base (StreamIntake, StreamDead).
func (s Subjects) Stream(base string) string { return streams.StreamName(s.Prefix, base) }

// Bucket is this installation's name of the bucket the default prefix
// calls base (BucketOwners).
func (s Subjects) Bucket(base string) string { return streams.BucketName(s.Prefix, base) }

// root is the subject root of partition p.
func (s Subjects) root(p int) string { return streams.Root(s.Prefix, p) }

func (s Subjects) inPartition(mid, account, kind string) (string, error) {
	if err := ValidateAccount(account); err != nil {
		return "", err
	}
	if err := ValidateKind(kind); err != nil {
		return "", err
	}
	return s.root(s.PartitionOf(account)) + "." + mid + "." + account + "." + kind, nil
}

func (s Subjects) checked(mid, account, kind string) (string, error) {
	if err := ValidateAccount(account); err != nil {
		return "", err
	}
	if err := ValidateKind(kind); err != nil {
		return "", err
	}
	return s.Prefix + "." + mid + "." + account + "." + kind, nil
}

// Intake is where upstream publishes a submission: <p>.intake.<account>.<kind>.
func (s Subjects) Intake(account, kind string) (string, error) {
	return s.checked("intake", account, kind)
}

// IntakeAll is the INTAKE stream's subject filter.
func (s Subjects) IntakeAll() string { return s.Prefix + ".intake.>" }

// IntakeOf is the subject filter of one account's submissions in INTAKE.
func (s Subjects) IntakeOf(account string) string { return s.Prefix + ".intake." + account + ".>" }

// ParseIntake splits an intake subject into account and kind, validating
// both. A valid account comes back with the error of a kind that is not
// valid: the refusal is that account's, counted against its bounds, not
// against every account's.
func (s Subjects) ParseIntake(subject string) (account, kind string, err error) {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".intake.")
	if !ok {
		return "", "", fmt.Errorf("%w: subject %q is not under %s.intake", ErrInvalidName, subject, s.Prefix)
	}
	account, kind, ok = strings.Cut(rest, ".")
	if err := ValidateAccount(account); err != nil {
		return "", "", err
	}
	if !ok {
		return account, "", fmt.Errorf("%w: subject %q has no kind", ErrInvalidName, subject)
	}
	if err := ValidateKind(kind); err != nil {
		return account, "", err
	}
	return account, kind, nil
}

// Event is the dispatch subject of an event:
// <root>.events.<account>.<kind>, where root is the prefix for partition
// 0 and <prefix>.p<n> for partition n.
func (s Subjects) Event(account, kind string) (string, error) {
	return s.inPartition("events", account, kind)
}

// ParseEvent splits an event's dispatch subject (Event, in whichever
// partition) into account and kind, validating both.
func (s Subjects) ParseEvent(subject string) (account, kind string, err error) {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".")
	if part, after, cut := strings.Cut(rest, "."); ok && cut && part != "events" && strings.HasPrefix(part, "p") {
		rest = after // <prefix>.p<n>.events...
	}
	rest, found := strings.CutPrefix(rest, "events.")
	if !ok || !found {
		return "", "", fmt.Errorf("%w: subject %q is not an event's", ErrInvalidName, subject)
	}
	account, kind, _ = strings.Cut(rest, ".")
	if err := ValidateAccount(account); err != nil {
		return "", "", err
	}
	if err := ValidateKind(kind); err != nil {
		return account, "", err
	}
	return account, kind, nil
}

// EventsIn is partition p's filter of every account's events.
func (s Subjects) EventsIn(p int) string { return s.root(p) + ".events.>" }

// EventsOf filters one account's events (what its dispatcher's tail
// reads and trims).
func (s Subjects) EventsOf(account string) string {
	return s.root(s.PartitionOf(account)) + ".events." + account + ".>"
}

// Schedule is the subject that holds the server-side schedule (delay,
// retry, deadline) of one event of account: <root>.sched.<id>. One per
// event; a newer schedule replaces an older one, and purging it cancels it.
func (s Subjects) Schedule(account, id string) string {
	return s.root(s.PartitionOf(account)) + ".sched." + id
}

// Timer is the subject a callback deadline or a poll of an event of
// account and kind fires onto (the poller consumes <root>.timers.>).
func (s Subjects) Timer(account, kind string) (string, error) {
	return s.inPartition("timers", account, kind)
}

// TimersIn matches partition p's timer subjects.
func (s Subjects) TimersIn(p int) string { return s.root(p) + ".timers.>" }

// SchedulesIn is partition p's filter of every schedule subject.
func (s Subjects) SchedulesIn(p int) string { return s.root(p) + ".sched.>" }

// KeepIn is partition p's keeper subject (pkg/keeper).
func (s Subjects) KeepIn(p int) string { return s.root(p) + ".keep.events" }

// Dead is where dead-lettered events are kept: <p>.dead.<account>.<kind>.
func (s Subjects) Dead(account, kind string) (string, error) {
	return s.checked("dead", account, kind)
}

// DeadOf is the filter of one account's entries in DEAD.
func (s Subjects) DeadOf(account string) string { return s.Prefix + ".dead." + account + ".>" }

// DeadWaiting is the subject of account's entries waiting for room in
// DEAD (dead.Writer.Keep), and DeadWaitingAll the filter of every account's.
func (s Subjects) DeadWaiting(account string) string { return s.Prefix + ".deadwait." + account }

func (s Subjects) DeadWaitingAll() string { return s.Prefix + ".deadwait.>" }

// DeadAll is the DEAD stream's subject filter.
func (s Subjects) DeadAll() string { return s.Prefix + ".dead.>" }

// AdvisoryDead is published for each dead-lettered event.
func (s Subjects) AdvisoryDead(account, kind string) string {
	return s.Prefix + ".advisory.dead." + account + "." + kind
}

// AdvisoryReview is published for each event moved to manual review.
func (s Subjects) AdvisoryReview(account, kind string) string {
	return s.Prefix + ".advisory.review." + account + "." + kind
}

// AdvisoryBreaker is published when a breaker opens or closes.
func (s Subjects) AdvisoryBreaker(account, target string) string {
	return s.Prefix + ".advisory.breaker." + account + "." + target
}

// AdvisoryDigest carries the nightly dead-letter digest.
func (s Subjects) AdvisoryDigest() string { return s.Prefix + ".advisory.digest" }

// ConsumerName is the durable name of an account's dispatch consumer in
// a version that gave each account one; what such a version left is
// deleted by `tenaz streams migrate`.
func ConsumerName(account string) string { return "acct_" + account }

// AccountOfConsumer inverts ConsumerName; ok is false for other consumers.
func AccountOfConsumer(name string) (string, bool) {
	a, ok := strings.CutPrefix(name, "acct_")
	if !ok || ValidateAccount(a) != nil {
		return "", false
	}
	return a, true
}
