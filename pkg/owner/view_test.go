package owner_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/owner"
)

// Read, without joining, sees every replica's heartbeat and every lease;
// a replica that stopped heartbeating stays listed, not live. Held is a
// replica's own leases.
func TestReadShowsReplicasAndLeases(t *testing.T) {
	t.Parallel()
	srv := setup(t)
	d1, d2 := join(t, srv, "d1"), join(t, srv, "d2")
	waitLive(t, map[string]*replica{"d1": d1, "d2": d2}, []string{"d1", "d2"})
	mustAcquire(t, d1, "acme", true)
	mustAcquire(t, d1, "beta", true)
	mustAcquire(t, d2, "gamma", true)
	if got := d1.g.Held(); !slices.Equal(got, []string{"acme", "beta"}) {
		t.Fatalf("d1: want acme and beta held, got %v", got)
	}
	if got := d2.g.Held(); !slices.Equal(got, []string{"gamma"}) {
		t.Fatalf("d2: want gamma held, got %v", got)
	}

	_, js := srv.Conn(t)
	kv, err := js.KeyValue(context.Background(), names.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "l.acme", []byte("5")); err != nil { // as the dispatcher stores a learned limit
		t.Fatal(err)
	}
	expiry := 3 * beat
	read := func() owner.View {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := owner.Read(ctx, js, "", expiry)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := read()
	if want := map[string]string{"acme": "d1", "beta": "d1", "gamma": "d2"}; !equalMaps(v.Leases, want) {
		t.Fatalf("want the leases %v, got %v", want, v.Leases)
	}
	if v.Learned["acme"] != 5 || len(v.Learned) != 1 {
		t.Fatalf("want acme's learned concurrency 5, got %v", v.Learned)
	}
	if len(v.Replicas) != 2 || v.Replicas[0].Name != "d1" || v.Replicas[1].Name != "d2" || !v.Replicas[0].Live || !v.Replicas[1].Live {
		t.Fatalf("want d1 and d2 live, got %+v", v.Replicas)
	}

	d2.nc.Close() // dies: its heartbeat stops, its key stays
	natstest.Eventually(t, 5*time.Second, func() bool {
		v = read()
		return len(v.Replicas) == 2 && v.Replicas[0].Live && !v.Replicas[1].Live
	}, "want d2 listed and not live after its heartbeats stopped, got %+v", v.Replicas)
	if v.Leases["gamma"] != "d2" {
		t.Fatalf("want gamma's lease still d2's (nobody took it over), got %v", v.Leases)
	}
}
