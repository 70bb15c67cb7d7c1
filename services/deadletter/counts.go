package deadletter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/state"
)

// The screen's retrying and scheduled tabs have no feed of their own: they
// come from a scan of the tenaz_state bucket (the last value of every key,
// read through an ordered consumer), done at most every counts_every and
// only when someone looks; a page view in between is served from the cache
// and a stale cache starts a refresh in the background.

// sampleSize is how many events of each scanned state the tabs list.
const sampleSize = 100

// stateSample is one event in a retrying/scheduled tab.
type stateSample struct {
	ID        string     `json:"id"`
	Account   string     `json:"account"`
	Kind      string     `json:"kind"`
	Stage     string     `json:"stage"`
	Attempts  int        `json:"attempts"`
	NextRunAt *time.Time `json:"next_run_at"`
	Error     string     `json:"error,omitempty"`
}

// scan is the result of one pass over tenaz_state.
type scan struct {
	At     time.Time
	Took   time.Duration
	Counts map[state.State]int
	// ByAccount counts the states of each account (the overview's backlog).
	ByAccount map[string]map[state.State]int
	Samples   map[state.State][]stateSample // soonest next_run_at first
	Err       error
}

type tabCounts struct {
	every time.Duration

	mu      sync.Mutex
	last    *scan
	running bool
	closed  bool // the service is stopping: start no scan
}

// scanned returns the last scan, starting a new one in the background if
// it is older than every (and waiting for it when there is none yet, up to
// wait).
func (s *Service) scanned(ctx context.Context, wait time.Duration) *scan {
	t := s.tabs
	t.mu.Lock()
	last := t.last
	stale := last == nil || s.now().Sub(last.At) >= t.every
	start := stale && !t.running && !t.closed
	if start {
		t.running = true
		s.bg.Add(1) // under t.mu: Stop closes t before it waits for s.bg
	}
	t.mu.Unlock()
	if start {
		done := make(chan struct{})
		go func() {
			defer s.bg.Done()
			defer close(done)
			sc := s.scanStates(s.runCtx)
			t.mu.Lock()
			t.last, t.running = sc, false
			t.mu.Unlock()
		}()
		if last == nil {
			select {
			case <-done:
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// scanStates reads the last value of every record and counts the states.
func (s *Service) scanStates(ctx context.Context) *scan {
	start := s.now()
	sc := &scan{At: start, Counts: map[state.State]int{}, ByAccount: map[string]map[state.State]int{}, Samples: map[state.State][]stateSample{}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for p := range s.subj.Parts() {
		if sc.Err = s.scanBucket(ctx, s.subj.StateBucketOf(p), sc); sc.Err != nil {
			break
		}
	}
	sc.Took = s.now().Sub(start)
	return sc
}

// keepSoonest adds x to the sample, keeping the sampleSize soonest due.
func keepSoonest(xs []stateSample, x stateSample) []stateSample {
	due := func(a stateSample) time.Time {
		if a.NextRunAt == nil {
			return time.Time{}
		}
		return *a.NextRunAt
	}
	i, _ := slices.BinarySearchFunc(xs, x, func(a, b stateSample) int { return due(a).Compare(due(b)) })
	if i >= sampleSize {
		return xs
	}
	xs = slices.Insert(xs, i, x)
	if len(xs) > sampleSize {
		xs = xs[:sampleSize]
	}
	return xs
}

// scanBucket adds the last value of every record of one partition's state
// bucket to sc.
func (s *Service) scanBucket(ctx context.Context, bucket string, sc *scan) error {
	stream := "KV_" + bucket
	info, err := s.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	si, err := info.Info(ctx)
	if err != nil {
		return err
	}
	if si.State.Msgs == 0 {
		return nil
	}
	cons, err := s.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$KV." + bucket + ".>"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return err
	}
	marker := []byte(`,"status":"`)
	accountKey := []byte(`,"account":"`)
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		n, more := 0, true
		for m := range batch.Messages() {
			n++
			if meta, err := m.Metadata(); err == nil && meta.NumPending == 0 {
				more = false
			}
			if op := m.Headers().Get("KV-Operation"); op != "" || len(m.Data()) == 0 {
				continue // a delete or purge marker
			}
			data := m.Data()
			i := bytes.Index(data, marker)
			if i < 0 {
				continue
			}
			rest := data[i+len(marker):]
			j := bytes.IndexByte(rest, '"')
			if j < 0 {
				continue
			}
			st := state.State(rest[:j])
			sc.Counts[st]++
			if k := bytes.Index(data[:i], accountKey); k >= 0 {
				acct := data[k+len(accountKey) : i]
				if e := bytes.IndexByte(acct, '"'); e >= 0 {
					byState := sc.ByAccount[string(acct[:e])]
					if byState == nil {
						byState = map[state.State]int{}
						sc.ByAccount[string(acct[:e])] = byState
					}
					byState[st]++
				}
			}
			if st == state.Retrying || st == state.Scheduled {
				var r struct {
					stateSample
					LastError *struct {
						Message string `json:"message"`
					} `json:"last_error"`
				}
				if json.Unmarshal(data, &r) == nil {
					if r.LastError != nil {
						r.Error = r.LastError.Message
					}
					sc.Samples[st] = keepSoonest(sc.Samples[st], r.stateSample)
				}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if n == 0 || !more {
			return nil
		}
	}
}
