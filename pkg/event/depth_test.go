package event_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/event"
)

// deep is a payload nested n levels: n arrays around an object.
func deep(n int) []byte {
	return []byte(strings.Repeat("[", n-1) + `{"order_id":"o-1"}` + strings.Repeat("]", n-1))
}

// tooDeep is what a refusal of a payload nested n levels says.
func tooDeep(n int) string {
	return fmt.Sprintf("payload nests %d levels deep; the limit is %d", n, event.MaxDepth)
}

// A payload nested MaxDepth levels is taken by every check of a payload;
// one level more is refused as malformed, naming the limit, and so is
// one nested 9,998 levels, which encoding/json reads but whose DEAD entry
// (two levels more) it did not.
func TestPayloadDepthLimit(t *testing.T) {
	t.Parallel()
	if _, err := event.New(fields(nil), deep(event.MaxDepth), "", "", now); err != nil {
		t.Fatalf("New: want a payload nested %d levels accepted, got %v", event.MaxDepth, err)
	}
	if err := event.CheckPayload(deep(event.MaxDepth)); err != nil {
		t.Fatalf("CheckPayload: want a payload nested %d levels accepted, got %v", event.MaxDepth, err)
	}
	for _, n := range []int{event.MaxDepth + 1, 9998, 10001} {
		_, err := event.New(fields(nil), deep(n), "", "", now)
		if !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), tooDeep(n)) {
			t.Errorf("New, payload nested %d levels: want ErrMalformed saying %q, got %v", n, tooDeep(n), err)
		}
		err = event.CheckPayload(deep(n))
		if !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), tooDeep(n)) {
			t.Errorf("CheckPayload, payload nested %d levels: want ErrMalformed saying %q, got %v", n, tooDeep(n), err)
		}
	}
	if err := event.CheckDepth("result", deep(event.MaxDepth)); err != nil {
		t.Errorf("CheckDepth: want %d levels taken, got %v", event.MaxDepth, err)
	}
	want := fmt.Sprintf("result nests %d levels deep; the limit is %d", event.MaxDepth+1, event.MaxDepth)
	if err := event.CheckDepth("result", deep(event.MaxDepth+1)); !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckDepth: want ErrMalformed saying %q, got %v", want, err)
	}
}

// A submission whose payload is past encoding/json's own limit (10,000
// levels in all) is told the limit that binds, not only that the decoder
// "exceeded max depth".
func TestParseSubmissionPastDecoderDepth(t *testing.T) {
	t.Parallel()
	body := []byte(`{"account":"acme","kind":"k","payload":` + string(deep(10000)) + `}`)
	for name, parse := range map[string]func([]byte) error{
		"ParseSubmission":    func(b []byte) error { _, err := event.ParseSubmission(b); return err },
		"ParseSubmitRequest": func(b []byte) error { _, err := event.ParseSubmitRequest(b); return err },
	} {
		want := fmt.Sprintf("the submission nests 10001 levels deep; a payload may nest at most %d", event.MaxDepth)
		if err := parse(body); !errors.Is(err, event.ErrMalformed) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want ErrMalformed saying %q, got %v", name, want, err)
		}
	}
}
