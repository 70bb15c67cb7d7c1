package tenaz_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// The operator actions from the CLI against `tenaz run`: each asks before
// it acts (a "no" does nothing, --yes skips the question), a paused
// account's event waits while another account's is delivered and is
// delivered on resume, a delayed event is retried now, a breaker is opened
// until a time and closed, and the audit lists who did what and why,
// newest first.
// Acting where it is not legal is 4, without a reason 2.
func TestCLIOperatorActions(t *testing.T) {
	t.Parallel()
	_, tz, base := running(t)
	op := newOperator(t, tz.NATSURL())

	op.stdin = "n\n"
	r := op.must(1, "accounts", "pause", "acme", "-m", "erp migration", "--for", "1h")
	if !strings.Contains(r.stderr, "Pause account acme for 1h0m0s") || !strings.Contains(r.stderr, "Proceed? [y/N]") || !strings.Contains(r.stderr, "not confirmed") {
		t.Fatalf("pause answered no: want the question and the refusal, got\n%s", r)
	}
	var held ops.PausesReply
	if op.must(cli.ExitOK, "accounts", "paused", "--json").decode(t, &held); len(held.Items) != 0 {
		t.Fatalf("after a no: want nothing paused, got %+v", held)
	}
	op.stdin = "y\n"
	if r = op.must(cli.ExitOK, "accounts", "pause", "acme", "-m", "erp migration"); !strings.Contains(r.stdout, "paused") {
		t.Fatalf("pause answered yes: want acme paused, got\n%s", r)
	}
	op.stdin = ""
	_, a := post(t, base, "a-1", `{"account":"acme","kind":"order.create","payload":{"order_id":"a-1"}}`)
	_, g := post(t, base, "g-1", `{"account":"globex","kind":"order.create","payload":{"order_id":"g-1"}}`)
	waitStatus(t, base, g.ID, "done")
	if v := get(t, base+"/v1/events/"+a.ID); v.Status != "pending" {
		t.Fatalf("paused acme's event: want pending, got %s", v.Status)
	}
	if op.must(cli.ExitOK, "accounts", "paused", "--json").decode(t, &held); len(held.Items) != 1 || held.Items[0].Account != "acme" || held.Items[0].Paused == nil ||
		!held.Items[0].UntilResumed || held.Items[0].HeldUntil != nil {
		t.Fatalf("accounts paused: want acme, held until resumed (no held_until), got %+v", held)
	}
	// A pause without an end reads as one, not as the year 2999.
	if r = op.must(cli.ExitOK, "accounts", "paused"); !strings.Contains(r.stdout, "until resumed") || strings.Contains(r.stdout, "2999") {
		t.Fatalf("accounts paused: want acme's pause shown until resumed, got\n%s", r)
	}
	op.must(cli.ExitOK, "accounts", "resume", "acme", "-m", "migration done", "--yes")
	waitStatus(t, base, a.ID, "done")
	op.must(cli.ExitConflict, "accounts", "resume", "acme", "-m", "again", "--yes")
	op.must(cli.ExitUsage, "accounts", "pause", "acme", "--yes")
	op.must(cli.ExitUsage, "accounts", "pause", "ac.me", "-m", "x", "--yes")

	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	_, d := post(t, base, "d-1", `{"account":"acme","kind":"order.create","not_before":"`+at+`","payload":{"order_id":"d-1"}}`)
	waitStatus(t, base, d.ID, "scheduled")
	op.must(cli.ExitOK, "events", "retry", d.ID, "-m", "the customer asked", "--yes")
	waitStatus(t, base, d.ID, "done")
	op.must(cli.ExitConflict, "events", "retry", d.ID, "-m", "again", "--yes")
	op.must(cli.ExitConflict, "events", "cancel-wait", d.ID, "-m", "nothing to wait for", "--yes")
	op.must(cli.ExitUsage, "events", "retry", "not-an-id", "-m", "x", "--yes")

	op.must(cli.ExitUsage, "breakers", "open", "acme", "erp", "-m", "maintenance", "--yes")
	var b ops.BreakerItem
	op.must(cli.ExitOK, "breakers", "open", "acme", "erp", "--for", "1h", "-m", "erp maintenance", "--yes", "--json").decode(t, &b)
	if b.State != "open" || b.OpenUntil == nil || time.Until(*b.OpenUntil) < 55*time.Minute {
		t.Fatalf("breakers open: want acme/erp open for an hour, got %+v", b)
	}
	op.must(cli.ExitUsage, "breakers", "close", "acme", "erp") // no reason
	op.must(cli.ExitOK, "breakers", "close", "acme", "erp", "-m", "erp is back")

	var acts ops.ActionsReply
	op.must(cli.ExitOK, "accounts", "actions", "--account", "acme", "--json").decode(t, &acts)
	var got []string
	for _, x := range acts.Items {
		got = append(got, x.Action+" by "+x.Actor+": "+x.Reason)
	}
	want := []string{"close_breaker by anonymous: erp is back", "open_breaker by anonymous: erp maintenance",
		"resume by anonymous: migration done", "pause by anonymous: erp migration"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("accounts actions: want %v, got %v", want, got)
	}
	if r = op.must(cli.ExitOK, "accounts", "actions"); !strings.Contains(r.stdout, "erp maintenance") || !strings.Contains(r.stdout, "migration done") ||
		!strings.Contains(r.stdout, "erp is back") || !strings.Contains(r.stdout, "until resumed") {
		t.Fatalf("accounts actions: want a table with the reasons and the pause until resumed, got\n%s", r)
	}
}

// --for that is not positive is a usage error naming the flag, before
// anything is asked or sent: sent as no end, `accounts pause --for 0s`
// paused the account until resumed.
func TestCLIForMustBePositive(t *testing.T) {
	t.Parallel()
	op := newOperator(t, "nats://127.0.0.1:1") // nothing is sent
	for _, args := range [][]string{
		{"accounts", "pause", "acme", "-m", "x", "--for", "0s", "--yes"},
		{"accounts", "pause", "acme", "-m", "x", "--for=-5m", "--yes"},
		{"breakers", "open", "acme", "erp", "-m", "x", "--for", "0s", "--yes"},
	} {
		if r := op.must(cli.ExitUsage, args...); !strings.Contains(r.stderr, "--for") || !strings.Contains(r.stderr, "positive") {
			t.Fatalf("want a usage error naming --for, got\n%s", r)
		}
	}
}
