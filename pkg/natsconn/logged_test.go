package natsconn_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// A publish the NATS user may not make returns no error (the server
// refuses it afterwards): Logged puts the refusal, with its subject, in
// the log at error level, where an operator finds which permission to
// grant. What the user may do is not logged.
func TestLoggedNamesARefusedPermission(t *testing.T) {
	t.Parallel()
	srv := start(t, natsd.Auth{}, func(o *server.Options) {
		o.Users = []*server.User{{Username: "svc", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{"allowed.>"}},
		}}}
	})
	var out servicetest.LogBuffer
	log := zerolog.New(&out)
	nc, err := natsconn.Connect(config.NATS{User: "svc", Password: "pw"}, "tenaz-test", srv.ClientURL(), natsconn.Logged(&log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Publish("allowed.x", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("refused.x", nil); err != nil {
		t.Fatalf("the refused publish: %v (the server refuses it later, not the call)", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), `refused.x`) {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal of refused.x logged within 10 s; the log: %q", out.String())
		}
		_ = nc.FlushTimeout(100 * time.Millisecond) // a round trip: the server's -ERR comes before its PONG
	}
	line := out.String()
	for _, want := range []string{`"level":"error"`, `"connection":"tenaz-test"`, `permissions violation`, `grant the permission`} {
		if !strings.Contains(line, want) {
			t.Errorf("the log line lacks %s: %q", want, line)
		}
	}
	if strings.Contains(line, "allowed.x") {
		t.Errorf("the allowed publish was logged: %q", line)
	}
}
