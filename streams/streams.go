// Package streams is tenaz's JetStream layout as data: one JSON file per
// stream, KV bucket and consumer template under data/, in the same form the
// nats CLI accepts (`nats stream add --config data/stream-events.json`).
// Apply decodes them straight into the jetstream config structs and applies
// them idempotently with CreateOrUpdate… at start-up.
//
//	err := streams.Apply(ctx, js, streams.Options{Prefix: "tenaz", Replicas: 1})
package streams

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

//go:embed data/*.json
var files embed.FS

// FS returns the embedded data files (for `tenaz streams` and tests).
func FS() fs.FS { sub, _ := fs.Sub(files, "data"); return sub }

// Options adapt the data to a deployment.
type Options struct {
	// Prefix replaces the leading "tenaz" token of every subject. Defaults to "tenaz".
	Prefix string
	// Replicas for every stream and bucket. Defaults to 1.
	Replicas int
	// Placement of every stream and bucket. Defaults to none.
	Placement *jetstream.Placement
	// Retention is how long a finished event's state record is kept (the
	// per-key TTL the services set; the bucket only needs TTLs enabled).
	// Unused here; listed so the layout's knobs are in one place.
	Retention time.Duration
	// AckWait of the dispatch consumers. Defaults to the data file's 30s.
	AckWait time.Duration
	// DeadMaxAge is how long DEAD keeps an entry nobody acted on
	// (deadletter.retention). Defaults to the data file's 30 days.
	DeadMaxAge time.Duration
	// DeadMaxBytes bounds DEAD's size; when it is full, new entries are
	// refused (and their writers retry) rather than old ones dropped
	// (deadletter.max_bytes). Defaults to 0: no bound of its own.
	DeadMaxBytes int64
	// AuditMaxAge is how long TENAZ_AUDIT keeps an entry (audit.retention).
	// Defaults to the data file's 400 days.
	AuditMaxAge time.Duration
	// Partitions is how many partitions hold the events' dispatch and
	// state (streams.partitions). 0: the store's own count, or
	// DefaultPartitions for a new store. Streams and Buckets lay out
	// Partitions (1 when 0).
	Partitions int
	// RecordsByAccount keeps a store from before in its placement of the
	// state records: each in its account's partition, not its event id's
	// (Layout). Apply sets it from the store; a new store has it false.
	RecordsByAccount bool
	// epoch is an existing store's, kept in EVENTS' metadata by Apply.
	epoch string
}

func (o Options) prefix() string {
	if o.Prefix == "" {
		return "tenaz"
	}
	return o.Prefix
}

func (o Options) subject(s string) string {
	if rest, ok := strings.CutPrefix(s, "tenaz."); ok {
		return o.prefix() + "." + rest
	}
	return s
}

// parts is the partition count Streams and Buckets lay out.
func (o Options) parts() int { return max(o.Partitions, 1) }

func (o Options) replicas() int {
	if o.Replicas <= 0 {
		return 1
	}
	return o.Replicas
}

// Place is the placement of config's streams.cluster and streams.tags:
// nil when both are empty (the server places the streams).
func Place(cluster string, tags []string) *jetstream.Placement {
	if cluster == "" && len(tags) == 0 {
		return nil
	}
	return &jetstream.Placement{Cluster: cluster, Tags: tags}
}

func decode(name string, v any) error {
	b, err := files.ReadFile(path.Join("data", name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("streams: %s: %w", name, err)
	}
	return nil
}

func names(prefix string) []string {
	ents, _ := fs.Glob(files, "data/"+prefix+"-*.json")
	for i, e := range ents {
		ents[i] = path.Base(e)
	}
	return ents
}

// Streams returns every stream config, adapted to o: EVENTS once per
// partition.
func Streams(o Options) ([]jetstream.StreamConfig, error) {
	var out []jetstream.StreamConfig
	for _, n := range names("stream") {
		var c jetstream.StreamConfig
		if err := decode(n, &c); err != nil {
			return nil, err
		}
		if c.Name == StreamEvents {
			for p := range o.parts() {
				out = append(out, o.eventsStream(c, p))
			}
			continue
		}
		for i, s := range c.Subjects {
			c.Subjects[i] = o.subject(s)
		}
		if c.Name == streamAdvisories {
			c.Subjects = o.advisorySubjects(c.Subjects)
		}
		c.Name = StreamName(o.prefix(), c.Name)
		c.Replicas = o.replicas()
		c.Placement = o.Placement
		if c.Name == StreamName(o.prefix(), StreamDead) {
			if o.DeadMaxAge > 0 {
				c.MaxAge = o.DeadMaxAge
				c.Duplicates = min(c.Duplicates, c.MaxAge) // the server refuses a window beyond max_age
			}
			if o.DeadMaxBytes > 0 {
				c.MaxBytes = o.DeadMaxBytes
			}
		}
		if c.Name == StreamName(o.prefix(), StreamAudit) && o.AuditMaxAge > 0 {
			c.MaxAge = o.AuditMaxAge
			c.Duplicates = min(c.Duplicates, c.MaxAge)
		}
		out = append(out, c)
	}
	return out, nil
}

// StreamAudit is the name of the audit archive (data/stream-audit.json).
const StreamAudit = "TENAZ_AUDIT"

// StreamDead is the name of the dead-letter stream (data/stream-dead.json).
const StreamDead = "DEAD"

// Buckets returns every KV bucket config, adapted to o: the state bucket
// once per partition.
func Buckets(o Options) ([]jetstream.KeyValueConfig, error) {
	var out []jetstream.KeyValueConfig
	for _, n := range names("kv") {
		var c jetstream.KeyValueConfig
		if err := decode(n, &c); err != nil {
			return nil, err
		}
		c.Replicas = o.replicas()
		c.Placement = o.Placement
		if c.Bucket == BucketState {
			for p := range o.parts() {
				pc := c
				pc.Bucket = StateBucket(o.prefix(), p)
				if p > 0 {
					pc.Description = fmt.Sprintf("Partition %d of %s: %s", p, StateBucket(o.prefix(), 0), c.Description)
				}
				out = append(out, pc)
			}
			continue
		}
		c.Bucket = BucketName(o.prefix(), c.Bucket)
		out = append(out, c)
	}
	return out, nil
}

// IngestConsumer is the shared durable consumer of INTAKE.
func IngestConsumer(o Options) (jetstream.ConsumerConfig, error) {
	var c jetstream.ConsumerConfig
	if err := decodeConsumer("consumer-ingest.json", &c); err != nil {
		return c, err
	}
	c.FilterSubject = o.subject(c.FilterSubject)
	c.Replicas = 0 // inherit the stream's
	return c, nil
}

// PollerConsumer is the poller's shared durable consumer of the timers
// (callback deadlines and polls) on partition p's EVENTS stream.
func PollerConsumer(o Options, p int) (jetstream.ConsumerConfig, error) {
	var c jetstream.ConsumerConfig
	if err := decodeConsumer("consumer-poller.json", &c); err != nil {
		return c, err
	}
	c.FilterSubject = o.inPartition(c.FilterSubject, p)
	c.Replicas = 0 // inherit the stream's
	return c, nil
}

// DeadletterConsumer is the durable consumer of TENAZ_ADVISORIES.
func DeadletterConsumer() (jetstream.ConsumerConfig, error) {
	return DataConsumer("consumer-deadletter.json")
}

// DataConsumer is the consumer config of a data file (consumer-*.json),
// as the file has it: its filter under the default prefix.
func DataConsumer(file string) (jetstream.ConsumerConfig, error) {
	var c jetstream.ConsumerConfig
	err := decodeConsumer(file, &c)
	return c, err
}

// consumers holds each consumer file decoded once: a dispatch consumer's
// config is made for every account that becomes live (by ingest and by
// its owner), and decoding the JSON each time was 4% of tenaz's CPU in
// the 10,000-account run.
var consumers sync.Map // file name → jetstream.ConsumerConfig

// decodeConsumer sets c to the consumer file name's config, a copy the
// caller may change.
func decodeConsumer(name string, c *jetstream.ConsumerConfig) error {
	v, ok := consumers.Load(name)
	if !ok {
		var fresh jetstream.ConsumerConfig
		if err := decode(name, &fresh); err != nil {
			return err
		}
		v, _ = consumers.LoadOrStore(name, fresh)
	}
	*c = v.(jetstream.ConsumerConfig)
	c.BackOff = slices.Clone(c.BackOff)
	c.FilterSubjects = slices.Clone(c.FilterSubjects)
	c.PriorityGroups = slices.Clone(c.PriorityGroups)
	c.Metadata = maps.Clone(c.Metadata)
	return nil
}

// Apply creates or updates every stream and bucket and the shared
// consumers, and returns the store's layout. It is idempotent: running it
// on every start-up is the intended use.
//
// The layout is the store's: a new store gets o.Partitions (or
// DefaultPartitions) and its records placed by event id, both recorded in
// EVENTS' metadata; an existing one keeps its own (a store from before
// partitions has one, and its records by account). A configured count
// that differs from an existing store's is refused (ErrPartitions): its
// events would be looked for where they are not.
func Apply(ctx context.Context, js jetstream.JetStream, o Options) (Layout, error) {
	l, err := StoreLayout(ctx, js, o.prefix())
	if err != nil {
		return Layout{}, err
	}
	n := l.Partitions
	if n > 0 {
		o.RecordsByAccount, o.epoch = !l.RecordsByEvent, l.Epoch
	}
	switch {
	case n == 0 && o.Partitions == 0:
		o.Partitions = DefaultPartitions
	case n == 0:
	case o.Partitions == 0:
		o.Partitions = n
	case o.Partitions != n:
		return Layout{}, fmt.Errorf("%w: the store has %d, the config asks for %d; leave streams.partitions unset (or set it to %d) to keep the store's (a store keeps the count it was made with)", ErrPartitions, n, o.Partitions, n)
	}
	ss, err := Streams(o)
	if err != nil {
		return Layout{}, err
	}
	for _, c := range ss {
		if c.Retention, err = keptRetention(ctx, js, c); err != nil {
			return Layout{}, err
		}
		if _, err := js.CreateOrUpdateStream(ctx, c); err != nil {
			return Layout{}, fmt.Errorf("streams: apply stream %s: %w", c.Name, err)
		}
	}
	bs, err := Buckets(o)
	if err != nil {
		return Layout{}, err
	}
	for _, c := range bs {
		if _, err := js.CreateOrUpdateKeyValue(ctx, c); err != nil {
			return Layout{}, fmt.Errorf("streams: apply bucket %s: %w", c.Bucket, err)
		}
	}
	ic, err := IngestConsumer(o)
	if err != nil {
		return Layout{}, err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamName(o.prefix(), StreamIntake), ic); err != nil {
		return Layout{}, fmt.Errorf("streams: apply consumer %s: %w", ic.Durable, err)
	}
	for p := range o.parts() {
		pc, err := PollerConsumer(o, p)
		if err != nil {
			return Layout{}, err
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, EventsStream(o.prefix(), p), pc); err != nil {
			return Layout{}, fmt.Errorf("streams: apply consumer %s on %s: %w", pc.Durable, EventsStream(o.prefix(), p), err)
		}
	}
	dc, err := DeadletterConsumer()
	if err != nil {
		return Layout{}, err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamName(o.prefix(), streamAdvisories), dc); err != nil {
		return Layout{}, fmt.Errorf("streams: apply consumer %s: %w", dc.Durable, err)
	}
	return Layout{Partitions: o.parts(), RecordsByEvent: !o.RecordsByAccount, Epoch: o.epoch}, nil
}

// keptRetention is the retention c is applied with: its own, unless the
// store's stream is a work queue from before (INTAKE and EVENTS were; now
// they are trimmed), which the server cannot change and which then stays
// one.
func keptRetention(ctx context.Context, js jetstream.JetStream, c jetstream.StreamConfig) (jetstream.RetentionPolicy, error) {
	st, err := js.Stream(ctx, c.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return c.Retention, nil
	}
	if err != nil {
		return 0, fmt.Errorf("streams: read stream %s: %w", c.Name, err)
	}
	if st.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy {
		return jetstream.WorkQueuePolicy, nil
	}
	return c.Retention, nil
}
