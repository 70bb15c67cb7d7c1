package tenaz_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// A submission refused at intake (no event) against `tenaz run`: dead ls
// prints the id GET /v1/dead lists (seq_N), and that id is what dead
// show and dead discard take; dead replay of it is the service's conflict
// (4: nothing to replay); the old seq:N still names it. Far time bounds
// (--since 1600-01-01, --until 9999-12-31) hold it.
func TestCLIDeadRefusedSubmission(t *testing.T) {
	t.Parallel()
	_, tz, base := running(t)
	op := newOperator(t, tz.NATSURL())

	nc, err := nats.Connect(tz.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("tenaz.intake.acme.no.such.kind")
	m.Header.Set("Idempotency-Key", "refused-1")
	m.Data = []byte(`{"x":1}`)
	if _, err := js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}

	var list ops.ListReply
	natstest.Eventually(t, 20*time.Second, func() bool {
		op.must(cli.ExitOK, "dead", "ls", "--json").decode(t, &list)
		return list.Total == 1
	}, "dead ls: want the refused submission, got %+v", &list)
	it := list.Items[0]
	id := it.ID
	if id != fmt.Sprintf("seq_%d", it.Seq) || it.Reason != "rejected_at_intake" {
		t.Fatalf("dead ls --json: want the refused submission named seq_%d, got %+v", it.Seq, it)
	}
	r := servicetest.Send(t, t.Context(), http.DefaultClient, http.MethodGet, base+"/v1/dead", "", "")
	var api ops.ListReply
	if err := json.Unmarshal(r.Body, &api); err != nil || len(api.Items) != 1 || api.Items[0].ID != id {
		t.Fatalf("GET /v1/dead: want the id dead ls prints, %s, got %d %s", id, r.Status, r.Body)
	}
	if r := op.must(cli.ExitOK, "dead", "ls"); !strings.Contains(r.stdout, id+" ") {
		t.Fatalf("dead ls: want %s in the table, got\n%s", id, r)
	}
	for _, bound := range [][]string{{"--since", "1600-01-01"}, {"--until", "9999-12-31"}, {"--since", "1600-01-01", "--until", "9999-12-31"}} {
		var far ops.ListReply
		op.must(cli.ExitOK, append([]string{"dead", "ls", "--json"}, bound...)...).decode(t, &far)
		if far.Total != 1 || len(far.Items) != 1 || far.Items[0].ID != id {
			t.Errorf("dead ls %v: want %s, got %+v", bound, id, far)
		}
	}

	var show ops.ShowReply
	op.must(cli.ExitOK, "dead", "show", id, "--json").decode(t, &show)
	if show.Item.ID != id || string(show.Raw) != `{"x":1}` {
		t.Fatalf("dead show %s: want it with its raw body, got %+v", id, show)
	}
	if r := op.must(cli.ExitOK, "dead", "show", id); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "RAW") {
		t.Fatalf("dead show %s: want its id and raw body, got\n%s", id, r)
	}
	old := fmt.Sprintf("seq:%d", it.Seq) // the form dead ls printed before
	show = ops.ShowReply{}
	if op.must(cli.ExitOK, "dead", "show", old, "--json").decode(t, &show); show.Item.ID != id {
		t.Fatalf("dead show %s: want %s, got %+v", old, id, show)
	}
	for _, ref := range []string{id, old} {
		if r := op.must(cli.ExitConflict, "dead", "replay", ref); !strings.Contains(r.stderr, "no_envelope") {
			t.Fatalf("dead replay %s: want the service's no_envelope, got\n%s", ref, r)
		}
	}

	var act ops.ActionReply
	op.must(cli.ExitOK, "dead", "discard", id, "-m", "test traffic", "--json").decode(t, &act)
	if act.Done != 1 {
		t.Fatalf("dead discard %s: want 1 done, got %+v", id, act)
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		op.must(cli.ExitOK, "dead", "ls", "--json").decode(t, &list)
		return list.Total == 0
	}, "dead ls after the discard: want nothing, got %+v", &list)
	op.must(cli.ExitNotFound, "dead", "show", id)
}

// A refused submission's header and body are the tenant's bytes: dead
// show prints their control characters escaped (the terminal would clear
// the screen, retitle the window, erase text), and the JSON keeps them
// whole.
func TestCLIDeadShowEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	_, tz, _ := running(t)
	op := newOperator(t, tz.NATSURL())
	nc, err := nats.Connect(tz.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const body = "\x1b]0;BODYPWN\x07\x1b[31mnot json\x08\x08"
	m := nats.NewMsg("tenaz.intake.acme.order.create")
	m.Header.Set("X-Evil", "\x1b[2Jzz")
	m.Data = []byte(body)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}

	var list ops.ListReply
	natstest.Eventually(t, 20*time.Second, func() bool {
		op.must(cli.ExitOK, "dead", "ls", "--json").decode(t, &list)
		return list.Total == 1
	}, "dead ls: want the refused submission, got %+v", &list)
	id := list.Items[0].ID
	var show ops.ShowReply
	if op.must(cli.ExitOK, "dead", "show", id, "--json").decode(t, &show); string(show.Raw) != body {
		t.Fatalf("dead show %s --json: want the body as sent, got %q", id, show.Raw)
	}
	r := op.must(cli.ExitOK, "dead", "show", id)
	if strings.ContainsAny(r.stdout, "\x1b\x07\x08") {
		t.Fatalf("dead show %s: want no control character printed raw, got %q", id, r.stdout)
	}
	for _, want := range []string{`X-Evil: \x1b[2Jzz`, `\x1b]0;BODYPWN\a\x1b[31mnot json\b\b`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dead show %s: want %q, got\n%s", id, want, r.stdout)
		}
	}
}

// An empty --payload is a mistake (a variable that expanded to nothing),
// not a request to replay the payload as it was: it is a usage error (2)
// naming the flag, refused before any connection, as @ an empty file is.
func TestCLIDeadReplayEmptyPayload(t *testing.T) {
	t.Parallel()
	op := newOperator(t, "nats://127.0.0.1:1") // nothing listens: a refusal must come first
	const id = "ev_01234567890123456789012345"
	for _, args := range [][]string{{"--payload", ""}, {"--payload="}} {
		r := op.must(cli.ExitUsage, append([]string{"dead", "replay", id}, args...)...)
		if !strings.Contains(r.stderr, "--payload") {
			t.Errorf("dead replay %v: want the flag named, got\n%s", args, r)
		}
	}
}

// A misspelt --reason or --class is the service's 400, a usage error (2)
// naming the flag's parameter and the values it takes: `dead replay --all`
// by one started a job that finished with 0 replayed, and `dead ls` by
// one listed nothing, as if nothing were dead.
func TestCLIDeadUnknownReasonOrClass(t *testing.T) {
	t.Parallel()
	_, tz, _ := running(t)
	op := newOperator(t, tz.NATSURL())
	for _, c := range []struct {
		args  []string
		names string
	}{
		{[]string{"dead", "replay", "--all", "--reason", "permanant", "-m", "erp fixed"}, "attempts_exhausted"},
		{[]string{"dead", "ls", "--class", "transiet"}, "transient"},
	} {
		r := op.must(cli.ExitUsage, c.args...)
		if !strings.Contains(r.stderr, "unknown") || !strings.Contains(r.stderr, c.names) {
			t.Errorf("tenaz %v: want the unknown value refused with the valid ones, got\n%s", c.args, r)
		}
	}
}

// `dead replay --all` with no filter replays every account's dead
// letters: it asks first, and a no starts no job. With a filter, or
// --yes, it does not ask.
func TestCLIReplayAllWithoutAFilterAsks(t *testing.T) {
	t.Parallel()
	_, tz, _ := running(t)
	op := newOperator(t, tz.NATSURL())
	op.stdin = "n\n"
	r := op.must(1, "dead", "replay", "--all", "-m", "erp fixed", "--no-wait")
	if !strings.Contains(r.stderr, "every dead letter of every account") || !strings.Contains(r.stderr, "not confirmed") || strings.Contains(r.stdout+r.stderr, "job_") {
		t.Fatalf("replay --all without a filter, answered no: want the question, the refusal and no job, got\n%s", r)
	}
	if r = op.must(cli.ExitOK, "dead", "replay", "--all", "-m", "erp fixed", "--no-wait", "--yes"); !strings.Contains(r.stdout, "job_") {
		t.Fatalf("replay --all --yes: want a job started, got\n%s", r)
	}
	if r = op.must(cli.ExitOK, "dead", "replay", "--all", "--account", "acme", "-m", "erp fixed", "--no-wait"); strings.Contains(r.stderr, "Proceed?") {
		t.Fatalf("replay --all with a filter: want no question, got\n%s", r)
	}
}
