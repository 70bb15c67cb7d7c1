package streams

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Partitions. An event's dispatch messages and its schedule live in the
// partition of its account, its state record in the partition of its
// event id (Layout): each partition is its own EVENTS stream and its own
// state bucket, so their writes (each stream fsyncs one write at a time)
// run in parallel, and on a cluster their leaders spread over the nodes.
// An account's dispatch is in exactly one partition, so its order and its
// limits stay in one place; its records are spread over all of them, so
// one busy account's state writes are not bound to one bucket, and a
// record is found by its id alone (a callback, an operator).
//
// Partition 0 is laid out as a store from before partitions was (EVENTS,
// tenaz_state, subjects at the prefix's root: tenaz.events.>), so such a
// store is a one-partition store as it stands. Partition p > 0 is
// EVENTS_<p>, tenaz_state_<p>, subjects under tenaz.p<p> (tenaz.p1.events.>).

// DefaultPartitions is a new store's partition count unless configured:
// measured by `make bench` (e2e_*_partitions_*, docs/performance.md).
const DefaultPartitions = 4

// MaxPartitions bounds streams.partitions.
const MaxPartitions = 64

// Names of the partitioned stream and bucket, as partition 0 of the
// default prefix has them, and of INTAKE.
const (
	StreamEvents = "EVENTS"
	BucketState  = "tenaz_state"
	StreamIntake = "INTAKE"
	// streamAdvisories keeps the server's advisories (data/stream-advisories.json).
	streamAdvisories = "TENAZ_ADVISORIES"
	// metaPartitions is the key of the partition count in EVENTS' metadata.
	metaPartitions = "tenaz_partitions"
	// metaRecords is the key of the records' placement in EVENTS'
	// metadata: recordsByEvent, or absent in a store from before (by
	// account).
	metaRecords    = "tenaz_records"
	recordsByEvent = "event"
	// metaEpoch is the key of the store's epoch in EVENTS' metadata: the
	// id of the last migration, absent before any.
	metaEpoch = "tenaz_epoch"
)

// Layout is what every service of a store must agree on: its partition
// count and where its state records are.
type Layout struct {
	Partitions int
	// RecordsByEvent places each state record in the partition of its
	// event id. A store from before (no tenaz_records in EVENTS'
	// metadata) has each in its account's partition, and keeps that
	// until `tenaz streams migrate` moves it.
	RecordsByEvent bool
	// Epoch names the store's layout since its last migration ("" before
	// any). A record revision that a message carries (Tenaz-Rev) is only
	// good in the epoch it was written in: a migration moves records,
	// which then have other revisions (pkg/queue, RevOf).
	Epoch string
}

// RecordPartition is the partition of the state bucket that holds the
// record of account's event id.
func (l Layout) RecordPartition(account, id string) int {
	if l.RecordsByEvent {
		return PartitionOf(id, l.Partitions)
	}
	return PartitionOf(account, l.Partitions)
}

// Keys of EVENTS' metadata that `tenaz streams migrate` writes:
// MetaPartitions is the store's count (metaPartitions), MetaRecords the
// records' placement (metaRecords: MetaRecordsByEvent), MetaEpoch the
// store's epoch (metaEpoch: the migration's id), MetaMigrateTo the
// count a migration in progress moves the store to (set until it is done),
// MetaMigrateID that migration's id (its copies carry it).
const (
	MetaPartitions     = metaPartitions
	MetaRecords        = metaRecords
	MetaRecordsByEvent = recordsByEvent
	MetaEpoch          = metaEpoch
	MetaMigrateTo      = "tenaz_migrate_to"
	MetaMigrateID      = "tenaz_migrate_id"
)

// ErrMigrating is returned by Apply and Partitions for a store that a
// `tenaz streams migrate` has begun and not finished: its events are in
// both layouts, so no service may start on it.
var ErrMigrating = errors.New("streams: the store is being moved to another partition count")

// ErrPartitions is returned by Apply when the configured partition count
// is not the store's.
var ErrPartitions = errors.New("streams.partitions: not the store's partition count")

// PartitionOf is the partition of n of an account (or, for a record
// placed by event, of an event id): FNV-1a of the name, modulo n.
func PartitionOf(name string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}

// EventsStream is partition p's EVENTS stream in the installation of
// prefix.
func EventsStream(prefix string, p int) string {
	name := StreamName(prefix, StreamEvents)
	if p == 0 {
		return name
	}
	return name + "_" + strconv.Itoa(p)
}

// StateBucket is partition p's state bucket in the installation of
// prefix.
func StateBucket(prefix string, p int) string {
	name := BucketName(prefix, BucketState)
	if p == 0 {
		return name
	}
	return name + "_" + strconv.Itoa(p)
}

// Root is the subject root of partition p under prefix: the prefix itself
// for partition 0, <prefix>.p<p> for the others.
func Root(prefix string, p int) string {
	if p == 0 {
		return prefix
	}
	return prefix + ".p" + strconv.Itoa(p)
}

// inPartition moves a data file's subject (tenaz.<rest>) to partition p.
func (o Options) inPartition(s string, p int) string {
	if rest, ok := strings.CutPrefix(s, "tenaz."); ok {
		return Root(o.prefix(), p) + "." + rest
	}
	return s
}

// eventsStream is partition p's copy of the EVENTS data file. Partition
// 0's carries the store's partition count in its metadata.
func (o Options) eventsStream(c jetstream.StreamConfig, p int) jetstream.StreamConfig {
	c.Name = EventsStream(o.prefix(), p)
	subs := make([]string, len(c.Subjects))
	for i, s := range c.Subjects {
		subs[i] = o.inPartition(s, p)
	}
	c.Subjects = subs
	c.Replicas = o.replicas()
	c.Placement = o.Placement
	if p == 0 {
		c.Metadata = map[string]string{metaPartitions: strconv.Itoa(o.parts())}
		if !o.RecordsByAccount {
			c.Metadata[metaRecords] = recordsByEvent
		}
		if o.epoch != "" {
			c.Metadata[metaEpoch] = o.epoch
		}
	} else {
		c.Description = fmt.Sprintf("Partition %d of %s (subjects under %s): %s", p, EventsStream(o.prefix(), 0), Root(o.prefix(), p), c.Description)
	}
	return c
}

// advisorySubjects names the installation's streams in the data file's
// advisory subjects, EVENTS' once for every partition's stream.
func (o Options) advisorySubjects(subs []string) []string {
	var out []string
	for _, s := range subs {
		switch {
		case strings.Contains(s, "."+StreamEvents+"."):
			for p := range o.parts() {
				out = append(out, strings.Replace(s, "."+StreamEvents+".", "."+EventsStream(o.prefix(), p)+".", 1))
			}
		case strings.Contains(s, "."+StreamIntake+"."):
			out = append(out, strings.Replace(s, "."+StreamIntake+".", "."+StreamName(o.prefix(), StreamIntake)+".", 1))
		default:
			out = append(out, s)
		}
	}
	return out
}

// StoreLayout reads the layout of the store of prefix on js: a zero
// Layout when there is no store yet, one partition with its records by
// account for a store from before partitions.
func StoreLayout(ctx context.Context, js jetstream.JetStream, prefix string) (Layout, error) {
	name := EventsStream(defaultTo(prefix), 0)
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Layout{}, nil
	}
	if err != nil {
		return Layout{}, fmt.Errorf("streams: read %s: %w", name, err)
	}
	md := s.CachedInfo().Config.Metadata
	if to, ok := md[MetaMigrateTo]; ok {
		return Layout{}, fmt.Errorf("%w (to %s partitions), unfinished: finish it with `tenaz streams migrate --partitions %s` before starting the services", ErrMigrating, to, to)
	}
	l := Layout{Partitions: 1, RecordsByEvent: md[metaRecords] == recordsByEvent, Epoch: md[metaEpoch]}
	if v, ok := md[metaPartitions]; ok {
		if l.Partitions, err = strconv.Atoi(v); err != nil || l.Partitions < 1 {
			return Layout{}, fmt.Errorf("streams: %s's metadata %s is %q, not a partition count", StreamEvents, metaPartitions, v)
		}
	}
	return l, nil
}

// Partitions reads the partition count of the store of prefix (0: no
// store yet), for a service that does not apply the layout itself.
func Partitions(ctx context.Context, js jetstream.JetStream, prefix string) (int, error) {
	l, err := StoreLayout(ctx, js, prefix)
	return l.Partitions, err
}

// Names. Every stream and bucket name carries the installation's prefix,
// so that two installations (two prefixes) share one NATS account without
// sharing a stream: the default prefix's are the names the data files
// give (INTAKE, EVENTS, TENAZ_ADVISORIES, tenaz_state), and another
// prefix's are those with its token in place of tenaz's (ACME_INTAKE,
// ACME_EVENTS, ACME_ADVISORIES, acme_state for the prefix acme; a prefix of
// several tokens joins them with _: acme.tenaz gives ACME_TENAZ_INTAKE).

const defaultPrefix = "tenaz"

func defaultTo(prefix string) string {
	if prefix == "" {
		return defaultPrefix
	}
	return prefix
}

// nameToken is prefix as one name token: its dots and dashes as _.
func nameToken(prefix string) string {
	return strings.NewReplacer(".", "_", "-", "_").Replace(defaultTo(prefix))
}

// StreamName is the stream the data files call base (INTAKE,
// TENAZ_ADVISORIES) in the installation of prefix.
func StreamName(prefix, base string) string {
	if defaultTo(prefix) == defaultPrefix {
		return base
	}
	return strings.ToUpper(nameToken(prefix)) + "_" + strings.TrimPrefix(base, "TENAZ_")
}

// BucketName is the bucket the data files call base (tenaz_state) in the
// installation of prefix.
func BucketName(prefix, base string) string {
	if defaultTo(prefix) == defaultPrefix {
		return base
	}
	return nameToken(prefix) + "_" + strings.TrimPrefix(base, "tenaz_")
}
