package deadletter_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/services/deadletter"
)

// The service starts, reports ready, answers as a NATS micro service, and
// stops cleanly (twice, and before Start, without error).
func TestLifecycle(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	nc, _ := s.Conn(t)
	cfg, err := config.Parse(nil, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	svc, err := deadletter.New(deadletter.Options{Conn: nc, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := svc.Ready(); err == nil {
		t.Fatal("want not ready before Start")
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := svc.Ready(); err != nil {
		t.Fatalf("want ready after Start, got %v", err)
	}
	if _, err := nc.Request("$SRV.PING.tenaz-deadletter", nil, 2*time.Second); err != nil {
		t.Fatalf("micro ping: %v", err)
	}
	for i := range 2 {
		if err := svc.Stop(context.Background()); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if err := svc.Ready(); err == nil {
		t.Fatal("want not ready after Stop")
	}
}
