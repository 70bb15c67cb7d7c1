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

// Partitions. An event's dispatch messages, its schedule and its state
// record live in the partition of its account: each partition is its own
// EVENTS stream and its own state bucket, so their writes (each stream
// fsyncs one write at a time) run in parallel, and on a cluster their
// leaders spread over the nodes. An account is in exactly one partition,
// so its order and its limits stay in one place.
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

// Names of the partitioned stream and bucket, as partition 0 has them.
const (
	StreamEvents = "EVENTS"
	BucketState  = "tenaz_state"
	// streamAdvisories keeps the server's advisories (data/stream-advisories.json).
	streamAdvisories = "TENAZ_ADVISORIES"
	// metaPartitions is the key of the partition count in EVENTS' metadata.
	metaPartitions = "tenaz_partitions"
)

// ErrPartitions is returned by Apply when the configured partition count
// is not the store's.
var ErrPartitions = errors.New("streams.partitions: not the store's partition count")

// PartitionOf is account's partition of n: FNV-1a of the name, modulo n.
func PartitionOf(account string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(account))
	return int(h.Sum32() % uint32(n))
}

// EventsStream is partition p's EVENTS stream.
func EventsStream(p int) string {
	if p == 0 {
		return StreamEvents
	}
	return StreamEvents + "_" + strconv.Itoa(p)
}

// StateBucket is partition p's state bucket.
func StateBucket(p int) string {
	if p == 0 {
		return BucketState
	}
	return BucketState + "_" + strconv.Itoa(p)
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
	c.Name = EventsStream(p)
	subs := make([]string, len(c.Subjects))
	for i, s := range c.Subjects {
		subs[i] = o.inPartition(s, p)
	}
	c.Subjects = subs
	c.Replicas = o.replicas()
	c.Placement = o.Placement
	if p == 0 {
		c.Metadata = map[string]string{metaPartitions: strconv.Itoa(o.parts())}
	} else {
		c.Description = fmt.Sprintf("Partition %d of EVENTS (subjects under %s): %s", p, Root(o.prefix(), p), c.Description)
	}
	return c
}

// advisorySubjects repeats the data file's EVENTS advisory subjects for
// every partition's stream.
func (o Options) advisorySubjects(subs []string) []string {
	var out []string
	for _, s := range subs {
		if !strings.Contains(s, "."+StreamEvents+".") {
			out = append(out, s)
			continue
		}
		for p := range o.parts() {
			out = append(out, strings.Replace(s, "."+StreamEvents+".", "."+EventsStream(p)+".", 1))
		}
	}
	return out
}

// storeCount is the partition count of the store on js: 0 when there is
// no store yet, 1 for a store from before partitions.
func storeCount(ctx context.Context, js jetstream.JetStream) (int, error) {
	s, err := js.Stream(ctx, StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("streams: read %s: %w", StreamEvents, err)
	}
	v, ok := s.CachedInfo().Config.Metadata[metaPartitions]
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("streams: %s's metadata %s is %q, not a partition count", StreamEvents, metaPartitions, v)
	}
	return n, nil
}

// Partitions reads the store's partition count (0: no store yet), for a
// service that does not apply the layout itself.
func Partitions(ctx context.Context, js jetstream.JetStream) (int, error) {
	return storeCount(ctx, js)
}
