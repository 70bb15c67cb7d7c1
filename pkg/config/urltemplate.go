package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"text/template"
	tparse "text/template/parse"
)

// URLVars is what a target's URL template (Target.URL, Poll.URL,
// TargetOverride.URL) is executed over: {{.Kind}}, {{.Account}}, {{.ID}},
// {{.EntityID}}, {{.Reference}}, {{.Replay}}.
type URLVars struct {
	Kind      string // event kind, "order.create"
	Account   string // account, "acme"
	ID        string // tenaz event id, "ev_…"
	EntityID  string // entity id, may be ""
	Reference string // the provider's job id (callback and poll modes), may be ""
	Replay    string // how many times operators replayed the event, "0" before any
}

// sampleVars is what Validate executes every URL template with.
var sampleVars = URLVars{
	Kind:      "order.create",
	Account:   "acme",
	ID:        "ev_01hzy3k5m8q2r4t6v8w0x2y4z6",
	EntityID:  "entity-1",
	Reference: "ref-1",
	Replay:    "0",
}

// maxURLLen bounds the output of a URL template.
const maxURLLen = 8192

// URLTemplate is a parsed URL template. Render escapes every value for
// where it lands (see ParseURLTemplate), so no value can add a path
// segment, a query parameter or a fragment.
type URLTemplate struct {
	t *template.Template
	// parts is the template as text and fields when it is only that
	// ({{.Kind}}, not pipelines, functions or branches): Render then
	// writes what Execute would without text/template's reflection, on
	// every call of a target. nil: Execute.
	parts []urlPart
}

// urlPart is a template's text, or the value of a field of URLVars.
type urlPart struct {
	text  string
	field func(URLVars) string // nil for text
}

// urlFields are the fields of URLVars, for the parts of a template.
var urlFields = map[string]func(URLVars) string{
	"Kind":      func(v URLVars) string { return v.Kind },
	"Account":   func(v URLVars) string { return v.Account },
	"ID":        func(v URLVars) string { return v.ID },
	"EntityID":  func(v URLVars) string { return v.EntityID },
	"Reference": func(v URLVars) string { return v.Reference },
	"Replay":    func(v URLVars) string { return v.Replay },
}

// textAndFields returns root as parts, or nil if it holds anything but
// text and actions that print one field of URLVars (escapeActions having
// added valueFunc to them).
func textAndFields(root *tparse.ListNode) []urlPart {
	if root == nil || len(root.Nodes) == 0 {
		return nil
	}
	parts := make([]urlPart, 0, len(root.Nodes))
	for _, n := range root.Nodes {
		switch n := n.(type) {
		case *tparse.TextNode:
			parts = append(parts, urlPart{text: string(n.Text)})
		case *tparse.ActionNode:
			p := n.Pipe
			if len(p.Decl) > 0 || len(p.Cmds) != 2 || len(p.Cmds[0].Args) != 1 || len(p.Cmds[1].Args) != 1 {
				return nil
			}
			f, ok := p.Cmds[0].Args[0].(*tparse.FieldNode)
			id, isID := p.Cmds[1].Args[0].(*tparse.IdentifierNode)
			if !ok || len(f.Ident) != 1 || !isID || id.Ident != valueFunc || urlFields[f.Ident[0]] == nil {
				return nil
			}
			parts = append(parts, urlPart{field: urlFields[f.Ident[0]]})
		default:
			return nil
		}
	}
	return parts
}

// valueFunc is the escaper ParseURLTemplate appends to every action. It is
// registered after parsing, so a template cannot call it itself.
const valueFunc = "tenazURLValue"

// ParseURLTemplate parses a URL template the way Validate checks it: a
// text/template over URLVars that may use fields, pipelines, functions,
// if and with, but not range, define, template or block, nor printf
// widths above 999 (a URL needs no loops, and this keeps every execution
// short and small).
//
// What an action prints is a value, escaped by Render for its place in
// the URL, as html/template does for HTML: path-escaped in the path (and
// refused when it makes a whole "." or ".." segment), query-escaped in the
// query, limited to host characters in the host, refused in the scheme.
// A trailing urlquery is replaced by that escaper, not applied twice.
func ParseURLTemplate(text string) (*URLTemplate, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return nil, errors.New("a URL template must not contain NUL")
	}
	t, err := template.New("url").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("define and block are not allowed in a URL template")
	}
	if t.Tree != nil {
		if err := checkNode(t.Tree.Root, true); err != nil {
			return nil, err
		}
		escapeActions(t.Tree.Root)
	}
	t.Funcs(template.FuncMap{valueFunc: markValue})
	u := &URLTemplate{t: t}
	if t.Tree != nil {
		u.parts = textAndFields(t.Tree.Root)
	}
	return u, nil
}

// Render executes the template over v and returns the URL, every value
// escaped for where it lands. It fails when a value cannot be placed
// safely (a "." or ".." path segment, a character that has no place in a
// host, a value in the scheme) or the URL passes maxURLLen bytes. Errors
// never quote a value.
func (u *URLTemplate) Render(v URLVars) (string, error) {
	b := limitedBuilder{max: 2*maxURLLen + 2}
	if u.parts != nil {
		for _, p := range u.parts {
			s := p.text
			if p.field != nil {
				s = markValue(p.field(v))
			}
			if _, err := b.WriteString(s); err != nil {
				return "", err
			}
		}
		return placeValues(b.String())
	}
	if err := u.t.Execute(&b, v); err != nil {
		var lim *tooLongError
		if errors.As(err, &lim) {
			return "", lim
		}
		return "", errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	return placeValues(b.String())
}

// Needs reports whether the template reads field of URLVars
// ("Reference") other than under an if or with on that field: a URL that
// comes out wrong when the value is empty.
func (u *URLTemplate) Needs(field string) bool {
	return u.t.Tree != nil && needsField(u.t.Tree.Root, field)
}

func needsField(n tparse.Node, field string) bool {
	switch n := n.(type) {
	case *tparse.ListNode:
		if n == nil {
			return false
		}
		for _, c := range n.Nodes {
			if needsField(c, field) {
				return true
			}
		}
	case *tparse.ActionNode:
		return readsField(n.Pipe, field)
	case *tparse.IfNode:
		return branchNeeds(&n.BranchNode, field)
	case *tparse.WithNode:
		return branchNeeds(&n.BranchNode, field)
	}
	return false
}

// branchNeeds: what an if or with on the field does holds the value.
func branchNeeds(b *tparse.BranchNode, field string) bool {
	if readsField(b.Pipe, field) {
		return needsField(b.ElseList, field)
	}
	return needsField(b.List, field) || needsField(b.ElseList, field)
}

// readsField reports whether a pipeline reads field.
func readsField(n tparse.Node, field string) bool {
	switch n := n.(type) {
	case *tparse.PipeNode:
		if n == nil {
			return false
		}
		for _, c := range n.Cmds {
			for _, a := range c.Args {
				if readsField(a, field) {
					return true
				}
			}
		}
	case *tparse.FieldNode:
		return len(n.Ident) > 0 && n.Ident[0] == field
	case *tparse.VariableNode: // $.Reference
		return len(n.Ident) > 1 && n.Ident[0] == "$" && n.Ident[1] == field
	}
	return false
}

// escapeActions makes every printing action end in valueFunc.
func escapeActions(n tparse.Node) {
	switch n := n.(type) {
	case *tparse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			escapeActions(c)
		}
	case *tparse.ActionNode:
		if len(n.Pipe.Decl) > 0 || len(n.Pipe.Cmds) == 0 {
			return // {{$x := …}} prints nothing
		}
		last := n.Pipe.Cmds[len(n.Pipe.Cmds)-1]
		if id, ok := last.Args[0].(*tparse.IdentifierNode); ok && id.Ident == "urlquery" {
			id.Ident = valueFunc // same arguments, escaped once for its place
			return
		}
		n.Pipe.Cmds = append(n.Pipe.Cmds, &tparse.CommandNode{NodeType: tparse.NodeCommand, Pos: last.Pos,
			Args: []tparse.Node{tparse.NewIdentifier(valueFunc).SetTree(nil).SetPos(last.Pos)}})
	case *tparse.IfNode:
		escapeActions(n.List)
		escapeActions(n.ElseList)
	case *tparse.WithNode:
		escapeActions(n.List)
		escapeActions(n.ElseList)
	}
}

// markValue prints a value (its arguments joined as urlquery joins them)
// hex-encoded between NULs, so that placeValues can tell it from the
// template's own text, which holds no NUL.
func markValue(args ...any) string {
	s, ok := "", false
	if len(args) == 1 {
		s, ok = args[0].(string)
	}
	if !ok {
		s = fmt.Sprint(args...)
	}
	return "\x00" + hex.EncodeToString([]byte(s)) + "\x00"
}

// Places of a URL, in the order they come.
const (
	inScheme = iota
	inHost
	inPath
	inQuery
	inFragment
)

// placeValues replaces each marked value of an executed template with its
// escaped form, following the template's own text through the URL's parts.
func placeValues(marked string) (string, error) {
	var b strings.Builder
	at := inScheme
	for i := 0; i < len(marked); {
		c := marked[i]
		if c == 0 {
			end := i + 1 + strings.IndexByte(marked[i+1:], 0)
			raw, _ := hex.DecodeString(marked[i+1 : end])
			i = end + 1
			v := string(raw)
			switch at {
			case inScheme:
				return "", errors.New("a value cannot be part of the scheme")
			case inHost:
				if !hostValue(v) {
					return "", errors.New("a value in the host may only hold letters, digits, '-', '_' and '.'")
				}
				b.WriteString(v)
			case inPath, inFragment:
				b.WriteString(url.PathEscape(v))
			case inQuery:
				b.WriteString(url.QueryEscape(v))
			}
			continue
		}
		// url.Parse reads a leading "//" (but not "///") as the start of
		// a host, scheme or not.
		if at == inScheme && i == 0 && strings.HasPrefix(marked, "//") && !strings.HasPrefix(marked, "///") {
			b.WriteString("//")
			i += 2
			at = inHost
			continue
		}
		if at == inScheme && strings.HasPrefix(marked[i:], "://") {
			b.WriteString("://")
			i += 3
			at = inHost
			continue
		}
		switch {
		case c == '#' && at < inFragment:
			at = inFragment
		case c == '?' && at < inQuery:
			at = inQuery
		case c == '/' && at < inPath:
			at = inPath
		}
		b.WriteByte(c)
		i++
	}
	out := b.String()
	if len(out) > maxURLLen {
		return "", &tooLongError{}
	}
	if u, err := url.Parse(out); err == nil {
		for seg := range strings.SplitSeq(rawPath(u), "/") {
			if s, err := url.PathUnescape(seg); err == nil && (s == "." || s == "..") {
				return "", errors.New(`the URL has a "." or ".." path segment`)
			}
		}
	}
	return out, nil
}

// rawPath is u's path as written: u.EscapedPath would decode and encode
// again a path whose text is not valid URL encoding, turning a value's
// "%2F" into a "/".
func rawPath(u *url.URL) string {
	if u.RawPath != "" {
		return u.RawPath
	}
	return u.EscapedPath()
}

// hostValue reports whether v can stand in a host name as it is.
func hostValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
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

// checkNode refuses what a URL template may not hold: range, template
// and block; printf widths that would build a huge string; a field that
// URLVars does not have, or a field of a value (each is a string).
// Validate renders a template once, every value set, so a branch taken
// only when one is empty would fail at every call of an event that takes
// it: every branch is checked here. dotVars is whether dot is the URLVars
// at n (inside with, it is the value).
func checkNode(n tparse.Node, dotVars bool) error {
	switch n := n.(type) {
	case *tparse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c, dotVars); err != nil {
				return err
			}
		}
	case *tparse.ActionNode:
		return checkNode(n.Pipe, dotVars)
	case *tparse.IfNode:
		return checkBranch(&n.BranchNode, dotVars, dotVars)
	case *tparse.WithNode:
		return checkBranch(&n.BranchNode, false, dotVars)
	case *tparse.RangeNode:
		return errors.New("range is not allowed in a URL template")
	case *tparse.TemplateNode:
		return errors.New("template and block are not allowed in a URL template")
	case *tparse.PipeNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Cmds {
			if err := checkNode(c, dotVars); err != nil {
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
			if err := checkNode(a, dotVars); err != nil {
				return err
			}
		}
	case *tparse.FieldNode:
		return urlField(n.Ident, dotVars)
	case *tparse.VariableNode:
		if n.Ident[0] == "$" {
			return urlField(n.Ident[1:], true)
		}
		return urlField(n.Ident[1:], false) // a variable holds a value
	case *tparse.ChainNode:
		return urlField(n.Field, false)
	}
	return nil
}

// checkBranch checks an if's or a with's pipeline, its list, where dot
// is the URLVars if inVars, and its else list.
func checkBranch(b *tparse.BranchNode, inVars, dotVars bool) error {
	if err := checkNode(b.Pipe, dotVars); err != nil {
		return err
	}
	if err := checkNode(b.List, inVars); err != nil {
		return err
	}
	return checkNode(b.ElseList, dotVars)
}

// urlField checks the field path of a reference: none, or one field of
// URLVars where dot (or $) is the URLVars.
func urlField(path []string, ofVars bool) error {
	if len(path) == 0 {
		return nil
	}
	if !ofVars || len(path) > 1 {
		return fmt.Errorf("names the field .%s of a value, a string, which has none", strings.Join(path, "."))
	}
	if _, ok := reflect.TypeFor[URLVars]().FieldByName(path[0]); !ok {
		return fmt.Errorf("names the field .%s, which a URL template does not have: .Kind, .Account, .ID, .EntityID, .Reference or .Replay", path[0])
	}
	return nil
}

// checkURL parses a URL template, renders it with sample values and
// checks that the result is an absolute http(s) URL. Its errors name the
// scheme, never the URL: a URL may carry a token.
func checkURL(text string) error {
	if strings.TrimSpace(text) == "" {
		return errors.New("required")
	}
	t, err := ParseURLTemplate(text)
	if err != nil {
		return err
	}
	s, err := t.Render(sampleVars)
	if err != nil {
		return err
	}
	u, err := url.Parse(s)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return fmt.Errorf("is not a URL once executed: %v", err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		return fmt.Errorf("must be an http:// or https:// URL, got scheme %q once executed", truncate(u.Scheme, 20))
	}
	if u.Host == "" {
		return errors.New("has no host once executed")
	}
	return nil
}

// tooLongError is a template's output passing maxURLLen.
type tooLongError struct{}

func (*tooLongError) Error() string { return fmt.Sprintf("expands to more than %d bytes", maxURLLen) }

// limitedBuilder is a strings.Builder that fails past max bytes.
type limitedBuilder struct {
	strings.Builder
	max int
}

// Write appends p, or fails once the result would pass max.
func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, &tooLongError{}
	}
	return b.Builder.Write(p)
}

// WriteString is Write for a string.
func (b *limitedBuilder) WriteString(s string) (int, error) {
	if b.Len()+len(s) > b.max {
		return 0, &tooLongError{}
	}
	return b.Builder.WriteString(s)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
