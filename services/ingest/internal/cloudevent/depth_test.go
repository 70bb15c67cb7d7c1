package cloudevent_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/services/ingest/internal/cloudevent"
)

// Data nested past encoding/json's own limit (10,000 levels) is refused
// naming the data and the limit that binds, event.MaxDepth, not as "not
// JSON": in binary mode (the body is the data) and in structured mode.
// Data between the two limits
// is event.New's to refuse, as for every payload.
func TestDataPastDecoderDepthNamesTheLimit(t *testing.T) {
	t.Parallel()
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	limit := fmt.Sprintf("the limit is %d", event.MaxDepth)
	h := http.Header{}
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": "o-1", "ce-source": "/erp", "ce-type": "order.create"} {
		h.Set(k, v)
	}
	_, err := cloudevent.Binary(h, "application/json", []byte(nested(10001)))
	var ce *cloudevent.Error
	if !errors.As(err, &ce) || ce.Attribute != "data" || !strings.Contains(ce.Problem, "nests 10001 levels deep; "+limit) {
		t.Errorf("binary, data nested 10,001 levels: want the data refused naming %q, got %v", limit, err)
	}
	_, err = cloudevent.Structured([]byte(`{"specversion":"1.0","id":"o-1","source":"/erp","type":"order.create","data":` + nested(10001) + `}`))
	if !errors.As(err, &ce) || ce.Attribute != "data" || !strings.Contains(ce.Problem, fmt.Sprintf("may nest at most %d", event.MaxDepth)) {
		t.Errorf("structured, data nested 10,001 levels: want the data refused naming the limit %d, got %v", event.MaxDepth, err)
	}
	if _, err := cloudevent.Binary(h, "application/json", []byte(nested(event.MaxDepth+1))); err != nil {
		t.Errorf("binary, data nested %d levels: want it read (event.New refuses it), got %v", event.MaxDepth+1, err)
	}
}
