package ingest

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// Only a reply header sealed with the installation's key names an HTTP
// handler: a producer can name any inbox and set any seal, but cannot
// make the one ingest checks without the key.
func TestOnlyASealedReplyHeaderNamesAHandler(t *testing.T) {
	mine := &replies{key: []byte("0123456789abcdef0123456789abcdef")}
	other := &replies{key: []byte("fedcba9876543210fedcba9876543210")}
	const inbox = "_INBOX.tenaz-ingest.abc.1"
	header := func(reply, seal string) nats.Header {
		h := nats.Header{}
		h.Set(headerReply, reply)
		if seal != "" {
			h.Set(headerReplySeal, seal)
		}
		return h
	}
	for _, c := range []struct {
		name string
		h    nats.Header
		want string
	}{
		{"sealed", header(inbox, mine.seal(inbox)), inbox},
		{"no seal", header(inbox, ""), ""},
		{"sealed with another key", header(inbox, other.seal(inbox)), ""},
		{"another inbox's seal", header(inbox, mine.seal(inbox+"0")), ""},
		{"not base64", header(inbox, "!!"), ""},
		{"sealed, outside ingest's inboxes", header("_INBOX.tenaz-producer.1", mine.seal("_INBOX.tenaz-producer.1")), ""},
	} {
		if got := mine.of(c.h); got != c.want {
			t.Errorf("%s: want reply %q, got %q", c.name, c.want, got)
		}
		if got := mine.answered(c.h); got != (c.want != "") {
			t.Errorf("%s: answered: want %v, got %v", c.name, c.want != "", got)
		}
	}
}
