package metrics_test

import (
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/natstest"
)

// Every build's version reads as the semantic version the NATS micro
// services report, and micro takes each one (it refuses a version that is
// not SemVer, and "(devel)" is not).
func TestBuildSemVer(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.Start(t).Conn(t)
	for _, tc := range []struct {
		b    metrics.BuildInfo
		want string
	}{
		{metrics.BuildInfo{Version: "v0.4.0", Revision: "eabbc24b1f8bce93a25bb14035120549fc01ff13"}, "0.4.0"},
		{metrics.BuildInfo{Version: "v0.4.1-0.20261206074618-eabbc24b1f8b"}, "0.4.1-0.20261206074618-eabbc24b1f8b"},
		{metrics.BuildInfo{Version: "v0.4.1-0.20261206074618-eabbc24b1f8b+dirty"}, "0.4.1-0.20261206074618-eabbc24b1f8b+dirty"},
		{metrics.BuildInfo{Version: "v2.0.0+incompatible"}, "2.0.0+incompatible"},
		{metrics.BuildInfo{Version: "(devel)", Revision: "eabbc24b1f8bce93a25bb14035120549fc01ff13"}, "0.0.0-devel+eabbc24b1f8b"},
		{metrics.BuildInfo{Version: "(devel)", Revision: "eabbc24b1f8bce93a25bb14035120549fc01ff13-dirty"}, "0.0.0-devel+eabbc24b1f8b"},
		{metrics.BuildInfo{Version: "(devel)", Revision: "unknown"}, "0.0.0-devel"},
		{metrics.BuildInfo{Version: "", Revision: ""}, "0.0.0-devel"},
		{metrics.Build(), metrics.Build().SemVer()}, // this test binary's
	} {
		got := tc.b.SemVer()
		if got != tc.want {
			t.Errorf("%+v: want %q, got %q", tc.b, tc.want, got)
		}
		svc, err := micro.AddService(nc, micro.Config{Name: "semver-check", Version: got})
		if err != nil {
			t.Errorf("%+v: micro refuses %q: %v", tc.b, got, err)
			continue
		}
		if err := svc.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}
