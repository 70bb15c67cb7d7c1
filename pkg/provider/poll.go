package provider

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
)

// PollAnswer is the JSON body of a poll answer.
type PollAnswer struct {
	ID     string `json:"id"`
	Status string `json:"status"` // "processing", then "approved" or the payload's DecisionField
}

// servePoll answers GET .../{ref}: 404 for an unknown reference,
// "processing" for the first PollAfter polls, then the final status for
// good. Down,
// outage windows and Latency apply; the random faults do not.
func (p *Provider) servePoll(w http.ResponseWriter, r *http.Request, ref string) {
	p.mu.Lock()
	f := p.faults.withDefaults()
	down := f.Down || p.inOutageLocked()
	arrived := p.now()
	p.mu.Unlock()

	if !p.wait(r.Context(), f.Latency) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if down {
		if f.PollRetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(f.PollRetryAfter.Seconds()))))
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "service unavailable: down"})
		return
	}

	p.mu.Lock()
	p.polled = append(p.polled, Call{At: arrived, Answered: p.now(), Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()})
	st, ok := p.refs[ref]
	ans := PollAnswer{ID: ref, Status: "processing"}
	if ok {
		st.polls++
		p.pollCount++
		if st.polls > f.PollAfter {
			st.final = true // final stays final, whatever PollAfter becomes
		}
		if st.final {
			ans.Status = st.decision
		}
		p.notifyLocked()
	}
	p.mu.Unlock()

	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "unknown reference"})
		return
	}
	_ = json.NewEncoder(w).Encode(ans)
}

// Polls is how many times ref was polled.
func (p *Provider) Polls(ref string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.refs[ref]; ok {
		return st.polls
	}
	return 0
}

// PollCalls returns a copy of the poll requests received once the
// provider was up, known references or not (method, path and headers).
func (p *Provider) PollCalls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.polled...)
}

// PollCount is the number of polls of known references.
func (p *Provider) PollCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pollCount
}
