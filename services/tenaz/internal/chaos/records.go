package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/streams"
)

// scan reads every record of every partition's state bucket once, giving
// each value to fn.
func scan(ctx context.Context, js jetstream.JetStream, fn func(key string, value []byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	n, err := streams.Partitions(ctx, js, "")
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	for p := range n {
		if err := scanBucket(ctx, js, streams.StateBucket("", p), fn); err != nil {
			return err
		}
	}
	return nil
}

func scanBucket(ctx context.Context, js jetstream.JetStream, bucket string, fn func(key string, value []byte) error) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return fmt.Errorf("scan: %w", context.Cause(ctx))
		case e = <-w.Updates():
		}
		if e == nil {
			return nil
		}
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if err := fn(e.Key(), e.Value()); err != nil {
			return err
		}
	}
}

// heads reads the head of every record.
func heads(ctx context.Context, js jetstream.JetStream) (map[string]state.Head, error) {
	out := map[string]state.Head{}
	err := scan(ctx, js, func(key string, v []byte) error {
		h, err := state.DecodeHead(v)
		if err != nil {
			return fmt.Errorf("record %s: %w", key, err)
		}
		out[key] = h
		return nil
	})
	return out, err
}

// records reads every record whole.
func records(ctx context.Context, js jetstream.JetStream) (map[string]state.Record, error) {
	out := map[string]state.Record{}
	err := scan(ctx, js, func(key string, v []byte) error {
		var r state.Record
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("record %s: %w", key, err)
		}
		out[key] = r
		return nil
	})
	return out, err
}

// finished reports whether an event is where the crash suite wants every
// accepted event to end: done, dead, manual_review or cancelled.
func finished(s state.State) bool { return s.Terminal() || s.Parked() }

// reconcileReport is the poller's micro answer to reconcile.
type reconcileReport struct {
	Scanned  int            `json:"scanned"`
	Overdue  int            `json:"overdue"`
	Repaired map[string]int `json:"repaired"`
	Failed   int            `json:"failed"`
}

func (r reconcileReport) repairs() int {
	n := 0
	for _, v := range r.Repaired {
		n += v
	}
	return n
}

// reconcile runs one reconciler sweep through the poller's micro endpoint.
func reconcile(nc *nats.Conn) (reconcileReport, error) {
	var rep reconcileReport
	var last error
	for range 5 { // a poller may be starting again
		m, err := nc.Request(names.DefaultPrefix+".api.poller.reconcile", nil, 3*time.Minute)
		if err != nil {
			last = err
			time.Sleep(2 * time.Second)
			continue
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			return rep, fmt.Errorf("reconcile: %s %s", code, m.Header.Get("Nats-Service-Error"))
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			return rep, fmt.Errorf("reconcile: %w: %s", err, m.Data)
		}
		return rep, nil
	}
	return rep, errors.Join(errors.New("reconcile: no answer"), last)
}

// intakeBacklog is how many submissions wait in INTAKE for ingest, at
// most: its consumer's pending messages, and those above its ack floor
// (unacknowledged, or acked for an anchor that holds the floor and waits
// with them; docs/architecture.md). The stream also holds keeper messages
// that nobody consumes.
func intakeBacklog(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, names.StreamIntake, "ingest")
	if err != nil {
		return 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.NumPending + info.Delivered.Stream - info.AckFloor.Stream, nil
}
