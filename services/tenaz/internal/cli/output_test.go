package cli

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/tenaz/tenaz/pkg/ops"
)

// Tenant data printed in a table or by dead show (a header, a body, a
// target's error) shows its control characters escaped, so the operator
// sees them and the terminal does not act on them; valid text, accents
// and CJK included, prints as it is.
func TestHumanOutputEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	const evil = "a\x1b[2Jb\x07c\x08d\re\x7ff\u009bg\xffh\ni\tj"
	const shown = `a\x1b[2Jb\ac\bd\re\x7ff\u009bg\xffh\ni j`
	const text = "José 日本"
	rep := ops.ShowReply{
		Item:       ops.Item{ID: "seq_7", Account: "acme", Error: evil, Class: "permanent", HTTPStatus: 422},
		Raw:        []byte(evil),
		RawSubject: "tenaz.intake.acme.x",
		RawHeader:  map[string][]string{"X-Evil": {evil}, "X-Name": {text}},
	}
	var out bytes.Buffer
	tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
	printShow(tw, rep)
	row(tw, "REASON", evil)
	row(tw, "NAME", text)
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// ContainsAny reads runes: the invalid byte is looked for on its own.
	if strings.ContainsAny(got, "\x1b\a\b\r\x7f\u009b") || strings.Contains(got, "\xff") {
		t.Fatalf("want no control character printed raw, got %q", got)
	}
	for _, want := range []string{
		"RAW HEADER   X-Evil: " + shown + "\n",
		"RAW          " + shown + "\n",
		"LAST ERROR   permanent 422: " + shown + "\n",
		"REASON       " + shown + "\n",
		"RAW HEADER   X-Name: " + text + "\n",
		"NAME         " + text + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want the line %q, got\n%s", want, got)
		}
	}
}
