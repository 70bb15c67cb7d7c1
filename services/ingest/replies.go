package ingest

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/store"
)

// replyInboxes prefixes the subjects on which HTTP handlers wait for
// their submissions' outcomes ("_INBOX.tenaz-ingest."), whatever inbox
// prefix ingest's connection has: under deploy/nats/values.yaml no NATS
// user but ingest's may read them.
var replyInboxes = natsconn.InboxPrefix(Name) + "."

// headerReplySeal is set beside headerReply: the reply subject's HMAC
// under the installation's reply key (replyKeyName). NATS permissions
// bind a producer's subjects, not its headers: any producer can name one
// of ingest's inboxes, and a reply header taken for an HTTP handler's
// would have ingest wait on a handler that is not one for each of its
// refusals (tell), and keep each of its submissions from an anchor
// (answered), so one producer could stall every account's intake. No
// producer's NATS user may read the key (deploy/nats/values.yaml).
const headerReplySeal = "Tenaz-Reply-Seal"

// replyKeyName is the key of tenaz_ops that holds the reply key: random
// bytes made by the first ingest replica to start, read by the others,
// never changed (every replica must seal and check with the same one).
const replyKeyName = "ingest.reply_key"

const replyKeyBytes = 32

// openReplyKey reads the installation's reply key, making it first if
// none exists yet. It gives up after 5 s: a publish the NATS user may not
// make is never answered. The error names the permissions it needs.
func openReplyKey(ctx context.Context, js jetstream.JetStream, subj names.Subjects) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	bucket := subj.Bucket(accounts.BucketOps)
	failed := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("reply key %s in %s (its NATS user needs $KV.%s.ingest.> and $JS.API.DIRECT.GET.KV_%s.$KV.%s.ingest.>, deploy/nats/values.yaml): %w",
			replyKeyName, bucket, bucket, bucket, bucket, err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return failed(err)
	}
	fresh := make([]byte, replyKeyBytes)
	_, _ = rand.Read(fresh) // never fails (crypto/rand)
	if _, err := kv.Create(ctx, replyKeyName, fresh); err == nil {
		return fresh, nil
	} else if !store.IsKeyTaken(err) {
		return failed(err)
	}
	// Another replica made it: read it, again while a follower that
	// answers the direct get has not caught up with the create.
	e, err := kv.Get(ctx, replyKeyName)
	for wait := 10 * time.Millisecond; errors.Is(err, jetstream.ErrKeyNotFound); wait = min(2*wait, time.Second) {
		select {
		case <-ctx.Done():
			return failed(err)
		case <-time.After(wait):
		}
		e, err = kv.Get(ctx, replyKeyName)
	}
	if err != nil {
		return failed(err)
	}
	if len(e.Value()) != replyKeyBytes {
		return nil, fmt.Errorf("reply key: %s in %s holds %d bytes, want %d: delete it with every ingest replica stopped, and the first to start makes another",
			replyKeyName, subj.Bucket(accounts.BucketOps), len(e.Value()), replyKeyBytes)
	}
	return e.Value(), nil
}

// seal is reply's headerReplySeal.
func (r *replies) seal(reply string) string {
	return base64.RawURLEncoding.EncodeToString(r.mac(reply))
}

func (r *replies) mac(reply string) []byte {
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(reply))
	return m.Sum(nil)
}

// headerPromised is set beside headerReply: the id of the event the HTTP
// handler answers 202 for if its wait ends first (the status URL's), and
// headerPromisedSeal its HMAC with the reply subject. A replica whose
// config refuses the submission (a lower max_body_bytes, an entity field
// whose value is no key) may have no envelope to keep it as: it keeps it
// as the promised event, dead, so that the 202's status URL shows why.
// Sealed, as the reply header is: a producer that named another event's
// id would have its refusal kept as that event.
const (
	headerPromised     = "Tenaz-Promised"
	headerPromisedSeal = "Tenaz-Promised-Seal"
)

// promise seals id, the event promised on reply (headerPromised).
func (r *replies) promise(reply, id string) string {
	return base64.RawURLEncoding.EncodeToString(r.mac("promised\x00" + reply + "\x00" + id))
}

// promised is the event id h promised on reply, or "" when it names none
// with a valid seal.
func (r *replies) promised(h nats.Header, reply string) string {
	id := h.Get(headerPromised)
	if reply == "" || names.ValidateEventID(id) != nil {
		return ""
	}
	got, err := base64.RawURLEncoding.DecodeString(h.Get(headerPromisedSeal))
	if err != nil || !hmac.Equal(got, r.mac("promised\x00"+reply+"\x00"+id)) {
		return ""
	}
	return id
}

// of is the reply subject h names, or "" when it names none under
// replyInboxes with a valid seal.
func (r *replies) of(h nats.Header) string {
	reply := h.Get(headerReply)
	if !strings.HasPrefix(reply, replyInboxes) {
		return ""
	}
	got, err := base64.RawURLEncoding.DecodeString(h.Get(headerReplySeal))
	if err != nil {
		return ""
	}
	if !hmac.Equal(got, r.mac(reply)) {
		return ""
	}
	return reply
}

// answered reports whether an HTTP handler may wait for a submission's
// outcome (its sealed reply header in h). Such a submission is never
// delegated: its refusal is told to the handler or kept as its event by
// its own delivery alone, and a drain reading it back passes it over (a
// handler told by one and an event kept by the other would disagree).
// HTTP producers are held by their keys' rates.
func (r *replies) answered(h nats.Header) bool { return r.of(h) != "" }

// replies multiplexes the outcomes of HTTP submissions over one
// subscription, as nats.go's request mux does for requests.
type replies struct {
	key    []byte // the reply key (openReplyKey)
	sub    *nats.Subscription
	prefix string
	mu     sync.Mutex
	n      uint64
	wait   map[string]chan []byte
}

func newReplies(nc *nats.Conn, key []byte) (*replies, error) {
	r := &replies{key: key, prefix: replyInboxes + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix) + ".", wait: map[string]chan []byte{}}
	sub, err := nc.Subscribe(r.prefix+"*", func(m *nats.Msg) {
		r.mu.Lock()
		ch, ok := r.wait[m.Subject]
		delete(r.wait, m.Subject)
		r.mu.Unlock()
		if ok {
			ch <- m.Data
		}
		if m.Reply != "" { // a refusal: say whether a handler takes it (see tell)
			ans := replyGone
			if ok {
				ans = replyTaken
			}
			_ = m.Respond([]byte(ans))
		}
	})
	if err != nil {
		return nil, err
	}
	r.sub = sub
	return r, nil
}

// next registers a waiter and returns its subject and channel; forget
// removes it and reports whether it was still waiting: false means an
// outcome was taken for it, and is (or is about to be) in the channel.
func (r *replies) next() (string, <-chan []byte, func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	subj := r.prefix + strconv.FormatUint(r.n, 10)
	ch := make(chan []byte, 1)
	r.wait[subj] = ch
	return subj, ch, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, waiting := r.wait[subj]
		delete(r.wait, subj)
		return waiting
	}
}

func (r *replies) close() {
	if r != nil && r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}
