package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/state"
)

// checkBoth runs CheckPayload and New (with a key of the caller's and
// with a derived one) on p: every way in asks the same of a payload.
func checkBoth(t *testing.T, p string) []error {
	t.Helper()
	_, derivedErr := event.New(fields(nil), []byte(p), "", "", now)
	_, keyedErr := event.New(fields(func(f *event.Fields) { f.IdempotencyKey = "k-1" }), []byte(p), "", "", now)
	return []error{event.CheckPayload([]byte(p)), derivedErr, keyedErr}
}

// An escape of a lone UTF-16 surrogate names no character: encoding/json
// reads it as U+FFFD, so {"note":"A\ud800"}, "A\udbff" and "A\ufffd"
// would be one payload (one derived key, a resend under one key taken as
// the same). It is refused as malformed wherever it is, naming the escape
// and where; a surrogate pair, U+FFFD itself and an escaped backslash
// before "ud800" are text.
func TestPayloadLoneSurrogateRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ payload, say string }{
		{`{"note":"A\ud800"}`, `\ud800 at byte 10, in the string at "/note"`},
		{`{"note":"A\udbff"}`, `\udbff at byte 10, in the string at "/note"`},
		{`{"note":"\udc00"}`, `\udc00 at byte 9, in the string at "/note"`},  // a low one alone
		{`{"note":"\uDFFF!"}`, `\uDFFF at byte 9, in the string at "/note"`}, // upper-case hex
		{`{"note":"\ud800\ud800"}`, `\ud800 at byte 9`},                      // two highs
		{`{"note":"\ud800\u0041"}`, `\ud800 at byte 9`},                      // a high before no low
		{`{"note":"\ud800x\udc00"}`, `\ud800 at byte 9`},                     // a low, but not next
		{`{"note":"\ud83d\ude00\ud83d"}`, `\ud83d at byte 21`},               // after a good pair
		{`{"note":"\\\ud800"}`, `\ud800 at byte 11`},                         // an escaped backslash, then the escape
		{`{"a":{"b":[1,"x","\ud800"]}}`, `in the string at "/a/b/2"`},        // deep, in a list
		{`{"a/b~c":"\ud800"}`, `in the string at "/a~1b~0c"`},                // a pointer's escapes
		{`"\ud800"`, `in the string at the top level`},                       // a bare string
		{`{"A\ud800":1}`, `\ud800 at byte 3, in a member name in the object at the top level`},
		{`{"x":{"\udc00":1}}`, `in a member name in the object at "/x"`},
	} {
		for i, err := range checkBoth(t, c.payload) {
			if !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), "lone UTF-16 surrogate escape") || !strings.Contains(err.Error(), c.say) {
				t.Errorf("%s (check %d): want ErrMalformed for a lone surrogate escape, saying %q, got %v", c.payload, i, c.say, err)
			}
		}
	}
	for _, p := range []string{
		`{"note":"A\ufffd"}`,
		`{"note":"\ud83d\ude00"}`, `{"note":"\uD83D\uDE00"}`, `{"note":"\udbff\udfff"}`, `{"note":"\ud800\udc00"}`,
		`{"note":"\\ud800"}`,          // a backslash, then text
		`{"note":"\\\\ud800"}`,        // two backslashes, then text
		`{"note":"\"\ud83d\ude00\\"}`, // escaped quotes and backslashes around a pair
		`{"\ud83d\ude00":"😀"}`,        // a pair in a name
		`{"note":"ud800 \u0041"}`,
		`["\\", "\ud83d\ude00"]`,
	} {
		for i, err := range checkBoth(t, p) {
			if err != nil {
				t.Errorf("%s (check %d): want accepted, got %v", p, i, err)
			}
		}
	}
}

// A member given twice is read as the last by encoding/json (the derived
// key, the 409 of a reused key, the JSON Schema check) and as the first
// by many targets' parsers, so {"amount":100,"amount":5} would be checked
// as 5 and delivered as 100. It is refused as malformed in any object at
// any depth, naming the member and the object; names compare as decoded.
func TestPayloadMemberGivenTwiceRefused(t *testing.T) {
	t.Parallel()
	var many strings.Builder // an object past linearNames
	many.WriteString(`{`)
	for i := range 40 {
		many.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i) + `,`)
	}
	for _, c := range []struct{ payload, name, at string }{
		{`{"amount":100,"amount":5}`, "amount", "the top level"},
		{`{"order_id":5,"x":[],"order_id":"ok"}`, "order_id", "the top level"},
		{`{"a":{"b":[1,{"c":1,"c":2}]}}`, "c", `"/a/b/1"`},
		{`[{"a":1},{"b":1,"b":1}]`, "b", `"/1"`}, // the same value twice, too
		{`{"a":1,"\u0061":2}`, "a", "the top level"},
		{`{"é":1,"\u00e9":2}`, "é", "the top level"},
		{`{"\ud83d\ude00":1,"😀":2}`, "😀", "the top level"},
		{`{"":1,"":2}`, "", "the top level"},
		{`{"x/y~":{"k":{},"k":{}}}`, "k", `"/x~1y~0"`},
		{many.String() + `"k0":0}`, "k0", "the top level"},
		{many.String() + `"k39":0}`, "k39", "the top level"},
		{many.String() + `"k40":{"k40":1},"k40":0}`, "k40", "the top level"},
	} {
		want := "gives the member " + strconv.Quote(c.name) + " twice in the object at " + c.at
		for i, err := range checkBoth(t, c.payload) {
			if !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), want) {
				t.Errorf("%.60s (check %d): want ErrMalformed saying %q, got %v", c.payload, i, want, err)
			}
		}
	}
	for _, p := range []string{
		`{"a":{"a":{"a":1}}}`,                     // one name at three depths
		`[{"a":1},{"a":2}]`,                       // in sibling objects
		`{"a":{"b":1},"c":{"b":2},"b":3}`,         // after a nested object closed
		`{"a":1,"A":2,"a ":3," a":4,"\\u0061":5}`, // other names
		`{"a":"\"a\":1","b":"a"}`,                 // a name's text inside a value
		many.String() + `"k40":0}`,
	} {
		for i, err := range checkBoth(t, p) {
			if err != nil {
				t.Errorf("%.60s (check %d): want accepted, got %v", p, i, err)
			}
		}
	}
	// These checks come after the depth's and the grammar's: a payload
	// too deep, not JSON or not UTF-8 is told that, whatever else it has.
	for _, c := range []struct{ payload, say string }{
		{`{"a":1,"a":2,"b":` + string(deep(event.MaxDepth+1)) + `}`, "nests 514 levels deep"},
		{`{"a":"\ud800","b":` + string(deep(event.MaxDepth+1)) + `}`, "nests 514 levels deep"},
		{`{"a":1,"a":2`, "not valid JSON"},
		{`{"a":"\ud800"`, "not valid JSON"},
		{"{\"a\":1,\"a\":\"\xe9\"}", "not valid UTF-8"},
	} {
		if err := event.CheckPayload([]byte(c.payload)); !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%.40s: want ErrMalformed saying %q, got %v", c.payload, c.say, err)
		}
	}
}

// FuzzCheckPayloadAgreesWithTokenReference holds CheckPayload to refRead,
// a reading of the payload by encoding/json's Token API: on any bytes it
// refuses what is no payload (not JSON, not UTF-8, too deep, null), and
// of a JSON payload exactly what has a lone surrogate escape or a member
// given twice, saying which (the first in the text).
func FuzzCheckPayloadAgreesWithTokenReference(f *testing.F) {
	for _, s := range []string{
		`{"note":"A\ud800"}`, `{"note":"\ud83d\ude00"}`, `{"n":"\\ud800"}`, `{"n":"\\\ud800"}`, `["\udc00"]`,
		`{"amount":100,"amount":5}`, `{"a":{"b":[1,{"c":1,"c":2}]}}`, `{"a":1,"\u0061":2}`, `[{"a":1},{"a":2}]`,
		`{"a\ud800":1,"a\udbff":2}`, `{"a":1,"a":"\ud800"}`, `{"a":"\ud800","a":1}`, `{"a":1,"a":2} x`, `null`, ``,
		"{\"a\":\"\xff\"}", `{"a":{"a":1}}`, `{"a":"\"","a":"\\"}`,
		// Past linearNames, where names are looked up in a map.
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":{"q":1},"r":18,"\u0061":19}`,
		`[{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18},{"a":1,"a":2}]`,
		// Numbers at and past their bounds.
		`[1e1000,-1E-1000,1e+0001000]`, `{"n":1e1001}`, `[1.5e-99999999999999999999]`, `{"a":1,"a":1e2000}`, `{"a":1e2000,"a":1}`,
		`[` + strings.Repeat("9", 256) + `,0.` + strings.Repeat("1", 255) + `]`, `[-` + strings.Repeat("9", 257) + `]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		err := event.CheckPayload(p)
		if err != nil && !errors.Is(err, event.ErrMalformed) && !errors.Is(err, event.ErrInvalid) {
			t.Fatalf("CheckPayload(%q): want ErrMalformed or ErrInvalid, got %v", p, err)
		}
		trimmed := bytes.TrimSpace(p)
		if !json.Valid(p) || !utf8.Valid(p) || state.Depth(p) > event.MaxDepth || string(trimmed) == "null" {
			if err == nil {
				t.Fatalf("CheckPayload(%q) took what is no payload", p)
			}
			return
		}
		problem, _, bigNumber, rerr := refReadNumbers(p)
		if rerr != nil {
			t.Fatalf("refRead(%q): %v (json.Valid takes it)", p, rerr)
		}
		switch name, twice := strings.CutPrefix(problem, "twice:"); {
		case problem == "" && bigNumber:
			if err == nil || !strings.Contains(err.Error(), "send it as a string") {
				t.Fatalf("CheckPayload(%q): want a number past the bounds refused, got %v", p, err)
			}
		case problem == "":
			if err != nil {
				t.Fatalf("CheckPayload(%q) = %v; the reference reads it one way only", p, err)
			}
		case twice:
			if want := "gives the member " + strconv.Quote(name) + " twice"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("CheckPayload(%q): want an error saying %q, got %v", p, want, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "lone UTF-16 surrogate escape") {
				t.Fatalf("CheckPayload(%q): want an error about %s, got %v", p, problem, err)
			}
		}
	})
}

// FuzzDerivedKeyOnlyForTheSameValue: two payloads New accepts without a
// key derive one key (and so are one event) only when they are one value
// (refRead's, exact to each UTF-16 code unit and keeping every member),
// whatever their spelling. So does a resend under one key count as the
// same submission, which compares the canonical forms too.
func FuzzDerivedKeyOnlyForTheSameValue(f *testing.F) {
	for _, s := range [][2]string{
		{`{"note":"A\ud800"}`, `{"note":"A\udbff"}`},
		{`{"note":"A\ud800"}`, `{"note":"A\ufffd"}`},
		{`{"A\udc00":1}`, `{"A\udfff":1}`},
		{`{"amount":100,"amount":5}`, `{"amount":999999,"amount":5}`},
		{`{"amount":100,"amount":5}`, `{"amount":5}`},
		{`{"a":1,"b":"\u00e9"}`, ` {"b":"é", "a":1} `},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`"\ud83d\ude00"`, `"😀"`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, p, q []byte) {
		ep, errP := event.New(fields(nil), p, "", "", now)
		eq, errQ := event.New(fields(nil), q, "", "", now)
		if errP != nil || errQ != nil || ep.IdempotencyKey != eq.IdempotencyKey {
			return
		}
		_, vp, err := refRead(p)
		if err != nil {
			t.Fatalf("refRead(%q): %v", p, err)
		}
		_, vq, err := refRead(q)
		if err != nil {
			t.Fatalf("refRead(%q): %v", q, err)
		}
		if vp != vq {
			t.Fatalf("%q and %q are two values (%s / %s), and derive one key %s", p, q, vp, vq, ep.IdempotencyKey)
		}
	})
}

// A number a schema check would read at great cost (1e999999 is a
// power of ten of two million bits, tens of milliseconds each) is
// refused, where it is, with how to send it instead; a number of any
// quantity's size is taken.
func TestPayloadNumberPastItsBoundsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ payload, say string }{
		{`{"a":[1,1e999999]}`, `payload has a number with an exponent past ±1000 at "/a/1": send it as a string`},
		{`{"id":` + strings.Repeat("7", 300) + `}`, `payload has a number of 300 digits (at most 256 are taken) at "/id": send it as a string`},
	} {
		if err := event.CheckPayload([]byte(c.payload)); !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%.40s: want ErrMalformed saying %q, got %v", c.payload, c.say, err)
		}
	}
	for _, p := range []string{`{"x":1.7976931348623157e308,"y":-4.9e-324,"z":123456789012345678901234567890123456}`, `[1e1000]`} {
		if err := event.CheckPayload([]byte(p)); err != nil {
			t.Errorf("%s: want it taken, got %v", p, err)
		}
	}
}
