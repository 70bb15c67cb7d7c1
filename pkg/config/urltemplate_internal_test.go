package config

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// A template of text and fields renders through its parts exactly what
// text/template renders, errors included, for any text and any values.
func TestURLTemplatePartsRenderAsExecute(t *testing.T) {
	piece := rapid.OneOf(
		rapid.SampledFrom([]string{"https://", "http://", "://", "/", "?", "#", "&", "=", ".", "..", "%2F", "%zz", "api", "x.example", ":8080", "{{.Kind}}",
			"{{.Account}}", "{{.ID}}", "{{.EntityID}}", "{{.Reference}}", "{{ .Kind }}", "{{- .ID -}}", " ", "{{/* c */}}", "{{.Kind | urlquery}}", "{{if .EntityID}}e{{end}}"}),
		rapid.StringMatching(`[a-z/?#.:%]{0,6}`),
	)
	value := rapid.OneOf(
		rapid.SampledFrom([]string{"", ".", "..", "a/b", "x&y=1", "ev_01", "héllo", "a b", "%2F", "host-1", "\x00"}),
		rapid.String(),
		rapid.Map(rapid.IntRange(0, 3*maxURLLen), func(n int) string { return strings.Repeat("a", n) }),
		// around the length limit (a value is written as twice its length, plus two)
		rapid.Map(rapid.IntRange(maxURLLen-12, maxURLLen+1), func(n int) string { return strings.Repeat("b", n) }),
	)
	rapid.Check(t, func(t *rapid.T) {
		var text strings.Builder
		for range rapid.IntRange(0, 8).Draw(t, "pieces") {
			text.WriteString(piece.Draw(t, "piece"))
		}
		u, err := ParseURLTemplate(text.String())
		if err != nil {
			t.Skip("not a template") // rapid.T.Skip: this draw is discarded
		}
		v := URLVars{Kind: value.Draw(t, "kind"), Account: value.Draw(t, "account"), ID: value.Draw(t, "id"),
			EntityID: value.Draw(t, "entity"), Reference: value.Draw(t, "ref")}
		got, gerr := u.Render(v)
		slow := *u
		slow.parts = nil
		want, werr := slow.Render(v)
		if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("template %q, %+v:\nparts:   %q, %v\nexecute: %q, %v", text.String(), v, got, gerr, want, werr)
		}
		if gerr != nil && errors.As(werr, new(*tooLongError)) && !errors.As(gerr, new(*tooLongError)) {
			t.Fatalf("template %q: parts fail with %v, execute with the length limit", text.String(), gerr)
		}
	})
}

// The plain templates targets use take the parts path.
func TestURLTemplateParts(t *testing.T) {
	for text, want := range map[string]bool{
		"https://api.example.com/orders":                              true,
		"https://api.example.com/{{.Kind}}/{{ .ID }}?e={{.EntityID}}": true,
		"https://api.example.com/{{.Kind | urlquery}}":                true, // escaped once, as {{.Kind}}
		"https://api.example.com/{{if .ID}}x{{end}}":                  false,
		"https://api.example.com/{{printf \"%s\" .Kind}}":             false,
	} {
		u, err := ParseURLTemplate(text)
		if err != nil {
			t.Fatal(err)
		}
		if got := u.parts != nil; got != want {
			t.Errorf("%q: parts path %v, want %v", text, got, want)
		}
	}
}

func BenchmarkURLTemplateRender(b *testing.B) {
	u, err := ParseURLTemplate("https://api.example.com/v1/{{.Kind}}/{{.EntityID}}")
	if err != nil {
		b.Fatal(err)
	}
	v := URLVars{Kind: "order.create", Account: "acme", ID: "ev_01hzy3k5m8q2r4t6v8w0x2y4z6", EntityID: "o-1"}
	slow := *u
	slow.parts = nil
	for name, u := range map[string]*URLTemplate{"parts": u, "execute": &slow} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_, _ = u.Render(v)
			}
		})
	}
}
