package deploy

// Offline checks of the alert rules and the Grafana dashboard: promtool
// checks and unit-tests the rules, the PrometheusRule of the kustomize base
// holds the same groups, the thresholds are pkg/metrics' objectives, and
// every PromQL expression (rules and dashboard) parses and names only
// metrics that pkg/metrics defines.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/tenaz/tenaz/pkg/metrics"
)

const (
	rulesFile     = "prometheus/tenaz-rules.yaml"
	rulesTestFile = "prometheus/tenaz-rules.test.yaml"
	dashboardFile = "grafana/tenaz.json"
)

// promtool returns the path of promtool, failing the test when it is not
// installed: these checks must run, never be skipped.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not on PATH: install Debian's prometheus package " +
			"(sudo apt-get install -y --no-install-recommends prometheus), as .ci/run does")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolCheckRules(t *testing.T) {
	out := runPromtool(t, "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules: no SUCCESS in\n%s", out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	out := runPromtool(t, "test", "rules", rulesTestFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: no SUCCESS in\n%s", out)
	}
}

// rule is one rule of a rules file, as Prometheus reads it.
type rule struct {
	Alert       string            `yaml:"alert,omitempty" json:"alert,omitempty"`
	Record      string            `yaml:"record,omitempty" json:"record,omitempty"`
	Expr        string            `yaml:"expr" json:"expr"`
	For         string            `yaml:"for,omitempty" json:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
}

type ruleGroup struct {
	Name     string `yaml:"name" json:"name"`
	Interval string `yaml:"interval,omitempty" json:"interval,omitempty"`
	Rules    []rule `yaml:"rules" json:"rules"`
}

type rulesDoc struct {
	Groups []ruleGroup `yaml:"groups"`
}

func loadRules(t *testing.T) rulesDoc {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc rulesDoc
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return doc
}

func alerts(doc rulesDoc) map[string]rule {
	out := map[string]rule{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r
			}
		}
	}
	return out
}

// runbookBase is where the rules' runbook_url annotations point: the
// operators' guide of the repository.
const runbookBase = "https://github.com/tenaz/tenaz/blob/main/docs/operators.md#"

// The alerts are all there; every alert has a severity and a summary,
// is documented in docs/metrics.md and has a runbook_url whose
// anchor is a section of docs/operators.md.
func TestAlertsPresent(t *testing.T) {
	got := alerts(loadRules(t))
	docs, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"TenazRetryRateHigh", "TenazBacklogGrowing", "TenazDeadLetterGrowing", "TenazBreakerOpen",
		"TenazReconcilerRepairs", "TenazWaitTimeOverObjective", "TenazBacklogUnreadable", "TenazDeadEntriesWaiting",
		"TenazTrimFailing", "TenazPollerCrowded",
	} {
		if _, ok := got[name]; !ok {
			t.Errorf("alert %s is missing from %s", name, rulesFile)
		}
	}
	// Every alert of the file, not only those above, is documented.
	for name, r := range got {
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", name, s)
		}
		if r.Annotations["summary"] == "" {
			t.Errorf("%s: no summary annotation", name)
		}
		if !strings.Contains(string(docs), "### "+name) {
			t.Errorf("docs/metrics.md has no section \"### %s\"", name)
		}
	}
	anchors := markdownAnchors(t, "../docs/operators.md")
	for name, r := range got {
		u := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(u, runbookBase)
		switch {
		case !ok:
			t.Errorf("%s: runbook_url %q, want %s<anchor>", name, u, runbookBase)
		case anchor != strings.ToLower(name):
			t.Errorf("%s: runbook_url anchor %q, want its own section %q", name, anchor, strings.ToLower(name))
		case !anchors[anchor]:
			t.Errorf("%s: runbook_url %q: docs/operators.md has no heading with the anchor #%s (want \"### %s\")", name, u, anchor, name)
		}
	}
}

// markdownAnchors is the anchor of every heading of a Markdown file, as
// GitHub makes them: lower case, spaces to hyphens, punctuation dropped.
func markdownAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// The thresholds are the objectives pkg/metrics documents.
func TestAlertThresholdsAreTheObjectives(t *testing.T) {
	got := alerts(loadRules(t))
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	for _, c := range []struct {
		alert, want string
	}{
		{"TenazWaitTimeOverObjective", "> " + num(metrics.WaitObjective.Seconds())},
		{"TenazRetryRateHigh", "> " + num(metrics.RetryRateObjective)},
	} {
		if !strings.Contains(got[c.alert].Expr, c.want) {
			t.Errorf("%s: expr does not compare with %q (pkg/metrics' objective):\n%s", c.alert, c.want, got[c.alert].Expr)
		}
	}
	if d, err := time.ParseDuration(got["TenazBreakerOpen"].For); err != nil || d != metrics.BreakerOpenLimit {
		t.Errorf("TenazBreakerOpen: for %q, want %s (metrics.BreakerOpenLimit)", got["TenazBreakerOpen"].For, metrics.BreakerOpenLimit)
	}
}

// The PrometheusRule of the kustomize base renders exactly the groups of
// the rules file.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	want := loadRules(t).Groups
	for _, dir := range []string{"kustomize/base", "kustomize/overlays/example"} {
		r := rendered{render(t, dir)}
		prs := r.all("PrometheusRule")
		if len(prs) != 1 {
			t.Fatalf("%s: %d PrometheusRules, want 1", dir, len(prs))
		}
		// Through JSON into the same structs, so that formatting and key
		// order do not matter and every field must be known.
		b, err := json.Marshal(get(prs[0], "spec"))
		if err != nil {
			t.Fatal(err)
		}
		var spec struct {
			Groups []ruleGroup `json:"groups"`
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			t.Fatalf("%s: PrometheusRule spec: %v", dir, err)
		}
		if !reflect.DeepEqual(spec.Groups, want) {
			gj, _ := json.MarshalIndent(spec.Groups, "", "  ")
			wj, _ := json.MarshalIndent(want, "", "  ")
			t.Errorf("%s: the PrometheusRule's groups differ from %s: copy the file's groups into kustomize/base/prometheusrule.yaml\ngot:\n%s\nwant:\n%s", dir, rulesFile, gj, wj)
		}
	}
}

// -------------------------------------------------------------- PromQL

// seriesRe finds tenaz metric names in PromQL (tenaz_... not followed by
// more name characters; label names never start with tenaz_).
var seriesRe = regexp.MustCompile(`\btenaz_[a-zA-Z0-9_]*`)

// checkNames reports every tenaz_ name in expr that pkg/metrics does not
// define, and whether expr names at least one metric.
func checkNames(t *testing.T, where, expr string) bool {
	t.Helper()
	known := metrics.SeriesNames()
	names := seriesRe.FindAllString(expr, -1)
	for _, n := range names {
		if !slices.Contains(known, n) {
			t.Errorf("%s: %q is not a metric pkg/metrics defines (known: %v)", where, n, known)
		}
	}
	return len(names) > 0
}

// checkSyntax has promtool parse every expression, as recording rules of a
// scratch rules file (Grafana's variables replaced by plain values first).
func checkSyntax(t *testing.T, exprs map[string]string) {
	t.Helper()
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
		`"$account"`, `".*"`, `"$kind"`, `".*"`)
	var g ruleGroup
	g.Name = "syntax"
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		e := grafana.Replace(exprs[k])
		if strings.Contains(e, "$") {
			t.Errorf("%s: a Grafana variable this check does not know: %s", k, e)
		}
		g.Rules = append(g.Rules, rule{Record: fmt.Sprintf("check:expr_%d", i), Expr: e})
	}
	b, err := yaml.Marshal(rulesDoc{Groups: []ruleGroup{g}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "exprs.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool(t), "check", "rules", f)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool cannot parse an expression: %v\n%s\n(expressions, in order: %q)", err, out, keys)
	}
}

// Every rule names only metrics that pkg/metrics defines.
func TestRulesUseKnownMetrics(t *testing.T) {
	for name, r := range alerts(loadRules(t)) {
		if !checkNames(t, name, r.Expr) {
			t.Errorf("%s: its expression names no tenaz metric", name)
		}
	}
}

// ---------------------------------------------------------- dashboard

type dashPanel struct {
	ID      int                      `json:"id"`
	Type    string                   `json:"type"`
	Title   string                   `json:"title"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Options struct {
		Content string `json:"content"`
	} `json:"options"`
	Panels []dashPanel `json:"panels"`
}

type dashboard struct {
	UID           string      `json:"uid"`
	Title         string      `json:"title"`
	SchemaVersion int         `json:"schemaVersion"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func loadDashboard(t *testing.T) (dashboard, []dashPanel) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var all []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return d, all
}

// The dashboard's queries parse, name only metrics pkg/metrics defines,
// and together show every one of them; the panels do not overlap; a text
// panel links the upstream NATS dashboards.
func TestDashboard(t *testing.T) {
	d, panels := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 || len(panels) == 0 {
		t.Fatalf("%s: want uid, title, schemaVersion and panels", dashboardFile)
	}
	exprs := map[string]string{}
	used := map[string]bool{}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	links := 0
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v is outside the 24-column grid", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		switch p.Type {
		case "row":
			continue
		case "text":
			for _, u := range []string{"grafana-nats-dash", "grafana-jetstream-dash"} {
				if strings.Contains(p.Options.Content, "https://github.com/nats-io/prometheus-nats-exporter/") && strings.Contains(p.Options.Content, u) {
					links++
				}
			}
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
			if !checkNames(t, where, tg.Expr) {
				t.Errorf("%s names no tenaz metric: %s", where, tg.Expr)
			}
			for _, n := range seriesRe.FindAllString(tg.Expr, -1) {
				used[n] = true
			}
			exprs[where] = tg.Expr
		}
	}
	if links != 2 {
		t.Errorf("want a text panel linking the upstream NATS server and JetStream dashboards, found %d of the 2 links", links)
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			checkNames(t, "variable "+v.Name, v.Definition)
		}
	}
	// Every metric of the catalog is on the dashboard.
	for _, i := range metrics.Catalog {
		if !used[i.Name] && !used[i.Name+"_bucket"] {
			t.Errorf("no panel shows %s", i.Name)
		}
	}
	checkSyntax(t, exprs)
}
