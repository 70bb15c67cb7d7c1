package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/streams"
)

// The stream layout applied with replicas 3 and a placement lands on the
// cluster as asked: every stream and bucket has 3 replicas in the named
// cluster on tagged servers, and the consumers inherit them.
func TestClusterPlacement(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t, 3)
	_, js := c.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // slack for a loaded machine (make test runs packages side by side)
	defer cancel()
	o := streams.Options{Replicas: 3, Placement: streams.Place(c.Name, []string{natstest.ClusterTag})}
	if _, err := streams.Apply(ctx, js, o); err != nil {
		t.Fatalf("apply: %v", err)
	}
	// Applying again (every service does at start) changes nothing.
	if _, err := streams.Apply(ctx, js, o); err != nil {
		t.Fatalf("apply again: %v", err)
	}
	ss, _ := streams.Streams(o)
	bs, _ := streams.Buckets(o)
	nameList := []string{}
	for _, s := range ss {
		nameList = append(nameList, s.Name)
	}
	for _, b := range bs {
		nameList = append(nameList, "KV_"+b.Bucket)
	}
	for _, name := range nameList {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s info: %v", name, err)
		}
		p := info.Config.Placement
		if info.Config.Replicas != 3 || p == nil || p.Cluster != c.Name || len(p.Tags) != 1 || p.Tags[0] != natstest.ClusterTag {
			t.Errorf("%s: want 3 replicas placed in %s on %s, got %d replicas, placement %+v", name, c.Name, natstest.ClusterTag, info.Config.Replicas, p)
		}
		if info.Cluster == nil || info.Cluster.Name != c.Name || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			t.Errorf("%s: want a leader and 2 replicas in %s, got %+v", name, c.Name, info.Cluster)
		}
	}
	for _, cons := range []struct{ stream, name string }{{names.StreamIntake, "ingest"}, {"TENAZ_ADVISORIES", "deadletter"}} {
		cc, err := js.Consumer(ctx, cons.stream, cons.name)
		if err != nil {
			t.Fatalf("consumer %s/%s: %v", cons.stream, cons.name, err)
		}
		info, err := cc.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("consumer %s/%s: want it replicated as its stream (3), got %+v", cons.stream, cons.name, info.Cluster)
		}
	}
}
