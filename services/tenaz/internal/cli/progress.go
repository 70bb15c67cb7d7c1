package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/ops"
)

// followGrace is how long following a job tolerates polls that get no
// answer (the deadletter service restarting resumes the job).
const followGrace = 30 * time.Second

// follow polls a replay job every poll until it is no longer running,
// drawing a progress bar on stderr when it is a terminal (and a line every
// 10 s when it is not), then prints the final state. A failed job, or
// one with failed replays, is an error.
func follow(s *session, jobID string, poll time.Duration) error {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	p := &progress{w: s.env.Stderr, tty: s.env.StderrTTY, quiet: s.c.JSON && !s.env.StderrTTY, start: time.Now()}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var j ops.JobReply
	lastOK := time.Now()
	for {
		cur, err := do(s, func(ctx context.Context, tz *client.Client) (ops.JobReply, error) { return tz.ReplayJob(ctx, jobID) })
		switch {
		case err == nil:
			j, lastOK = cur, time.Now()
			p.draw(j)
		case ExitCode(err) == ExitUnavailable && time.Since(lastOK) < followGrace:
			// keep polling: the service may be restarting
		default:
			p.done()
			return err
		}
		if err == nil && j.State != ops.JobRunning {
			break
		}
		<-tick.C
	}
	p.done()
	if err := s.emit(j, func(w io.Writer) { printJob(w, j) }); err != nil {
		return err
	}
	switch {
	case j.State == ops.JobFailed:
		return fmt.Errorf("replay job %s failed: %s", j.JobID, j.Error)
	case j.State == ops.JobCancelled:
		return fmt.Errorf("replay job %s was cancelled by %s: %s", j.JobID, j.CancelledBy, j.CancelReason)
	case j.Failed > 0:
		return fmt.Errorf("replay job %s: %d of %d replays failed", j.JobID, j.Failed, j.Total)
	}
	return nil
}

func printJob(w io.Writer, j ops.JobReply) {
	row(w, "JOB", j.JobID)
	row(w, "STATE", j.State)
	row(w, "TOTAL", j.Total)
	row(w, "REPLAYED", j.Done)
	row(w, "SKIPPED", j.Skipped)
	row(w, "FAILED", j.Failed)
	if j.Error != "" {
		row(w, "ERROR", j.Error)
	}
	if j.State == ops.JobCancelled {
		row(w, "CANCELLED BY", j.CancelledBy)
		row(w, "WHY", j.CancelReason)
	}
	row(w, "FILTER", describeFilter(j.Filter))
	row(w, "RATE", fmt.Sprintf("%g/s", j.RatePerSecond))
	row(w, "BY", j.Actor)
	row(w, "STARTED", j.CreatedAt)
	row(w, "UPDATED", j.UpdatedAt)
}

func describeFilter(f ops.ListRequest) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("account", f.Account)
	add("kind", f.Kind)
	add("class", f.Class)
	add("reason", f.Reason)
	if f.Since != nil {
		add("since", stamp(*f.Since))
	}
	if f.Until != nil {
		add("until", stamp(*f.Until))
	}
	if len(parts) == 0 {
		return "everything"
	}
	return strings.Join(parts, " ")
}

// progress draws a job's progress on w.
type progress struct {
	w        io.Writer
	tty      bool // redraw one line in place
	quiet    bool // draw nothing
	start    time.Time
	lastLine time.Time
	drawn    bool
}

const barWidth = 30

// line is the progress text: bar, counts, rate and time left.
func (p *progress) line(j ops.JobReply, now time.Time) string {
	n := j.Done + j.Skipped + j.Failed
	frac := 1.0
	if j.Total > 0 {
		frac = min(float64(n)/float64(j.Total), 1)
	}
	full := int(frac * barWidth)
	bar := strings.Repeat("=", full)
	if full < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-full-1)
	}
	s := fmt.Sprintf("[%s] %d/%d %3.0f%%  replayed %d  skipped %d  failed %d", bar, n, j.Total, frac*100, j.Done, j.Skipped, j.Failed)
	if el := now.Sub(p.start).Seconds(); el >= 1 && n > 0 {
		rate := float64(n) / el
		s += fmt.Sprintf("  %.0f/s", rate)
		if left := j.Total - n; left > 0 && j.State == ops.JobRunning {
			s += "  ETA " + time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	return s
}

func (p *progress) draw(j ops.JobReply) {
	if p.quiet {
		return
	}
	now := time.Now()
	if p.tty {
		fmt.Fprint(p.w, "\r"+p.line(j, now)+"\x1b[K")
		p.drawn = true
		return
	}
	if j.State == ops.JobRunning && (p.lastLine.IsZero() || now.Sub(p.lastLine) >= 10*time.Second) {
		fmt.Fprintln(p.w, p.line(j, now))
		p.lastLine = now
	}
}

// done ends the bar's line.
func (p *progress) done() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
