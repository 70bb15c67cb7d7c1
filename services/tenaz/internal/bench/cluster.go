package bench

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/streams"
)

// The cluster phase: a 3-node JetStream cluster on loopback, every stream
// and bucket R3 (durable by replication, the servers' default sync), and
// the fsync phase's load (16 accounts in turn) through tenaz on a store
// of 1 and of clusterPartitions partitions, each its own installation
// (prefix) on the one cluster. Reported: events/s of each, their ratio,
// and on how many nodes the partitions' leaders are.

const (
	clusterNodes      = 3
	clusterPartitions = 6
)

// Cluster runs the phase.
func Cluster(ctx context.Context, sz Sizes, r Report, concurrency int) error {
	target, err := startNoop()
	if err != nil {
		return err
	}
	defer target.srv.Close()
	urls, stop, err := startCluster(clusterNodes)
	if err != nil {
		return err
	}
	defer stop()
	accounts := make([]string, partitionAccounts)
	for i := range accounts {
		accounts[i] = "bench-" + strconv.Itoa(i)
	}
	rates := map[int]float64{}
	for _, parts := range []int{1, clusterPartitions} {
		cfg, err := BenchConfig(urls, target.url, concurrency)
		if err != nil {
			return err
		}
		cfg.Prefix = "c" + strconv.Itoa(parts)
		cfg.Streams.Replicas, cfg.Streams.Partitions = clusterNodes, parts
		tz, err := StartInstance(ctx, cfg)
		if err != nil {
			return fmt.Errorf("cluster: %d partitions: %w", parts, err)
		}
		var runs []float64
		for round := range sz.Rounds {
			v, err := tz.ThroughputOver(ctx, fmt.Sprintf("c%d-%d", parts, round), sz.Events/2, accounts)
			if err != nil {
				_ = tz.Stop(ctx)
				return fmt.Errorf("cluster: %d partitions: %w", parts, err)
			}
			runs = append(runs, v)
		}
		nodes, err := leaderNodes(ctx, tz, cfg.Prefix, parts)
		_ = tz.Stop(ctx)
		if err != nil {
			return err
		}
		rates[parts] = median(runs)
		r.Figure(fmt.Sprintf("cluster_e2e_events_per_s_partitions_%d", parts), rates[parts], "events/s")
		r.Figure(fmt.Sprintf("cluster_leader_nodes_partitions_%d", parts), float64(nodes), "nodes")
	}
	r.Figure(fmt.Sprintf("cluster_ratio_partitions_%d_vs_1", clusterPartitions), rates[clusterPartitions]/rates[1], "ratio")
	return nil
}

// leaderNodes counts the nodes that lead a partition's EVENTS stream or
// state bucket, as the cluster placed them.
func leaderNodes(ctx context.Context, tz *Instance, prefix string, parts int) (int, error) {
	seen := map[string]bool{}
	for p := range parts {
		for _, name := range []string{streams.EventsStream(prefix, p), "KV_" + streams.StateBucket(prefix, p)} {
			st, err := tz.js.Stream(ctx, name)
			if err != nil {
				return 0, fmt.Errorf("cluster: stream %s: %w", name, err)
			}
			if c := st.CachedInfo().Cluster; c != nil && c.Leader != "" {
				seen[c.Leader] = true
			}
		}
	}
	return len(seen), nil
}

// startCluster starts n clustered servers on loopback (file store in temp
// dirs) and returns their client URLs once the meta group knows them all.
func startCluster(n int) (urls string, stop func(), err error) {
	ports, err := loopbackPorts(2 * n)
	if err != nil {
		return "", nil, err
	}
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: "127.0.0.1:" + strconv.Itoa(ports[n+i])})
	}
	var srvs []*server.Server
	var dirs []string
	stop = func() {
		for _, s := range srvs {
			natsd.Shutdown(s)
		}
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}
	for i := range n {
		dir, err := os.MkdirTemp("", "tenaz-bench-cluster-*")
		if err != nil {
			stop()
			return "", nil, err
		}
		dirs = append(dirs, dir)
		name, clusterPort := "n"+strconv.Itoa(i+1), ports[n+i]
		srv, err := natsd.Start(natsd.Options{StoreDir: dir, Listen: "127.0.0.1:" + strconv.Itoa(ports[i]), ServerName: name,
			Configure: func(so *server.Options) {
				so.Cluster.Name = "tenaz-bench"
				so.Cluster.Host = "127.0.0.1"
				so.Cluster.Port = clusterPort
				so.Routes = routes
				so.Tags = jwt.TagList{"node:" + name}
			}})
		if err != nil {
			stop()
			return "", nil, err
		}
		srvs = append(srvs, srv)
		if urls != "" {
			urls += ","
		}
		urls += srv.ClientURL()
	}
	deadline := time.Now().Add(time.Minute)
	for {
		for _, s := range srvs {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				return urls, stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("cluster: no meta leader knowing all %d servers within a minute", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func loopbackPorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
