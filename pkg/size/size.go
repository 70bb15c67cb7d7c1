// Package size is what fits in NATS: the most tenaz adds to an event's
// payload in any message it writes for the event (Overhead), the largest
// payload the server and tenaz's streams carry (MaxBody), the start-up
// check of http.max_body_bytes against them (Check), and the error of a
// write NATS refuses for its size (ErrTooLarge).
//
//	if err := size.Check(ctx, nc, cfg.HTTP.MaxBodyBytes); err != nil { return err }
package size

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/streams"
)

// ErrTooLarge is wrapped by a write that NATS refused for its size. It is
// permanent: the same write fails on every retry.
var ErrTooLarge = errors.New("too large for NATS")

// jsErrMessageTooLarge is JetStream's err_code for a message over a
// stream's max_msg_size (a bucket's max_value_size) or the server's
// max_payload: "message size exceeds maximum allowed".
const jsErrMessageTooLarge = 10054

// IsTooLarge reports whether err is NATS refusing a message for its size:
// the client's own check against the server's max_payload
// (nats.ErrMaxPayload), JetStream's refusal, or ErrTooLarge.
func IsTooLarge(err error) bool {
	if errors.Is(err, ErrTooLarge) || errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrMessageTooLarge
}

// Overhead is the most tenaz adds to an event's payload in any message it
// writes for the event, headers included: the state record (payload,
// result, history and the other fields, each bounded by package state),
// the EVENTS and INTAKE messages, and the DEAD entry, which holds the
// envelope with the payload and the record without it (the largest).
// TestOverheadBoundsEveryMessage builds the largest of each.
const Overhead = 128 << 10

// Limit is one bound on the size of a message (headers and data).
type Limit struct {
	Bytes int64
	// What names it for an operator: "the server's max_payload", "the
	// tenaz_state bucket's max_value_size".
	What string
	// Stream is the stream it bounds, "" for the server's (every stream).
	Stream string
}

// streamLimits are the limits of tenaz's streams that hold a payload, as
// streams.Apply creates them (the data files).
var streamLimits = sync.OnceValue(func() []Limit {
	var out []Limit
	for _, f := range []struct{ file, stream, what string }{
		{"kv-state.json", "KV_" + names.BucketState, "the " + names.BucketState + " bucket's max_value_size"},
		{"stream-dead.json", names.StreamDead, "the " + names.StreamDead + " stream's max_msg_size"},
		{"stream-events.json", names.StreamEvents, "the " + names.StreamEvents + " stream's max_msg_size"},
		{"stream-intake.json", names.StreamIntake, "the " + names.StreamIntake + " stream's max_msg_size"},
	} {
		b, err := fs.ReadFile(streams.FS(), f.file)
		if err != nil {
			panic("size: " + err.Error()) // embedded data: a build without it is broken
		}
		var c struct {
			MaxMsgSize   int64 `json:"max_msg_size"`
			MaxValueSize int64 `json:"max_value_size"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			panic("size: " + f.file + ": " + err.Error())
		}
		if n := max(c.MaxMsgSize, c.MaxValueSize); n > 0 {
			out = append(out, Limit{Bytes: n, What: f.what, Stream: f.stream})
		}
	}
	return out
})

// Room is the most a message to stream may hold: the lower of the
// server's max_payload and the stream's own limit; 0 if neither is known.
func Room(nc *nats.Conn, stream string) int64 {
	room := nc.MaxPayload()
	for _, l := range streamLimits() {
		if l.Stream == stream && (room <= 0 || l.Bytes < room) {
			room = l.Bytes
		}
	}
	return max(room, 0)
}

// MaxBody is the largest payload whose messages fit every limit (the
// server's max_payload, as nc last heard it, and tenaz's stream limits),
// and the limit that binds.
func MaxBody(nc *nats.Conn) (int64, Limit) {
	ls := streamLimits()
	tight := ls[0]
	for _, l := range ls[1:] {
		if l.Bytes < tight.Bytes {
			tight = l
		}
	}
	if n := nc.MaxPayload(); n > 0 && n < tight.Bytes {
		tight = Limit{Bytes: n, What: "the server's max_payload"}
	}
	return max(tight.Bytes-Overhead, 0), tight
}

// Check refuses a maxBody (http.max_body_bytes) whose event would not fit
// in NATS: its payload, with its history and the rest of its state
// record, its DEAD entry, within the server's max_payload and tenaz's
// stream limits. It waits, within ctx, for nc to reach a server (whose
// max_payload it reads). The error wraps config.ErrInvalidConfig, names
// the key and says the largest figure that fits.
func Check(ctx context.Context, nc *nats.Conn, maxBody int64) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !nc.IsConnected() || nc.MaxPayload() <= 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("size: no NATS server answered, so its max_payload is unknown: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
	fit, l := MaxBody(nc)
	if maxBody <= fit {
		return nil
	}
	how := "lower http.max_body_bytes"
	if l.Stream == "" {
		how += ", or raise the server's max_payload"
	}
	return &config.KeyError{Key: "http.max_body_bytes", Msg: fmt.Sprintf(
		"%d bytes do not fit in NATS: %s is %d and an event's messages add up to %d bytes to its payload, so at most %d fit (%s)",
		maxBody, l.What, l.Bytes, Overhead, fit, how)}
}
