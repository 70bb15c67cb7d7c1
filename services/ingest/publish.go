package ingest

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// codeOutcomeUnknown answers a submission whose write to INTAKE got no
// acknowledgement: it may be stored (and become its event) or not.
const codeOutcomeUnknown = "outcome_unknown"

// publishIntake writes a submission to INTAKE and waits for the stream's
// acknowledgement. On an error, unknown reports whether the submission may
// have been stored all the same: the publish left, and its answer was
// lost or late (no answer within ctx, the connection lost or closed while
// waiting, an answer that could not be read). unknown is false when the
// message was certainly not stored: the connection was closed or ctx done
// before anything was sent, or the error says so (see notStored).
func publishIntake(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, m *nats.Msg) (unknown bool, err error) {
	// nats.go answers these two conditions with the same errors before it
	// sends as it does after: ErrConnectionClosed, ctx.Err().
	unsent := nc.IsClosed() || ctx.Err() != nil
	_, err = js.PublishMsg(ctx, m)
	if err == nil {
		return false, nil
	}
	return !unsent && !notStored(err), err
}

// notSent are nats.go's refusals to send a message at all.
var notSent = []error{
	nats.ErrBadSubject, nats.ErrMaxPayload, nats.ErrHeadersNotSupported, nats.ErrConnectionDraining,
	nats.ErrReconnectBufExceeded, nats.ErrInvalidMsg, nats.ErrInvalidConnection, nats.ErrInvalidContext,
	jetstream.ErrInvalidOption,
}

// notStored reports whether err, the error of a JetStream publish, says
// for certain that the message was not stored: the server refused it (an
// API error: the storage full, a limit, a failed expectation), nothing
// listens on its subject (no responders: no stream takes it), or nats.go
// refused to send it. Anything else leaves the outcome unknown.
func notStored(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	for _, e := range notSent {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
