package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tenaz/tenaz/pkg/client"
)

// A submission answered outcome_unknown is one to send again, as an
// unavailable one is: a caller that retries on ErrUnavailable retries it
// too, and one that wants to know can ask for ErrOutcomeUnknown.
func TestOutcomeUnknownIsUnavailable(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("submit: %w", &client.Error{Op: "POST /v1/events", Status: 503, Code: "outcome_unknown", Message: "may have been taken"})
	for _, tc := range []struct {
		target error
		want   bool
	}{
		{client.ErrOutcomeUnknown, true},
		{client.ErrUnavailable, true},
		{client.ErrStoreFull, false},
		{client.ErrNotFound, false},
	} {
		if got := errors.Is(err, tc.target); got != tc.want {
			t.Errorf("errors.Is(outcome_unknown, %v): want %v, got %v", tc.target, tc.want, got)
		}
	}
	if errors.Is(&client.Error{Status: 503, Code: client.ErrUnavailable}, client.ErrOutcomeUnknown) {
		t.Error("an unavailable answer is not outcome_unknown: it was not taken")
	}
}
