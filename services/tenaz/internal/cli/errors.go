package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/config"
)

// Exit codes of the tenaz binary.
const (
	ExitOK          = 0 // done
	ExitError       = 1 // anything else went wrong
	ExitUsage       = 2 // bad flags or arguments, or a request the service refused as invalid; invalid config
	ExitNotFound    = 3 // no such event, dead letter, review, breaker, job or stream
	ExitConflict    = 4 // the thing is not in a state that allows the action (e.g. cancel a done event)
	ExitUnavailable = 5 // NATS or the service did not answer in time, or no service listens
)

// ExitCodesHelp documents the exit codes in --help and the README.
const ExitCodesHelp = `Exit codes: 0 ok, 1 error, 2 usage (bad flags or arguments, invalid input or config), ` +
	`3 not found, 4 conflict (not allowed in the current state), 5 unavailable (NATS or the service did not answer in time).`

// Sentinels that commands wrap; ExitCode maps them to exit codes.
var (
	ErrUsage       = errors.New("usage")
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrUnavailable = errors.New("unavailable")
)

// ExitCode maps an error returned by a command to the exit code: a
// sentinel of this package, else the status of the service's answer (a
// *client.Error), else whether NATS or the service did not answer.
func ExitCode(err error) int {
	var ce *client.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage), errors.Is(err, config.ErrInvalidConfig):
		return ExitUsage
	case errors.Is(err, ErrNotFound):
		return ExitNotFound
	case errors.Is(err, ErrConflict):
		return ExitConflict
	case errors.Is(err, ErrUnavailable):
		return ExitUnavailable
	case errors.As(err, &ce):
		return statusExit(ce)
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoServers), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrConnectionClosed):
		return ExitUnavailable
	}
	return ExitError
}

// statusExit is the exit code of a service's error answer.
func statusExit(e *client.Error) int {
	switch {
	case e.Status == http.StatusNotFound || e.Code == client.ErrNotFound:
		return ExitNotFound
	case e.Status == http.StatusConflict || e.Code == "conflict":
		return ExitConflict
	case e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity || e.Status == http.StatusRequestEntityTooLarge:
		return ExitUsage
	case e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout || e.Status == http.StatusRequestTimeout:
		return ExitUnavailable
	}
	return ExitError
}

// errorCode is the machine code printed with --json.
func errorCode(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code != "" {
		return string(ce.Code)
	}
	switch ExitCode(err) {
	case ExitUsage:
		return "usage"
	case ExitNotFound:
		return "not_found"
	case ExitConflict:
		return "conflict"
	case ExitUnavailable:
		return "unavailable"
	}
	return "error"
}

// kindError is a message that matches one of the sentinels.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// failf is an error with the exit code of kind (ErrUsage, ErrNotFound, …).
func failf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}
