package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/template"
	tparse "text/template/parse"
)

// URLVars is what a target's URL template (Target.URL, Poll.URL,
// TargetOverride.URL) is executed over: {{.Kind}}, {{.Account}}, {{.ID}},
// {{.EntityID}}, {{.Reference}}.
type URLVars struct {
	Kind      string // event kind, "order.create"
	Account   string // account, "acme"
	ID        string // tenaz event id, "ev_…"
	EntityID  string // entity id, may be ""
	Reference string // the provider's job id (callback and poll modes), may be ""
}

// sampleVars is what Validate executes every URL template with.
var sampleVars = URLVars{
	Kind:      "order.create",
	Account:   "acme",
	ID:        "ev_01hzy3k5m8q2r4t6v8w0x2y4z6",
	EntityID:  "entity-1",
	Reference: "ref-1",
}

// maxURLLen bounds the output of a URL template.
const maxURLLen = 8192

// ParseURLTemplate parses a URL template the way Validate checks it: a
// text/template over URLVars that may use fields, pipelines, functions,
// if and with, but not range, define, template or block, nor printf
// widths above 999 (a URL needs no loops, and this keeps every execution
// short and small).
func ParseURLTemplate(text string) (*template.Template, error) {
	t, err := template.New("url").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("define and block are not allowed in a URL template")
	}
	if t.Tree != nil {
		if err := checkTemplateNode(t.Tree.Root); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func checkTemplateNode(n tparse.Node) error {
	switch n := n.(type) {
	case *tparse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkTemplateNode(c); err != nil {
				return err
			}
		}
	case *tparse.ActionNode:
		return checkTemplateNode(n.Pipe)
	case *tparse.IfNode:
		return checkBranch(&n.BranchNode)
	case *tparse.WithNode:
		return checkBranch(&n.BranchNode)
	case *tparse.RangeNode:
		return errors.New("range is not allowed in a URL template")
	case *tparse.TemplateNode:
		return errors.New("template and block are not allowed in a URL template")
	case *tparse.PipeNode:
		if n == nil {
			return nil
		}
		for _, cmd := range n.Cmds {
			if err := checkTemplateNode(cmd); err != nil {
				return err
			}
		}
	case *tparse.CommandNode:
		if len(n.Args) > 0 {
			if id, ok := n.Args[0].(*tparse.IdentifierNode); ok && id.Ident == "printf" {
				for _, a := range n.Args[1:] {
					if err := checkPrintfArg(a); err != nil {
						return err
					}
				}
			}
		}
		for _, a := range n.Args {
			if err := checkTemplateNode(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPrintfArg refuses printf widths and precisions that would build a
// huge string before the output limit could stop it ("%0999999999d").
func checkPrintfArg(a tparse.Node) error {
	s, ok := a.(*tparse.StringNode)
	if !ok {
		return nil
	}
	digits := 0
	for _, c := range s.Text {
		if c == '*' {
			return errors.New("printf with * width or precision is not allowed in a URL template")
		}
		if c >= '0' && c <= '9' {
			if digits++; digits > 3 {
				return errors.New("printf widths and precisions above 999 are not allowed in a URL template")
			}
		} else {
			digits = 0
		}
	}
	return nil
}

func checkBranch(b *tparse.BranchNode) error {
	if err := checkTemplateNode(b.Pipe); err != nil {
		return err
	}
	if err := checkTemplateNode(b.List); err != nil {
		return err
	}
	if b.ElseList != nil {
		return checkTemplateNode(b.ElseList)
	}
	return nil
}

// checkURL parses a URL template, executes it with sample values and
// checks that the result is an absolute http(s) URL.
func checkURL(text string) error {
	if strings.TrimSpace(text) == "" {
		return errors.New("required")
	}
	t, err := ParseURLTemplate(text)
	if err != nil {
		return err
	}
	var b limitedBuilder
	if err := t.Execute(&b, sampleVars); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	u, err := url.Parse(b.String())
	if err != nil {
		return fmt.Errorf("is not a URL once executed: %v", err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		return fmt.Errorf("must be an http:// or https:// URL, got %q once executed", truncate(b.String(), 80))
	}
	if u.Host == "" {
		return fmt.Errorf("has no host once executed (%q)", truncate(b.String(), 80))
	}
	return nil
}

// limitedBuilder is a strings.Builder that fails past maxURLLen bytes.
type limitedBuilder struct{ strings.Builder }

// Write appends p, or fails once the result would pass maxURLLen.
func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxURLLen {
		return 0, fmt.Errorf("expands to more than %d bytes", maxURLLen)
	}
	return b.Builder.Write(p)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
