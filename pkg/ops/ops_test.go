package ops_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
)

// Call decodes a reply, turns a micro error answer into *Error with the
// status and code of its body, and says plainly when nobody answers.
func TestCall(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	nc, _ := s.Conn(t)
	svc, err := micro.AddService(nc, micro.Config{Name: ops.ServiceName, Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	_ = svc.AddEndpoint("list", micro.HandlerFunc(func(r micro.Request) {
		_ = r.RespondJSON(ops.ListReply{Items: []ops.Item{{ID: "ev_1"}}, Total: 1})
	}), micro.WithEndpointSubject(ops.Subject("", ops.DeadList)))
	_ = svc.AddEndpoint("show", micro.HandlerFunc(func(r micro.Request) {
		_ = r.Error("404", "event ev_x not found", []byte(`{"error":{"code":"not_found","message":"event ev_x not found"}}`))
	}), micro.WithEndpointSubject(ops.Subject("tenaz", ops.DeadShow)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var rep ops.ListReply
	if err := ops.Call(ctx, nc, "tenaz.api.dead.list", ops.ListRequest{Account: "acme"}, &rep); err != nil || rep.Total != 1 || rep.Items[0].ID != "ev_1" {
		t.Fatalf("list: want one item, got %+v %v", rep, err)
	}
	err = ops.Call(ctx, nc, ops.Subject("", ops.DeadShow), ops.ShowRequest{ID: "ev_x"}, &ops.ShowReply{})
	var oe *ops.Error
	if !errors.As(err, &oe) || oe.Status != 404 || oe.Code != "not_found" || oe.Message != "event ev_x not found" {
		t.Fatalf("show: want *ops.Error 404 not_found, got %v", err)
	}
	if err := ops.Call(ctx, nc, ops.Subject("", ops.BreakersList), ops.BreakersRequest{}, nil); !errors.Is(err, ops.ErrNoService) {
		t.Fatalf("no responder: want ErrNoService, got %v", err)
	}
}
