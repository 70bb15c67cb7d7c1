package dispatcher

import (
	"sync"
	"time"
)

// inflight is this replica's runs in flight, by event: from the claim
// until the outcome is stored and the message settled. A message for an
// event with a run in flight here is a copy of work in hand (the server
// redelivers a message whose in-progress signals it missed, e.g. while it
// was restarting): the run settles the message, the copy is left alone.
type inflight struct {
	mu   sync.Mutex
	runs map[string]runEntry
}

// runEntry is what inflight knows of a run (see run): the stream
// sequence of the message it was claimed for, when, and how many times
// this replica's connection had reconnected by then.
type runEntry struct {
	n          int
	seq        uint64
	claimedAt  time.Time
	reconnects uint64
}

func (f *inflight) add(id string, seq, reconnects uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs == nil {
		f.runs = map[string]runEntry{}
	}
	r := f.runs[id]
	r.n++
	r.seq, r.claimedAt, r.reconnects = seq, time.Now(), reconnects
	f.runs[id] = r
}

func (f *inflight) done(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.runs[id]; r.n > 1 {
		r.n--
		f.runs[id] = r
	} else {
		delete(f.runs, id)
	}
}

func (f *inflight) get(id string) (runEntry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[id]
	return r, ok
}
