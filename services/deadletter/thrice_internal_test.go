package deadletter

import (
	"context"
	"errors"
	"testing"
)

// thrice tries an operator action's follow-up step again on any error,
// up to three times, and stops at once on success, on an error final
// calls final, or when ctx ends.
func TestThriceTriesAgainUntilFinal(t *testing.T) {
	errDown, errRewritten := errors.New("server restarting"), errors.New("rewritten meanwhile")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		answers []error // op's answers in turn; the last repeats
		final   func(error) bool
		want    error
		calls   int
	}{
		{"down twice, then done", context.Background(), []error{errDown, errDown, nil}, nil, nil, 3},
		{"down for good", context.Background(), []error{errDown}, nil, errDown, 3},
		{"a final error", context.Background(), []error{errRewritten}, func(err error) bool { return err == errRewritten }, errRewritten, 1},
		{"down, then final", context.Background(), []error{errDown, errRewritten}, func(err error) bool { return err == errRewritten }, errRewritten, 2},
		{"stopping", cancelled, []error{errDown}, nil, errDown, 1},
	} {
		calls := 0
		err := thrice(c.ctx, func() error {
			a := c.answers[min(calls, len(c.answers)-1)]
			calls++
			return a
		}, c.final)
		if err != c.want || calls != c.calls {
			t.Errorf("%s: want %v after %d calls, got %v after %d", c.name, c.want, c.calls, err, calls)
		}
	}
}
