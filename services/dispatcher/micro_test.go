package dispatcher_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/provider"
)

// The dispatcher answers as a NATS micro service at the build's version,
// the one every tenaz service reports (`nats micro ls` shows one).
func TestMicroServiceAtTheBuildsVersion(t *testing.T) {
	t.Parallel()
	h := setup(t, `
targets: {erp: {url: "${TARGET}/x"}}
kinds: {order.create: {target: erp}}
`, provider.Faults{})
	h.dispatcher("d1", nil)
	nc, _ := h.Srv.Conn(t)
	m, err := nc.Request("$SRV.PING.tenaz-dispatcher", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ping struct{ Version string }
	if err := json.Unmarshal(m.Data, &ping); err != nil || ping.Version != metrics.Build().SemVer() {
		t.Fatalf("want version %s, got %s (%v)", metrics.Build().SemVer(), m.Data, err)
	}
}
