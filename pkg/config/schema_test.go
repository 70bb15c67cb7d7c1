package config_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/config"
)

// A schema violation says where and which rule, never the value: the
// text reaches the submitter, the DEAD entry and the logs, and a payload
// may carry a card number or a token in the field that failed.
func TestSchemaViolationQuotesNoValue(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_9fQ2schemaSecret"
	cfg, err := config.Parse([]byte(`
targets: {erp: {url: "https://erp.example.com/{{.Kind}}"}}
kinds:
  order.create:
    target: erp
    schema:
      type: object
      required: [order_id]
      additionalProperties: false
      properties:
        order_id: {type: string}
        card: {type: string, pattern: "^tok_"}
        plan: {enum: [basic, pro]}
        total: {type: number, minimum: 1}
        note: {type: string, maxLength: 4}
        kind: {const: order}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	sch, err := cfg.SchemaFor("order.create")
	if err != nil || sch == nil {
		t.Fatalf("SchemaFor: %v", err)
	}
	var doc any
	payload := `{"card":"` + secret + `","plan":"` + secret + `","kind":"` + secret +
		`","total":-4242424242424242,"note":"` + secret + `","extra":1}`
	if err := json.Unmarshal([]byte(payload), &doc); err != nil {
		t.Fatal(err)
	}
	verr := sch.Validate(doc)
	if verr == nil || !strings.Contains(verr.Error(), secret) {
		t.Fatalf("the check below needs jsonschema's own message to quote the value, got %v", verr)
	}
	got := config.SchemaViolation(verr)
	for _, leak := range []string{secret, "4242424242424242", "urn:tenaz"} {
		if strings.Contains(got, leak) {
			t.Errorf("the violation quotes %q: %s", leak, got)
		}
	}
	for _, want := range []string{
		`at "/card": does not match the pattern "^tok_"`, `at "/plan": must be one of ["basic","pro"]`,
		`at "/total": must be at least 1`, `at "/note": is longer than 4 characters`,
		`at "/kind": must be "order"`, `at "": misses the required "order_id"`, `has properties the schema does not allow: "extra"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want the violation to say %s, got %s", want, got)
		}
	}
}

// Numbers past 2^53 are judged exactly: read as float64, 9007199254740993
// would round to the schema's 9007199254740992 and pass its maximum and
// its const alike.
func TestMatchSchemaReadsNumbersExactly(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
targets: {erp: {url: "https://erp.example.com/{{.Kind}}"}}
kinds:
  ledger.post:
    target: erp
    schema:
      type: object
      properties:
        amount: {type: integer, maximum: 9007199254740992}
        account_no: {const: 9007199254740993}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	sch, err := cfg.SchemaFor("ledger.post")
	if err != nil || sch == nil {
		t.Fatalf("SchemaFor: %v", err)
	}
	for payload, want := range map[string]string{
		`{"amount": 9007199254740992}`:     "",
		`{"amount": 9007199254740993}`:     `at "/amount": must be at most 9007199254740992`,
		`{"account_no": 9007199254740993}`: "",
		`{"account_no": 9007199254740992}`: `at "/account_no": must be 9007199254740993`,
	} {
		err := config.MatchSchema(sch, []byte(payload))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: want it to match, got %s", payload, config.SchemaViolation(err))
		case want != "" && (err == nil || config.SchemaViolation(err) != want):
			t.Errorf("%s: want %q, got %v", payload, want, err)
		}
	}
}
