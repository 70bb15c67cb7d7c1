package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tenaz/tenaz/pkg/lifecycle"
)

// Stop undoes what Start set up in reverse order, once; a Start that
// fails undoes what it had set up before it returns; Ready follows.
func TestStartStopUndoInReverse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var b lifecycle.Base
	b.Init("svc", nil)
	var log []string
	start := func(fail bool) func(context.Context) error {
		return func(context.Context) error {
			log = append(log, "start a")
			b.Defer(func(context.Context) { log = append(log, "undo a") })
			if fail {
				return errors.New("b failed")
			}
			log = append(log, "start b")
			b.Defer(func(context.Context) { log = append(log, "undo b") })
			return nil
		}
	}
	if err := b.Ready(); err == nil || err.Error() != "svc not started" {
		t.Fatalf("before Start: want %q, got %v", "svc not started", err)
	}
	if err := b.Stop(ctx); err != nil || len(log) != 0 {
		t.Fatalf("Stop before Start: want nothing done, got %v %v", err, log)
	}
	if err := b.Start(ctx, start(true)); err == nil || !slices.Equal(log, []string{"start a", "undo a"}) {
		t.Fatalf("a failed Start: want its error and a undone, got %v %v", err, log)
	}
	if b.Started() {
		t.Fatal("a failed Start: want the service not started")
	}
	log = nil
	if err := b.Start(ctx, start(false)); err != nil || b.Ready() != nil {
		t.Fatalf("Start: want started and ready, got %v %v", err, b.Ready())
	}
	if err := b.Start(ctx, start(false)); err != nil || len(log) != 2 {
		t.Fatalf("a second Start: want nothing done, got %v %v", err, log)
	}
	for range 2 {
		if err := b.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"start a", "start b", "undo b", "undo a"}; !slices.Equal(log, want) {
		t.Fatalf("Stop twice: want %v, got %v", want, log)
	}
}
