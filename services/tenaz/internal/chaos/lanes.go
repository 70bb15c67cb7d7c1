package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// lostWake is a dispatcher's dispatcher.LostWake line: a parked event
// whose safety net fired well after the event whose finish cleared its
// lane (finished) finished, nobody having woken it then.
type lostWake struct{ event, finished, log string }

// lostWakes reads the dispatchers' logs for dispatcher.LostWake lines,
// one per event (a redelivered copy logs its own).
//
// How long a lane's next event waits after its predecessor finished says
// nothing of its wake: an open breaker and its account's backlog hold it
// up for minutes once woken, and a safety net that fires 5 minutes after
// the park, long before the predecessor finished, shows as a short wait.
// The server's copy of a fired parking schedule says it precisely.
func (c *cluster) lostWakes() ([]lostWake, error) {
	var out []lostWake
	var errs []error
	seen := map[string]bool{}
	for _, p := range c.svcs {
		if !strings.HasPrefix(p.name, "dispatcher") {
			continue
		}
		f, err := os.Open(p.logPath)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if !strings.Contains(string(line), dispatcher.LostWake) {
				continue
			}
			var l struct {
				Message  string `json:"message"`
				EventID  string `json:"event_id"`
				Finished string `json:"finished"`
			}
			if json.Unmarshal(line, &l) == nil && l.Message == dispatcher.LostWake && !seen[l.EventID] {
				seen[l.EventID] = true
				out = append(out, lostWake{event: l.EventID, finished: l.Finished, log: p.name})
			}
		}
		errs = append(errs, sc.Err())
		f.Close()
	}
	return out, errors.Join(errs...)
}

// finisher is when rec last finished (state.Record.LastFinishedAt), as
// the dispatcher's LostWake counts it, and the actor of that step.
func finisher(rec state.Record) (at time.Time, actor string, ok bool) {
	at, ok = rec.LastFinishedAt()
	for i := len(rec.History) - 1; ok && i >= 0; i-- {
		if h := rec.History[i]; h.At.Equal(at) && h.Action != state.Note && state.Finished(h.To) {
			return at, h.Actor, true
		}
	}
	return time.Time{}, "", false
}

// procsOf are the processes that may be actor, as services name
// themselves in a history: dispatcher/<instance> and poller/<instance>
// (names.Instance: host-pid-random), callback:<target> and api:<key>
// (ingest), reconciler (a poller), deadletter and operator:<name>.
func (c *cluster) procsOf(actor string) []*proc {
	var out []*proc
	pick := func(match func(p *proc) bool) []*proc {
		for _, p := range c.svcs {
			if match(p) {
				out = append(out, p)
			}
		}
		return out
	}
	named := func(prefix string) func(p *proc) bool {
		return func(p *proc) bool { return p.name == prefix || strings.HasPrefix(p.name, prefix+"-") }
	}
	switch {
	case strings.HasPrefix(actor, "dispatcher/"), strings.HasPrefix(actor, "poller/"):
		_, instance, _ := strings.Cut(actor, "/")
		t := strings.Split(instance, "-")
		if len(t) < 3 {
			return nil
		}
		pid, err := strconv.Atoi(t[len(t)-2])
		if err != nil {
			return nil
		}
		return pick(func(p *proc) bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return slices.Contains(p.pids, pid)
		})
	case strings.HasPrefix(actor, "callback:"), strings.HasPrefix(actor, "api:"), actor == "ingest":
		return pick(named("ingest"))
	case actor == "reconciler":
		return pick(named("poller"))
	case actor == "deadletter", strings.HasPrefix(actor, "operator"):
		return pick(named("deadletter"))
	}
	return nil
}

// finisherStopSlack is how soon after finishing an event its finisher
// (or nats-server) may have been stopped for its lane's next event to be
// left to the safety net by design: the wake comes right after the
// finish, and one cut off there (or failing while nats-server is down)
// is made again only by what brings the outcome back, or by the net.
const finisherStopSlack = 2 * time.Second

// unexplainedWakes returns the lost wakes whose predecessor's finisher
// and nats-server both ran on for finisherStopSlack after the finish,
// described, and the count of those that were stopped.
func (c *cluster) unexplainedWakes(lost []lostWake, recs map[string]state.Record) (unexplained []string, stopped int) {
	stoppedAt := func(p *proc, from time.Time) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, s := range p.stops {
			if !s.Before(from) && s.Sub(from) <= finisherStopSlack {
				return true
			}
		}
		return false
	}
	for _, w := range lost {
		at, actor, ok := finisher(recs[w.finished])
		if !ok {
			unexplained = append(unexplained, fmt.Sprintf("%s (%s): its predecessor %s has not finished", w.event, w.log, w.finished))
			continue
		}
		cut := stoppedAt(c.nats, at)
		for _, p := range c.procsOf(actor) {
			cut = cut || stoppedAt(p, at)
		}
		if cut {
			stopped++
			continue
		}
		unexplained = append(unexplained, fmt.Sprintf("%s (%s): its predecessor %s finished at %s by %s, which ran on", w.event, w.log, w.finished, at.Format("15:04:05.000"), actor))
	}
	return unexplained, stopped
}
