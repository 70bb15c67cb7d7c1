package cloudevent_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/services/ingest/internal/cloudevent"
)

const good = `{"specversion":"1.0","id":"o-1","source":"/erp/orders","type":"order.create",
	"subject":"o-1","time":"2026-03-01T06:00:00Z","tenazaccount":"acme","partitionkey":"c-9",
	"retries":3,"urgent":true,"datacontenttype":"application/json","data":{"order_id":"o-1"}}`

func TestStructured(t *testing.T) {
	t.Parallel()
	ev, err := cloudevent.Structured([]byte(good))
	if err != nil {
		t.Fatalf("want a valid event, got %v", err)
	}
	if ev.ID != "o-1" || ev.Type != "order.create" || ev.Source != "/erp/orders" || ev.Subject != "o-1" || ev.Time.IsZero() ||
		ev.Extensions["tenazaccount"] != "acme" || ev.Extensions["partitionkey"] != "c-9" ||
		ev.Extensions["retries"] != "3" || ev.Extensions["urgent"] != "true" || string(ev.Data) != `{"order_id":"o-1"}` {
		t.Fatalf("want every attribute read, got %+v", ev)
	}
	// data_base64 of JSON data is the same data; a null attribute is unset.
	ev, err = cloudevent.Structured([]byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","subject":null,"data_base64":"eyJhIjoxfQ=="}`))
	if err != nil || string(ev.Data) != `{"a":1}` || ev.Subject != "" {
		t.Fatalf("data_base64: want data {\"a\":1}, got %+v, %v", ev, err)
	}
}

func TestBinary(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": "o%201", "ce-source": "/erp", "ce-type": "order.create",
		"Ce-Subject": "o-1", "ce-tenazaccount": "acme"} {
		h.Set(k, v)
	}
	ev, err := cloudevent.Binary(h, "application/json; charset=utf-8", []byte(`{"order_id":"o-1"}`))
	if err != nil {
		t.Fatalf("want a valid event, got %v", err)
	}
	if ev.ID != "o 1" || ev.Subject != "o-1" || ev.Extensions["tenazaccount"] != "acme" || string(ev.Data) != `{"order_id":"o-1"}` {
		t.Fatalf("want the attributes percent-decoded, got %+v", ev)
	}
	// NATS headers keep their case: lower-case names are read the same.
	nh := map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"1"}, "ce-source": {"s"}, "ce-type": {"t"}, "content-type": {"application/json"}}
	if ev, err := cloudevent.Binary(nh, cloudevent.ContentTypeOf(nh), []byte(`[1]`)); err != nil || ev.ID != "1" {
		t.Fatalf("NATS headers: want a valid event, got %+v, %v", ev, err)
	}
}

// Every refusal names the attribute at fault.
func TestRefusalsNameTheAttribute(t *testing.T) {
	t.Parallel()
	set := func(doc, member, value string) string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if value == "" {
			delete(m, member)
		} else {
			m[member] = json.RawMessage(value)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, c := range []struct{ name, body, attr string }{
		{"no specversion", set(good, "specversion", ""), "specversion"},
		{"specversion 0.3", set(good, "specversion", `"0.3"`), "specversion"},
		{"specversion a number", set(good, "specversion", `1.0`), "specversion"},
		{"no id", set(good, "id", ""), "id"},
		{"empty id", set(good, "id", `""`), "id"},
		{"no source", set(good, "source", ""), "source"},
		{"source not a URI-reference", set(good, "source", `"http://[::1"`), "source"},
		{"no type", set(good, "type", ""), "type"},
		{"empty subject", set(good, "subject", `""`), "subject"},
		{"bad time", set(good, "time", `"yesterday"`), "time"},
		{"relative dataschema", set(good, "dataschema", `"schemas/order"`), "dataschema"},
		{"XML data", set(good, "datacontenttype", `"application/xml"`), "datacontenttype"},
		{"no data", set(good, "data", ""), "data"},
		{"null data", set(good, "data", `null`), "data"},
		{"data and data_base64", set(good, "data_base64", `"e30="`), "data_base64"},
		{"data_base64 not base64", set(set(good, "data", ""), "data_base64", `"%%"`), "data_base64"},
		{"data_base64 not JSON", set(set(good, "data", ""), "data_base64", `"aGk="`), "data"},
		{"extension an object", set(good, "tenazaccount", `{"a":1}`), "tenazaccount"},
		{"extension a fraction", set(good, "retries", `1.5`), "retries"},
		{"extension name upper case", set(good, "Retries", `1`), "Retries"},
		{"not an object", `[]`, ""},
		{"trailing data", good + `{}`, ""},
		{"an extension given twice", `{"tenazaccount":"globex",` + good[1:], "tenazaccount"},
		{"id given twice", `{"id":"a",` + good[1:], "id"},
	} {
		_, err := cloudevent.Structured([]byte(c.body))
		var ce *cloudevent.Error
		if !errors.As(err, &ce) || !errors.Is(err, cloudevent.ErrInvalid) {
			t.Errorf("%s: want a *cloudevent.Error, got %v", c.name, err)
			continue
		}
		if ce.Attribute != c.attr || (c.attr != "" && !strings.Contains(err.Error(), `"`+c.attr+`"`)) {
			t.Errorf("%s: want the error to name %q, got %v", c.name, c.attr, err)
		}
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"s"}, "Ce-Type": {"t"}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
			} else {
				h[kv[i]] = append(h[kv[i]], kv[i+1])
			}
		}
		return h
	}
	for _, c := range []struct {
		name string
		h    http.Header
		ct   string
		body string
		attr string
	}{
		{"no specversion", hdr("Ce-Specversion", ""), "application/json", `{}`, "specversion"},
		{"no type", hdr("Ce-Type", ""), "application/json", `{}`, "type"},
		{"id twice", hdr("Ce-Id", "2"), "application/json", `{}`, "id"},
		{"bad percent-encoding", hdr("Ce-Subject", "a%zz"), "application/json", `{}`, "subject"},
		{"bad attribute name", hdr("Ce-Order_id", "1"), "application/json", `{}`, "order_id"},
		{"curl's form type", hdr(), "application/x-www-form-urlencoded", `{}`, "datacontenttype"},
		{"no content type", hdr(), "", `{}`, "datacontenttype"},
		{"ce-datacontenttype differs", hdr("Ce-Datacontenttype", "text/plain"), "application/json", `{}`, "datacontenttype"},
		{"no data", hdr(), "application/json", ``, "data"},
		{"data not JSON", hdr(), "application/json", `{`, "data"},
	} {
		_, err := cloudevent.Binary(c.h, c.ct, []byte(c.body))
		var ce *cloudevent.Error
		if !errors.As(err, &ce) || ce.Attribute != c.attr {
			t.Errorf("binary, %s: want an error naming %q, got %v", c.name, c.attr, err)
		}
	}
}

func TestContentTypes(t *testing.T) {
	t.Parallel()
	if !cloudevent.IsStructured("application/cloudevents+json; charset=UTF-8") || cloudevent.IsStructured("application/json") {
		t.Error("IsStructured: want the JSON event format's media type only")
	}
	if !cloudevent.IsBatch("application/cloudevents-batch+json") || cloudevent.IsBatch(cloudevent.ContentType) {
		t.Error("IsBatch: want the batch format's media type only")
	}
	if !cloudevent.IsBinary(http.Header{"Ce-Id": {"1"}}) || !cloudevent.IsBinary(map[string][]string{"ce-id": {"1"}}) ||
		cloudevent.IsBinary(http.Header{"Idempotency-Key": {"1"}}) {
		t.Error("IsBinary: want any ce- header, in any case, and nothing else")
	}
}

// FuzzCloudEvent reads any body in both modes, with any header. The parser
// never panics; an event it accepts has every required attribute and JSON
// data; a refusal is a *cloudevent.Error.
func FuzzCloudEvent(f *testing.F) {
	f.Add([]byte(good), "ce-id", "o-1", "application/json")
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"e30="}`), "Ce-Type", "t", "")
	f.Add([]byte(`{"a":1}`), "ce-subject", "%E2%82%AC", "application/cloudevents+json")
	f.Add([]byte(`null`), "ce-", "", "text/plain")
	f.Fuzz(func(t *testing.T, body []byte, name, value, contentType string) {
		check := func(mode string, ev cloudevent.Event, err error) {
			if err != nil {
				if !errors.As(err, new(*cloudevent.Error)) {
					t.Fatalf("%s: want a *cloudevent.Error, got %T %v", mode, err, err)
				}
				return
			}
			if ev.SpecVersion != cloudevent.SpecVersion || ev.ID == "" || ev.Source == "" || ev.Type == "" || !json.Valid(ev.Data) {
				t.Fatalf("%s: accepted an event without its required attributes or JSON data: %+v", mode, ev)
			}
		}
		ev, err := cloudevent.Structured(body)
		check("structured", ev, err)
		h := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"s"}, "Ce-Type": {"t"}}
		h[name] = append(h[name], value)
		ev, err = cloudevent.Binary(h, contentType, body)
		check("binary", ev, err)
	})
}
