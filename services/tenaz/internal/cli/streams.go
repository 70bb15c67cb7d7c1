package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/streams"
)

// StreamsCmd is `tenaz streams`.
type StreamsCmd struct {
	Connection `embed:""`

	Apply   StreamsApplyCmd   `cmd:"" help:"Create or update every stream, bucket and shared consumer (idempotent; the services do it at start-up too)."`
	Status  StreamsStatusCmd  `cmd:"" help:"Each stream's messages, bytes and consumers, each consumer's pending, each bucket's values (exit 3 if any is missing)."`
	Migrate StreamsMigrateCmd `cmd:"" help:"Move the store to another partition count (offline: stop the services first; resumable; --dry-run shows what would move)."`
}

// StreamsApplyCmd is `tenaz streams apply`.
type StreamsApplyCmd struct {
	Replicas   int      `help:"Replicas of every stream and bucket (1, 3 or 5). Default: what INTAKE has now, else 1."`
	Cluster    string   `help:"Place every stream and bucket in this cluster (config streams.cluster). Default: INTAKE's placement now, else none."`
	Tag        []string `help:"Place on servers with this tag (repeatable; config streams.tags). Default: INTAKE's placement now, else none."`
	Partitions int      `help:"Partitions of the events' dispatch and state (config streams.partitions). Default: the store's count, else 4. Another count than the store's is refused."`
}

// AppliedLayout is the JSON of `streams apply`.
type AppliedLayout struct {
	Prefix   string   `json:"prefix"`
	Replicas int      `json:"replicas"`
	Cluster  string   `json:"cluster,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	Streams  []string `json:"streams"`
	Buckets  []string `json:"buckets"`
}

// Run applies the layout.
func (c *StreamsApplyCmd) Run(cl *Connection, env *Env) error {
	switch c.Replicas {
	case 0, 1, 3, 5:
	default:
		return failf(ErrUsage, "--replicas %d: want 1, 3 or 5", c.Replicas)
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*cl.Timeout)
	defer cancel()
	// Unless told otherwise, keep the replicas and placement the layout has
	// now (INTAKE's), so that applying never moves or shrinks it.
	subj := names.NewSubjects(cl.Prefix)
	replicas, placement := 1, (*jetstream.Placement)(nil)
	if st, err := js.Stream(ctx, subj.Stream(names.StreamIntake)); err == nil {
		replicas, placement = max(st.CachedInfo().Config.Replicas, 1), st.CachedInfo().Config.Placement
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return jsError("read stream "+subj.Stream(names.StreamIntake), err)
	}
	if c.Replicas != 0 {
		replicas = c.Replicas
	}
	if c.Cluster != "" || len(c.Tag) > 0 {
		placement = streams.Place(c.Cluster, c.Tag)
	}
	o := streams.Options{Prefix: cl.Prefix, Replicas: replicas, Placement: placement}
	// DEAD's bounds come from deadletter.retention and max_bytes, which
	// the services apply; keep the ones DEAD has.
	if st, err := js.Stream(ctx, subj.Stream(names.StreamDead)); err == nil {
		o.DeadMaxAge, o.DeadMaxBytes = st.CachedInfo().Config.MaxAge, st.CachedInfo().Config.MaxBytes
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return jsError("read stream "+subj.Stream(names.StreamDead), err)
	}
	// So is TENAZ_AUDIT's audit.retention.
	if st, err := js.Stream(ctx, subj.Stream(streams.StreamAudit)); err == nil {
		o.AuditMaxAge = st.CachedInfo().Config.MaxAge
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return jsError("read stream "+subj.Stream(streams.StreamAudit), err)
	}
	o.Partitions = c.Partitions
	l, err := streams.Apply(ctx, js, o)
	if errors.Is(err, streams.ErrPartitions) {
		return failf(ErrUsage, "--partitions: %v", err)
	}
	if err != nil {
		return jsError("apply", err)
	}
	o.Partitions, o.RecordsByAccount = l.Partitions, !l.RecordsByEvent
	out := AppliedLayout{Prefix: cl.Prefix, Replicas: replicas}
	if placement != nil {
		out.Cluster, out.Tags = placement.Cluster, placement.Tags
	}
	ss, _ := streams.Streams(o)
	for _, sc := range ss {
		out.Streams = append(out.Streams, sc.Name)
	}
	bs, _ := streams.Buckets(o)
	for _, b := range bs {
		out.Buckets = append(out.Buckets, b.Bucket)
	}
	return s.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "applied with prefix %q and %d replica(s)", out.Prefix, out.Replicas)
		if out.Cluster != "" || len(out.Tags) > 0 {
			fmt.Fprintf(w, ", placed in cluster %q tags %v", out.Cluster, out.Tags)
		}
		fmt.Fprintln(w)
		row(w, "streams:", strings.Join(out.Streams, " "))
		row(w, "buckets:", strings.Join(out.Buckets, " "))
	})
}

// jsError marks JetStream timeouts and missing JetStream as unavailable.
func jsError(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return failf(ErrUnavailable, "%s: %v", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// StreamsStatusCmd is `tenaz streams status`.
type StreamsStatusCmd struct{}

// StreamStatus is one stream in `streams status`.
type StreamStatus struct {
	Name      string   `json:"name"`
	Missing   bool     `json:"missing,omitempty"`
	Subjects  []string `json:"subjects,omitempty"`
	Messages  uint64   `json:"messages"`
	Bytes     uint64   `json:"bytes"`
	Consumers int      `json:"consumers"`
	Replicas  int      `json:"replicas,omitempty"`
}

// ConsumerStatus is one consumer in `streams status`.
type ConsumerStatus struct {
	Stream      string `json:"stream"`
	Name        string `json:"name"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting"`
	Paused      bool   `json:"paused,omitempty"`
}

// BucketStatus is one KV bucket in `streams status`.
type BucketStatus struct {
	Bucket  string        `json:"bucket"`
	Missing bool          `json:"missing,omitempty"`
	Values  uint64        `json:"values"`
	Bytes   uint64        `json:"bytes"`
	History int64         `json:"history"`
	TTL     time.Duration `json:"ttl_ns,omitempty"`
}

// Status is the JSON of `streams status`.
type Status struct {
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
	Buckets   []BucketStatus   `json:"buckets"`
	// Migrating says that a `streams migrate` is unfinished, and how to
	// finish it.
	Migrating string `json:"migrating,omitempty"`
}

// Run prints the status.
func (c *StreamsStatusCmd) Run(cl *Connection, env *Env) error {
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	js, err := jetStream(s.nc, s.nctx)
	if err != nil {
		return err
	}
	o := streams.Options{Prefix: cl.Prefix}
	migrating := ""
	{
		ctx, cancel := context.WithTimeout(context.Background(), cl.Timeout)
		n, err := streams.Partitions(ctx, js, cl.Prefix)
		if errors.Is(err, streams.ErrMigrating) {
			// Half moved: show both layouts' partitions.
			migrating = err.Error()
			n, err = migratingCount(ctx, js, cl.Prefix)
		}
		cancel()
		if err != nil {
			return jsError("partitions", err)
		}
		o.Partitions = n
	}
	ss, err := streams.Streams(o)
	if err != nil {
		return err
	}
	bs, err := streams.Buckets(o)
	if err != nil {
		return err
	}
	out := Status{Streams: []StreamStatus{}, Consumers: []ConsumerStatus{}, Buckets: []BucketStatus{}, Migrating: migrating}
	var missing []string
	for _, sc := range ss {
		ctx, cancel := context.WithTimeout(context.Background(), cl.Timeout)
		st, err := js.Stream(ctx, sc.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			cancel()
			out.Streams = append(out.Streams, StreamStatus{Name: sc.Name, Missing: true})
			missing = append(missing, "stream "+sc.Name)
			continue
		}
		if err != nil {
			cancel()
			return jsError("stream "+sc.Name, err)
		}
		info := st.CachedInfo()
		out.Streams = append(out.Streams, StreamStatus{Name: sc.Name, Subjects: info.Config.Subjects, Messages: info.State.Msgs,
			Bytes: info.State.Bytes, Consumers: info.State.Consumers, Replicas: info.Config.Replicas})
		l := st.ListConsumers(ctx)
		var cs []ConsumerStatus
		for ci := range l.Info() {
			cs = append(cs, ConsumerStatus{Stream: sc.Name, Name: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
				Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting, Paused: ci.Paused})
		}
		err = l.Err()
		cancel()
		if err != nil {
			return jsError("consumers of "+sc.Name, err)
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
		out.Consumers = append(out.Consumers, cs...)
	}
	for _, bc := range bs {
		ctx, cancel := context.WithTimeout(context.Background(), cl.Timeout)
		kv, err := js.KeyValue(ctx, bc.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			cancel()
			out.Buckets = append(out.Buckets, BucketStatus{Bucket: bc.Bucket, Missing: true})
			missing = append(missing, "bucket "+bc.Bucket)
			continue
		}
		if err != nil {
			cancel()
			return jsError("bucket "+bc.Bucket, err)
		}
		st, err := kv.Status(ctx)
		cancel()
		if err != nil {
			return jsError("bucket "+bc.Bucket, err)
		}
		out.Buckets = append(out.Buckets, BucketStatus{Bucket: bc.Bucket, Values: st.Values(), Bytes: st.Bytes(), History: st.History(), TTL: st.TTL()})
	}
	if err := s.emit(out, func(w io.Writer) { printStatus(w, out) }); err != nil {
		return err
	}
	if len(missing) > 0 {
		return failf(ErrNotFound, "missing: %s (run: tenaz streams apply)", strings.Join(missing, ", "))
	}
	return nil
}

func printStatus(w io.Writer, st Status) {
	if st.Migrating != "" {
		fmt.Fprintf(w, "%s\n\n", st.Migrating)
	}
	row(w, "STREAM", "MESSAGES", "BYTES", "CONSUMERS", "REPLICAS", "SUBJECTS")
	for _, s := range st.Streams {
		if s.Missing {
			row(w, s.Name, "missing", "", "", "", "")
			continue
		}
		row(w, s.Name, s.Messages, bytesText(s.Bytes), s.Consumers, s.Replicas, strings.Join(s.Subjects, " "))
	}
	fmt.Fprintln(w)
	row(w, "CONSUMER", "STREAM", "PENDING", "ACK PENDING", "REDELIVERED", "WAITING", "PAUSED")
	for _, c := range st.Consumers {
		paused := ""
		if c.Paused {
			paused = "yes"
		}
		row(w, c.Name, c.Stream, c.Pending, c.AckPending, c.Redelivered, c.Waiting, paused)
	}
	fmt.Fprintln(w)
	row(w, "BUCKET", "VALUES", "BYTES", "HISTORY", "TTL")
	for _, b := range st.Buckets {
		if b.Missing {
			row(w, b.Bucket, "missing", "", "", "")
			continue
		}
		ttl := ""
		if b.TTL > 0 {
			ttl = b.TTL.String()
		}
		row(w, b.Bucket, b.Values, bytesText(b.Bytes), b.History, ttl)
	}
}

// bytesText prints a byte count in binary units.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
