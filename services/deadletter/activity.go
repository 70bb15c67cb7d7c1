package deadletter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/state"
)

// The overview's figures over time (throughput, retry rate, p95 wait)
// come from the state buckets' change feed: every write of a record is a
// message of its partition's KV_<bucket> stream, which every replica reads
// alike, so the figures are the cluster's, not a process's, and nothing is
// written for them. A bucket keeps only the newest revision of a record,
// but that revision carries the record's whole history: a read counts
// the history entries stamped after the previous read's last change (the
// server's time of it), so an event that went from accepted to done
// between two reads is counted whole from its last revision. The feed is
// read only while someone looks at the overview, at most every
// activityEvery (one read serves every viewer of the replica), from where
// the previous read ended. A read takes at most activityCap messages of a
// partition: when more records changed in between, the newest activityCap
// are read and their counts scaled to the whole (a sample), so a refresh
// costs the same whatever the load. A first read (or one after
// activityIdle without a viewer) takes the newest activityCap records and
// counts their last activityWindow. The counts live in memory, one bucket
// per account and minute, for activityWindow.

const (
	activityWindow = 30 * time.Minute
	activityEvery  = 2 * time.Second
	activityCap    = 5000
	// waitSample is how many waits one account's minute keeps (a
	// reservoir) for its p95.
	waitSample = 256
	// activityIdle: a replica nobody asked for the figures that long
	// starts again from the newest changes (and keeps no counts meanwhile).
	activityIdle = 10 * time.Minute
)

// minute is one account's changes in one minute.
type minute struct {
	Accepted, Attempts, Retries, Done, Dead float64
	waits                                   []float64 // seconds from due to the first attempt
	seen                                    int       // waits observed
}

func (m *minute) wait(d time.Duration, r *rand.Rand) {
	m.seen++
	s := max(d, 0).Seconds()
	if len(m.waits) < waitSample {
		m.waits = append(m.waits, s)
		return
	}
	if i := r.IntN(m.seen); i < waitSample {
		m.waits[i] = s
	}
}

type activity struct {
	read sync.Mutex // one read of the feed at a time

	mu      sync.Mutex
	at      time.Time                    // the last read
	asked   time.Time                    // the last time someone wanted the figures
	next    map[int]uint64               // per partition, the first sequence not read yet
	cut     map[int]time.Time            // per partition, the server's time of the last change read
	minutes map[string]map[int64]*minute // account → unix minute
	sampled bool                         // the last read skipped changes
	took    time.Duration
	err     error
	rnd     *rand.Rand
}

func newActivity() *activity {
	return &activity{next: map[int]uint64{}, cut: map[int]time.Time{}, minutes: map[string]map[int64]*minute{}, rnd: rand.New(rand.NewPCG(1, 2))}
}

// activityNow brings the counts up to date (unless a read is recent) and
// returns when that is done or ctx ends.
func (s *Service) activityNow(ctx context.Context) {
	a := s.ui.activity
	a.read.Lock()
	defer a.read.Unlock()
	now := s.now()
	a.mu.Lock()
	fresh := now.Sub(a.at) < activityEvery
	if now.Sub(a.asked) > activityIdle {
		clear(a.next) // idle: start from the newest changes again
		clear(a.cut)
		clear(a.minutes)
	}
	a.asked = now
	a.mu.Unlock()
	if fresh {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	sampled := false
	for p := range s.subj.Parts() {
		sk, perr := s.readChanges(ctx, p, now)
		sampled = sampled || sk
		if perr != nil {
			err = perr
		}
	}
	a.mu.Lock()
	a.at, a.err, a.sampled, a.took = now, err, sampled, s.now().Sub(now)
	old := now.Add(-activityWindow).Unix() / 60
	for acct, ms := range a.minutes {
		for k := range ms {
			if k < old {
				delete(ms, k)
			}
		}
		if len(ms) == 0 {
			delete(a.minutes, acct)
		}
	}
	a.mu.Unlock()
}

// change is what the figures need of a stored record.
type change struct {
	Account   string    `json:"account"`
	UpdatedAt time.Time `json:"updated_at"`
}

type changeEntry struct {
	At      time.Time        `json:"at"`
	Action  state.ActionName `json:"action"`
	From    state.State      `json:"from"`
	To      state.State      `json:"to"`
	Attempt int              `json:"attempt"`
}

var historyKey = []byte(`,"history":`)

// decodeChange reads the account, the time of the change and the history
// of a stored record, leaving out its payload and result (history comes
// last: see state.DecodeHead).
func decodeChange(b []byte) (change, []changeEntry, error) {
	h, err := state.DecodeHead(b)
	if err != nil {
		return change{}, nil, err
	}
	c := change{Account: h.Account, UpdatedAt: h.UpdatedAt}
	i := bytes.LastIndex(b, historyKey)
	if i < 0 {
		return c, nil, nil
	}
	var hist []changeEntry
	err = json.NewDecoder(bytes.NewReader(b[i+len(historyKey):])).Decode(&hist)
	return c, hist, err
}

// readChanges folds partition p's changes since the last read into the
// counts; sampled reports that it read only the newest activityCap.
func (s *Service) readChanges(ctx context.Context, p int, now time.Time) (sampled bool, err error) {
	a := s.ui.activity
	bucket := s.subj.StateBucketOf(p)
	stream := "KV_" + bucket
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false, err
	}
	last := info.State.LastSeq
	a.mu.Lock()
	start, after := a.next[p], a.cut[p]
	a.mu.Unlock()
	since := now.Add(-activityWindow)
	if after.Before(since) {
		after = since
	}
	if start == 0 && last >= activityCap {
		start = last - activityCap + 1 // a first look: the newest changes
	}
	start = max(start, info.State.FirstSeq, 1)
	if last < start {
		a.mu.Lock()
		a.next[p] = start // an empty partition: what comes next is new
		a.mu.Unlock()
		return false, nil
	}
	total := last - start + 1
	if total > activityCap {
		start, sampled = last-activityCap+1, true
	}
	scale := float64(total) / float64(last-start+1)
	cons, err := s.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$KV." + bucket + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
	})
	if err != nil {
		return sampled, err
	}
	seq, cut := start-1, after
	for seq < last {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return sampled, err
		}
		n, more := 0, true
		a.mu.Lock()
		for m := range batch.Messages() {
			n++
			if meta, err := m.Metadata(); err == nil {
				seq, cut = meta.Sequence.Stream, meta.Timestamp
				more = meta.NumPending > 0
			}
			if len(m.Data()) == 0 || m.Headers().Get("KV-Operation") != "" {
				continue
			}
			c, hist, err := decodeChange(m.Data())
			if err != nil || !c.UpdatedAt.After(after) {
				continue
			}
			a.fold(c, hist, after, scale)
		}
		a.mu.Unlock()
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return sampled, err
		}
		if n == 0 || !more {
			break // read up to the newest (or the rest was deleted meanwhile)
		}
	}
	a.mu.Lock()
	a.next[p], a.cut[p] = seq+1, cut
	a.mu.Unlock()
	return sampled, nil
}

// fold counts the entries of a record's history stamped after after: what
// happened to it since the previous read. Called with a.mu held.
func (a *activity) fold(c change, hist []changeEntry, after time.Time, scale float64) {
	ms := a.minutes[c.Account]
	if ms == nil {
		ms = map[int64]*minute{}
		a.minutes[c.Account] = ms
	}
	for i := len(hist) - 1; i >= 0 && hist[i].At.After(after); i-- {
		h := hist[i]
		k := h.At.Unix() / 60
		m := ms[k]
		if m == nil {
			m = &minute{}
			ms[k] = m
		}
		switch {
		case h.Action == state.Accept || h.Action == state.Delay:
			m.Accepted += scale
		case h.To == state.Running && h.From != state.Running:
			m.Attempts += scale
			if h.Action == state.Claim && h.Attempt == 1 {
				// The wait runs from when the event became due (accepted,
				// its time came, replayed) to its first attempt.
				for j := i - 1; j >= 0; j-- {
					if hist[j].To == state.Pending {
						m.wait(h.At.Sub(hist[j].At), a.rnd)
						break
					}
				}
			}
		case h.Action == state.Retry:
			m.Retries += scale
		case h.To == state.Done && h.From != state.Done:
			m.Done += scale
		case h.To == state.Dead && h.From != state.Dead:
			m.Dead += scale
		}
	}
}

// point is one minute of the overview's charts.
type point struct {
	At                                      time.Time
	Accepted, Attempts, Retries, Done, Dead float64
	P95                                     float64 // seconds; 0 without a first attempt that minute
}

// activitySeries is the last activityWindow of account ("" for every
// account), a point a minute, oldest first; the last point is the minute
// under way.
func (s *Service) activitySeries(account string) (pts []point, sampled bool, took time.Duration, err error) {
	a := s.ui.activity
	a.mu.Lock()
	defer a.mu.Unlock()
	now := s.now()
	n := int(activityWindow / time.Minute)
	first := now.Unix()/60 - int64(n) + 1
	pts = make([]point, n)
	waits := make([][]float64, n)
	for acct, ms := range a.minutes {
		if account != "" && acct != account {
			continue
		}
		for k, m := range ms {
			i := int(k - first)
			if i < 0 || i >= n {
				continue
			}
			p := &pts[i]
			p.Accepted += m.Accepted
			p.Attempts += m.Attempts
			p.Retries += m.Retries
			p.Done += m.Done
			p.Dead += m.Dead
			waits[i] = append(waits[i], m.waits...)
		}
	}
	for i := range pts {
		pts[i].At = time.Unix((first+int64(i))*60, 0).UTC()
		pts[i].P95 = p95(waits[i])
	}
	return pts, a.sampled, a.took, a.err
}

// p95 is the 95th percentile of xs (0 for none).
func p95(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(float64(len(xs))*0.95))]
}

// recentWaits are the sampled waits of account's last k minutes.
func (s *Service) recentWaits(account string, k int) []float64 {
	a := s.ui.activity
	a.mu.Lock()
	defer a.mu.Unlock()
	from := s.now().Unix()/60 - int64(k) + 1
	var out []float64
	for acct, ms := range a.minutes {
		if account != "" && acct != account {
			continue
		}
		for key, m := range ms {
			if key >= from {
				out = append(out, m.waits...)
			}
		}
	}
	return out
}

// activityAccounts are the accounts with changes in the window.
func (s *Service) activityAccounts() []string {
	a := s.ui.activity
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.minutes))
	for acct, ms := range a.minutes {
		if len(ms) > 0 {
			out = append(out, acct)
		}
	}
	return out
}
