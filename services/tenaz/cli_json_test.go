package tenaz_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/indent"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// --json indents what it prints within indent.Max: a dead letter whose
// payload holds four values nested as deep as the intake takes
// (event.MaxDepth; 4 KB in all) would indent to megabytes, each level
// costing two spaces on each of its lines, so dead show prints it
// compact, one valid document with the payload as submitted. A shallow
// one still prints indented.
func TestCLIJSONBoundsIndentation(t *testing.T) {
	t.Parallel()
	_, tz, base := running(t)
	op := newOperator(t, tz.NATSURL())
	show := func(id string) cliRun { // once the DEAD entry is indexed
		var r cliRun
		natstest.Eventually(t, 20*time.Second, func() bool {
			r = op.run("dead", "show", id, "--json")
			return r.code == cli.ExitOK
		}, "dead show %s --json: want exit 0, got\n%s", id, &r)
		return r
	}

	nest := strings.Repeat("[", event.MaxDepth-2) + strings.Repeat("]", event.MaxDepth-2) // within the object and d's list
	deep := `{"order_id":"deep-1","reject":true,"d":[` + strings.Repeat(nest+",", 3) + nest + `]}`
	code, v := post(t, base, "deep-1", `{"account":"acme","kind":"order.create","payload":`+deep+`}`)
	if code/100 != 2 || v.ID == "" {
		t.Fatalf("submit a payload nested %d deep: want it accepted, got %d %+v", event.MaxDepth, code, v)
	}
	r := show(v.ID)
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(r.stdout)); err != nil {
		t.Fatalf("dead show --json: want valid JSON, got %v (%d bytes)", err, len(r.stdout))
	}
	if bound := compact.Len() + indent.Max + 1; len(r.stdout) > bound {
		t.Fatalf("dead show --json: want at most %d bytes (%d compact + indent.Max + a newline), got %d", bound, compact.Len(), len(r.stdout))
	}
	var got ops.ShowReply
	if r.decode(t, &got); got.Event == nil || string(got.Event.Payload) != deep {
		t.Fatalf("dead show --json: want %s with its payload as submitted (%d bytes), got %+v", v.ID, len(deep), got.Item)
	}

	_, shallow := post(t, base, "shallow-1", `{"account":"acme","kind":"order.create","payload":{"order_id":"shallow-1","reject":true}}`)
	if r := show(shallow.ID); !strings.HasPrefix(r.stdout, "{\n  \"item\": {\n    \"id\": ") {
		t.Fatalf("dead show --json of a shallow payload: want it indented, got\n%s", r.stdout)
	}
}
