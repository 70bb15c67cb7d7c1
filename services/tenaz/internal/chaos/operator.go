package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// operator is a person at the dead-letter lists during the faults: every
// second or two it lists the dead events of an account that is not in
// its outage and replays a few, as one would once a provider is back. Its
// requests reach whichever deadletter replica answers, which the monkey
// kills like any other service, so a replay may be cut anywhere.
type operator struct {
	asked, replayed, unanswered atomic.Int64
}

// opsCall is one operator request over the services' NATS API.
func opsCall(ctx context.Context, nc *nats.Conn, endpoint string, req, rep any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return ops.Call(ctx, nc, ops.Subject(names.DefaultPrefix, endpoint), req, rep)
}

func (op *operator) run(ctx context.Context, nc *nats.Conn, outages map[string]window, rng *rand.Rand, every time.Duration) {
	accounts := make([]string, 0, len(outages))
	for a := range outages {
		accounts = append(accounts, a)
	}
	slices.Sort(accounts)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(float64(every) * (0.5 + rng.Float64()))):
		}
		var back []string
		for _, a := range accounts {
			if !outages[a].has(time.Now()) {
				back = append(back, a)
			}
		}
		if len(back) == 0 {
			continue
		}
		var list ops.ListReply
		if err := opsCall(ctx, nc, ops.DeadList, ops.ListRequest{Account: back[rng.IntN(len(back))], Limit: 10}, &list); err != nil {
			op.unanswered.Add(1)
			continue
		}
		var ids []string
		for _, it := range list.Items {
			if it.ID != "" {
				ids = append(ids, it.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		op.asked.Add(int64(len(ids)))
		var rep ops.ReplayReply
		if err := opsCall(ctx, nc, ops.DeadReplay, ops.ReplayRequest{IDs: ids, Reason: "chaos: the provider is back"}, &rep); err != nil {
			op.unanswered.Add(1)
			continue
		}
		op.replayed.Add(int64(rep.Replayed))
	}
}

// listed is every event id in the dead (or review) list, all pages.
func listed(ctx context.Context, nc *nats.Conn, st state.State) (map[string]bool, error) {
	endpoint := ops.DeadList
	if st == state.ManualReview {
		endpoint = ops.ReviewList
	}
	ids := map[string]bool{}
	q := ops.ListRequest{Limit: ops.MaxLimit}
	for {
		var page ops.ListReply
		if err := opsCall(ctx, nc, endpoint, q, &page); err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			if it.ID != "" {
				ids[it.ID] = true
			}
		}
		if q.Cursor = page.NextCursor; q.Cursor == "" {
			return ids, nil
		}
	}
}

// listsAgree waits, up to bound, until the dead and review lists hold
// exactly the events whose records are dead and in review, and returns
// what still differs.
func listsAgree(ctx context.Context, nc *nats.Conn, recs map[string]state.Record, bound time.Duration) []string {
	deadline := time.Now().Add(bound)
	for {
		var diff []string
		for _, st := range []state.State{state.Dead, state.ManualReview} {
			ids, err := listed(ctx, nc, st)
			if err != nil {
				diff = append(diff, fmt.Sprintf("the %s list could not be read: %v", st, err))
				continue
			}
			for id, rec := range recs {
				if rec.Status == st && !ids[id] {
					diff = append(diff, fmt.Sprintf("%s: %s, not listed", id, st))
				}
			}
			for id := range ids {
				switch rec, ok := recs[id]; {
				case !ok:
					diff = append(diff, fmt.Sprintf("%s: listed as %s, no record", id, st))
				case rec.Status != st:
					diff = append(diff, fmt.Sprintf("%s: listed as %s, record %s", id, st, rec.Status))
				}
			}
		}
		if len(diff) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			slices.Sort(diff)
			return diff
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
