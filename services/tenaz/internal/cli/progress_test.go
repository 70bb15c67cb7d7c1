package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
)

// The bar fills with the share of entries processed (replayed, skipped or
// failed) and shows the rate and the time left.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	p := &progress{start: t0}
	j := ops.JobReply{Total: 10000, Done: 4400, Skipped: 100, State: ops.JobRunning}
	got := p.line(j, t0.Add(2*time.Second))
	want := "[" + strings.Repeat("=", 13) + ">" + strings.Repeat(" ", 16) + "] 4500/10000  45%  replayed 4400  skipped 100  failed 0  2250/s  ETA 2s"
	if got != want {
		t.Fatalf("line:\nwant %q\ngot  %q", want, got)
	}
	j.Done, j.State = 9900, ops.JobDone
	if got := p.line(j, t0.Add(4*time.Second)); !strings.HasPrefix(got, "["+strings.Repeat("=", 30)+"] 10000/10000 100%") || strings.Contains(got, "ETA") {
		t.Fatalf("finished: want a full bar without ETA, got %q", got)
	}
	if got := p.line(ops.JobReply{State: ops.JobDone}, t0); !strings.Contains(got, "0/0 100%") {
		t.Fatalf("nothing matched: want 0/0 100%%, got %q", got)
	}
}

// On a terminal the bar is redrawn in place and its line ended once; off
// a terminal a plain line is printed at most every 10 seconds.
func TestProgressDraw(t *testing.T) {
	t.Parallel()
	var tty bytes.Buffer
	p := &progress{w: &tty, tty: true, start: time.Now()}
	p.draw(ops.JobReply{Total: 2, Done: 1, State: ops.JobRunning})
	p.draw(ops.JobReply{Total: 2, Done: 2, State: ops.JobDone})
	p.done()
	p.done()
	out := tty.String()
	if strings.Count(out, "\r") != 2 || strings.Count(out, "\x1b[K") != 2 || strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\x1b[K\n") {
		t.Fatalf("tty: want two in-place redraws and one newline, got %q", out)
	}
	var log bytes.Buffer
	p = &progress{w: &log, start: time.Now()}
	for range 5 {
		p.draw(ops.JobReply{Total: 10, Done: 1, State: ops.JobRunning})
	}
	p.done()
	if strings.Count(log.String(), "\n") != 1 || strings.Contains(log.String(), "\r") {
		t.Fatalf("not a tty: want one plain line within 10s, got %q", log.String())
	}
	var quiet bytes.Buffer
	p = &progress{w: &quiet, quiet: true}
	p.draw(ops.JobReply{Total: 10, Done: 1, State: ops.JobRunning})
	p.done()
	if quiet.Len() != 0 {
		t.Fatalf("quiet: want nothing, got %q", quiet.String())
	}
}
