package config_test

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/config"
)

func render(t *testing.T, tpl string, v config.URLVars) (string, error) {
	t.Helper()
	tm, err := config.ParseURLTemplate(tpl)
	if err != nil {
		t.Fatalf("ParseURLTemplate(%q): %v", tpl, err)
	}
	return tm.Render(v)
}

// A value is escaped for where it lands: it never adds a path segment, a
// query parameter or a fragment, and never forms a "." or ".." segment.
func TestURLTemplateEscapesForThePlace(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, tpl string
		v         config.URLVars
		want      string // "" with wantErr
		wantErr   string
	}{
		{"path value with slash and query", "https://e/orders/{{.EntityID}}", config.URLVars{EntityID: "../admin?x=1#f"}, "https://e/orders/..%2Fadmin%3Fx=1%23f", ""},
		{"path value with a space", "https://e/o/{{.EntityID}}", config.URLVars{EntityID: "a b"}, "https://e/o/a%20b", ""},
		{"query value with & and =", "https://e/o?id={{.EntityID}}&k=1", config.URLVars{EntityID: "1&admin=true"}, "https://e/o?id=1%26admin%3Dtrue&k=1", ""},
		{"query value with # and ?", "https://e/o?id={{.Reference}}", config.URLVars{Reference: "r#frag?x"}, "https://e/o?id=r%23frag%3Fx", ""},
		{"query value with a slash", "https://e/o?id={{.Reference}}", config.URLVars{Reference: "a/b"}, "https://e/o?id=a%2Fb", ""},
		{"trailing urlquery is escaped once, for the path", "https://e/o/{{.EntityID | urlquery}}", config.URLVars{EntityID: "a b/c"}, "https://e/o/a%20b%2Fc", ""},
		{"urlquery called as a function", "https://e/o?q={{urlquery .EntityID}}", config.URLVars{EntityID: "a&b"}, "https://e/o?q=a%26b", ""},
		{"value through printf", `https://e/o/{{printf "%s-x" .EntityID}}`, config.URLVars{EntityID: "a/b"}, "https://e/o/a%2Fb-x", ""},
		{"value in a with", "https://e/o{{with .EntityID}}/{{.}}{{end}}", config.URLVars{EntityID: "x/y"}, "https://e/o/x%2Fy", ""},
		{"value in an else", "https://e/o/{{if .EntityID}}e{{else}}{{.ID}}{{end}}", config.URLVars{ID: "ev_1?a"}, "https://e/o/ev_1%3Fa", ""},
		{"variables print nothing", "https://e/{{$k := .Kind}}o/{{$k}}", config.URLVars{Kind: "order.create"}, "https://e/o/order.create", ""},
		{"dots inside a segment are fine", "https://e/o/{{.EntityID}}", config.URLVars{EntityID: "a..b"}, "https://e/o/a..b", ""},
		{"empty value", "https://e/o/{{.EntityID}}", config.URLVars{}, "https://e/o/", ""},
		{"host value", "https://{{.Account}}.e.example/o", config.URLVars{Account: "acme-eu"}, "https://acme-eu.e.example/o", ""},
		{"fragment value", "https://e/o#{{.EntityID}}", config.URLVars{EntityID: "a#b"}, "https://e/o#a%23b", ""},
		{"whole segment ..", "https://e/o/{{.EntityID}}/x", config.URLVars{EntityID: ".."}, "", `"." or ".." path segment`},
		{"whole segment .", "https://e/o/{{.EntityID}}", config.URLVars{EntityID: "."}, "", `"." or ".." path segment`},
		{"two values making ..", "https://e/o/{{.EntityID}}{{.Reference}}", config.URLVars{EntityID: ".", Reference: "."}, "", `"." or ".." path segment`},
		{"value and text making ..", "https://e/o/.{{.EntityID}}/x", config.URLVars{EntityID: "."}, "", `"." or ".." path segment`},
		{"host value with a slash", "https://{{.EntityID}}.e.example/o", config.URLVars{EntityID: "evil.example/x"}, "", "a value in the host"},
		{"host value with @", "https://{{.EntityID}}e.example/o", config.URLVars{EntityID: "u@evil.example#"}, "", "a value in the host"},
		{"host value with a port", "https://e{{.EntityID}}/o", config.URLVars{EntityID: ":8443"}, "", "a value in the host"},
		{"value as the scheme", "{{.EntityID}}://e/o", config.URLVars{EntityID: "https"}, "", "scheme"},
	} {
		got, err := render(t, tt.tpl, tt.v)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: want an error containing %q, got %q, %v", tt.name, tt.wantErr, got, err)
			}
			for _, v := range []string{tt.v.EntityID, tt.v.Reference} {
				if err != nil && len(v) > 2 && strings.Contains(err.Error(), v) {
					t.Errorf("%s: the error quotes the value %q: %v", tt.name, v, err)
				}
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: want %q, got %q (%v)", tt.name, tt.want, got, err)
		}
	}
	if _, err := config.ParseURLTemplate("https://e/\x00{{.Kind}}"); err == nil {
		t.Error("a template with NUL: want an error, got nil")
	}
	if _, err := config.ParseURLTemplate(`https://e/{{tenazURLValue "x"}}`); err == nil {
		t.Error("a template calling the escaper itself: want an error, got nil")
	}
}

// Validation renders with sample values; its errors name the scheme, not
// the URL, which may hold a token.
func TestURLTemplateValidationQuotesNoURL(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte("targets: {erp: {url: 'ftp://erp.internal.example/x?token=tok_cfg_secret'}}\n"), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), `got scheme "ftp"`) {
		t.Fatalf("want the scheme refused, got %v", err)
	}
	for _, s := range []string{"tok_cfg_secret", "erp.internal.example"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the config error quotes %q: %v", s, err)
		}
	}
}

// rawPath is u's path as written (EscapedPath would decode a "%2F" of a
// path that is not valid URL encoding and split it).
func rawPath(u *url.URL) string {
	if u.RawPath != "" {
		return u.RawPath
	}
	return u.EscapedPath()
}

// urlShape is what a value must not change: the number of path segments,
// the query parameters and whether there is a fragment.
type urlShape struct {
	segments int
	keys     []string
	fragment bool
}

func shapeOf(t *testing.T, s string) urlShape {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("rendered %q does not parse: %v", s, err)
	}
	var keys []string
	if u.RawQuery != "" || u.ForceQuery {
		for kv := range strings.SplitSeq(u.RawQuery, "&") {
			k, _, _ := strings.Cut(kv, "=")
			keys = append(keys, k)
		}
	}
	return urlShape{segments: len(strings.Split(rawPath(u), "/")), keys: keys, fragment: strings.Contains(s, "#")}
}

// branching finds if, with and else: a template whose text depends on the
// values may rightly change its shape.
var branching = regexp.MustCompile(`\{\{-?\s*(if|with|else)\b`)

// FuzzURLTemplate: whatever entity id and reference a caller or provider
// sends, the rendered URL has the template's path segment count, query
// parameters (their number, and every key the template wrote itself) and
// fragment, or the call is refused.
func FuzzURLTemplate(f *testing.F) {
	for _, s := range [][3]string{
		{"https://e.example/orders/{{.EntityID}}", "../admin", ""},
		{"https://e.example/orders/{{.EntityID}}/ref/{{.Reference}}?k={{.Kind}}", "a/b?c=d", "x&y=z"},
		{"https://e.example/q?id={{.EntityID}}&ref={{.Reference | urlquery}}#top", "1&admin=true", "#frag"},
		{"https://e.example/{{.Account}}/{{printf \"%s.json\" .EntityID}}", ".", "%2e%2e"},
		{"https://e.example/o?{{.EntityID}}={{.Reference}}", "k=v&x", "?y"},
		{"https://{{.Account}}.e.example/{{.EntityID}}{{.Reference}}", ".", "."},
		{"http://e.example:8080/{{.ID}}/{{.EntityID}}#{{.Reference}}", "%00", "\x00/"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, tpl, entity, ref string) {
		if branching.MatchString(tpl) {
			return
		}
		tm, err := config.ParseURLTemplate(tpl)
		if err != nil {
			return
		}
		sample := config.URLVars{Kind: "order.create", Account: "acme", ID: "ev_01hzy3k5m8q2r4t6v8w0x2y4z6"}
		a, b := sample, sample
		a.EntityID, a.Reference = "v", "v"
		b.EntityID, b.Reference = "w", "w"
		ra, err := tm.Render(a)
		if err != nil {
			return
		}
		if _, err := url.Parse(ra); err != nil {
			return // the template's own text is no URL
		}
		rb, err := tm.Render(b)
		if err != nil {
			t.Fatalf("renders with v but not with w: %v", err)
		}
		v := sample
		v.EntityID, v.Reference = entity, ref
		got, err := tm.Render(v)
		if err != nil {
			return // refused: nothing is called
		}
		want, other, shape := shapeOf(t, ra), shapeOf(t, rb), shapeOf(t, got)
		if shape.segments != want.segments || len(shape.keys) != len(want.keys) || shape.fragment != want.fragment {
			t.Fatalf("template %q with entity %q, reference %q: want the shape of %q, got %q", tpl, entity, ref, ra, got)
		}
		for i, k := range want.keys {
			if k == other.keys[i] && shape.keys[i] != k { // a key the template wrote itself
				t.Fatalf("template %q: query key %d: want %q, got %q (%q)", tpl, i, k, shape.keys[i], got)
			}
		}
		if u, _ := url.Parse(got); u != nil && slices.ContainsFunc(strings.Split(rawPath(u), "/"), func(s string) bool {
			d, _ := url.PathUnescape(s)
			return d == "." || d == ".."
		}) {
			t.Fatalf("template %q: %q has a dot segment", tpl, got)
		}
	})
}

// A template needs a field when an empty value would make its URL wrong:
// it prints or tests the field other than under an if or with on it.
func TestURLTemplateNeeds(t *testing.T) {
	t.Parallel()
	for tpl, want := range map[string]bool{
		"https://p.example/jobs/{{.Reference}}":                                  true,
		"https://p.example/jobs?id={{.Reference | urlquery}}":                    true,
		"https://p.example/jobs/{{$.Reference}}":                                 true,
		"https://p.example/jobs/{{printf \"%s-x\" .Reference}}":                  true,
		"https://p.example/{{if .Kind}}{{.Reference}}{{end}}":                    true,
		"https://p.example/{{if .Reference}}a{{else}}{{.Reference}}{{end}}":      true,
		"https://p.example/jobs/{{.ID}}":                                         false,
		"https://p.example/jobs{{if .Reference}}/{{.Reference}}{{end}}/{{.ID}}":  false,
		"https://p.example/jobs{{with $.Reference}}/{{.}}{{end}}?event={{.ID}}":  false,
		"https://p.example/jobs/{{if .Reference}}{{.Reference}}{{else}}x{{end}}": false,
	} {
		tm, err := config.ParseURLTemplate(tpl)
		if err != nil {
			t.Fatalf("ParseURLTemplate(%q): %v", tpl, err)
		}
		if got := tm.Needs("Reference"); got != want {
			t.Errorf("%s: Needs(Reference) = %v, want %v", tpl, got, want)
		}
	}
}
