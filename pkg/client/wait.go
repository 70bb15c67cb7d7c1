package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/streams"
)

// Polling bounds of Wait: the first look again after pollMin, doubling up
// to pollMax. Over NATS, where the record's changes are watched, Wait
// looks again every watchSafety only in case the watch missed a change.
const (
	pollMin     = 100 * time.Millisecond
	pollMax     = 2 * time.Second
	watchSafety = 10 * time.Second
)

// Settled reports whether an event in state s has its outcome: done or
// cancelled (terminal), or dead or manual_review (parked until an
// operator acts). Wait returns at such a state.
func Settled(s state.State) bool { return s.Terminal() || s.Parked() }

// Wait follows an event until it is Settled and returns it then. It
// returns early with ctx's error (and the last view read) when ctx ends,
// or with a call's error other than ErrUnavailable and ErrNotFound: an
// event answered "accepted" may be stored a moment after Submit returns,
// so an id tenaz does not know yet is waited for too.
//
// Over NATS, Wait watches the event's record in the state bucket (a
// MetaOnly watch: the record's changes, not its contents, which are read
// with Get) and reads it again at each change. Without permission to
// watch, and over HTTP, it polls with a backoff from 100ms to 2s.
func (c *Client) Wait(ctx context.Context, id string) (event.View, error) {
	changed, stop := c.watch(ctx, id)
	defer stop()
	delay := pollMin
	if changed != nil {
		delay = watchSafety // the watch says when to look again
	}
	var last event.View
	for {
		v, err := c.Get(ctx, id)
		switch {
		case err == nil:
			last = v
			if Settled(v.Status) {
				return v, nil
			}
		case ctx.Err() != nil:
		case !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNotFound):
			return last, err
		}
		t := time.NewTimer(delay)
		select {
		case <-changed:
		case <-t.C:
			if changed == nil {
				delay = min(2*delay, pollMax)
			}
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			return last, fmt.Errorf("wait for %s (last seen %s): %w", id, orUnknown(last.Status), ctx.Err())
		}
	}
}

func orUnknown(s state.State) state.State {
	if s == "" {
		return "unknown"
	}
	return s
}

// watch signals changes of id's record on the returned channel, when the
// transport can watch (NATS with JetStream permissions); otherwise the
// channel is nil and never ready. stop ends the watch.
func (c *Client) watch(ctx context.Context, id string) (<-chan struct{}, func()) {
	nt, ok := c.t.(*natsTransport)
	if !ok {
		return nil, func() {}
	}
	js, err := jetstream.New(nt.nc)
	if err != nil {
		return nil, func() {}
	}
	// A record is in its event id's partition; in a store from before,
	// its account's, which the id does not tell: then watch the key in
	// every partition's bucket.
	l, err := streams.StoreLayout(ctx, js, c.o.prefix)
	if err != nil || l.Partitions == 0 {
		return nil, func() {}
	}
	parts := make([]int, 0, l.Partitions)
	if l.RecordsByEvent {
		parts = append(parts, streams.PartitionOf(id, l.Partitions))
	} else {
		for p := range l.Partitions {
			parts = append(parts, p)
		}
	}
	changed := make(chan struct{}, 1)
	var ws []jetstream.KeyWatcher
	stop := func() {
		for _, w := range ws {
			_ = w.Stop()
		}
	}
	for _, p := range parts {
		kv, err := js.KeyValue(ctx, streams.StateBucket(c.o.prefix, p))
		if err != nil {
			stop()
			return nil, func() {}
		}
		w, err := kv.Watch(ctx, id, jetstream.MetaOnly())
		if err != nil {
			stop()
			return nil, func() {}
		}
		ws = append(ws, w)
		go func() {
			for range w.Updates() { // closed by Stop
				select {
				case changed <- struct{}{}:
				default: // one pending signal is enough: Get reads the latest
				}
			}
		}()
	}
	return changed, stop
}
