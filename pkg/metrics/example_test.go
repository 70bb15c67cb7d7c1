package metrics_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/state"
)

// A service records with the package-level functions (on metrics.Default,
// served by daemon.Mux on /metrics); this example uses its own Set.
func Example() {
	s, _ := metrics.New(prometheus.NewRegistry())
	s.Accepted("acme", "order.create")
	s.WaitTime("acme", "order.create", 120*time.Millisecond)
	s.Attempt("acme", "order.create", outcome.ClassTransient)
	s.Retry("acme", "order.create", outcome.ClassTransient)
	s.Outcome("acme", "order.create", state.Retrying)
	s.Attempt("acme", "order.create", outcome.ClassSuccess)
	s.Outcome("acme", "order.create", state.Done)

	b, _ := json.Marshal(s.Snapshot())
	fmt.Println(string(b))
	// Output:
	// {"accepted":1,"rejected":0,"attempts":2,"outcomes":2,"retries":1,"dead":0,"review":0,"reconciler_repairs":0,"callbacks":0,"polls":0,"breakers_open":0,"pending":0,"ack_pending":0}
}
