package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/provider"
)

// clusterOptions say what a cluster runs.
type clusterOptions struct {
	dir            string // work directory: binaries, config, store, logs
	race           bool
	dispatchers    int
	pollers        int
	faults         provider.Faults
	callbackFaults provider.CallbackFaults
	seed           uint64
	cooldown       time.Duration
	callbackSLA    time.Duration
	pollSLA        time.Duration
	logLevel       string
	debug          map[string]bool // services logging at debug level
	out            io.Writer
}

// cluster is a running nats-server process, the service processes and the
// providers, plus the run's own NATS connection.
type cluster struct {
	o       clusterOptions
	nats    *proc
	svcs    []*proc
	ingest  string // "http://127.0.0.1:port"
	natsURL string
	fleet   *fleet
	nc      *nats.Conn
	js      jetstream.JetStream
	cancel  context.CancelFunc // the keepers
}

// all is nats-server and every service.
func (c *cluster) all() []*proc { return append([]*proc{c.nats}, c.svcs...) }

func startCluster(ctx context.Context, o clusterOptions) (*cluster, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(o.dir, "bin")
	logs := filepath.Join(o.dir, "logs")
	for _, d := range []string{bin, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(o.out, "# building the services of %s into %s (race: %v)\n", root, bin, o.race)
	if err := buildServices(ctx, root, bin, o.race); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	natsAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	ingestAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &cluster{o: o, ingest: "http://" + ingestAddr, natsURL: "nats://" + natsAddr}
	if c.fleet, err = newFleet(o.faults, o.callbackFaults, o.seed, c.ingest); err != nil {
		return nil, err
	}
	cfg := filepath.Join(o.dir, "tenaz.yaml")
	if err := writeConfig(cfg, configParams{providers: c.fleet.base(), cooldown: o.cooldown, callbackSLA: o.callbackSLA,
		pollSLA: o.pollSLA, logLevel: o.logLevel}); err != nil {
		c.fleet.close()
		return nil, err
	}
	c.nats = &proc{name: "nats-server", path: self, args: []string{"serve-nats", filepath.Join(o.dir, "store"), natsAddr},
		env: os.Environ(), logPath: filepath.Join(logs, "nats-server.log"), ready: tcpReady(natsAddr)}
	add := func(svc string, n int, addr string) error {
		for i := range n {
			name := svc
			if n > 1 {
				name = fmt.Sprintf("%s-%d", svc, i+1)
			}
			a := addr
			if a == "" || i > 0 {
				var err error
				if a, err = freePort(); err != nil {
					return err
				}
			}
			env := append(os.Environ(), "NATS_URL="+c.natsURL, "TENAZ_HTTP_ADDR="+a, "TENAZ_LOG_FORMAT=json")
			if o.debug[svc] {
				env = append(env, "TENAZ_LOG_LEVEL=debug")
			}
			c.svcs = append(c.svcs, &proc{name: name, path: filepath.Join(bin, "tenaz-"+svc), args: []string{"--config", cfg},
				env:  env,
				addr: a, logPath: filepath.Join(logs, name+".log"), ready: httpReady(a)})
		}
		return nil
	}
	for _, s := range []struct {
		svc  string
		n    int
		addr string
	}{{"ingest", 1, ingestAddr}, {"dispatcher", o.dispatchers, ""}, {"poller", o.pollers, ""}, {"deadletter", 1, ""}} {
		if err := add(s.svc, s.n, s.addr); err != nil {
			c.fleet.close()
			return nil, err
		}
	}
	kctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.nats.op.Lock()
	err = c.nats.start()
	c.nats.op.Unlock()
	if err != nil {
		c.stop()
		return nil, err
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.nats.waitReady(rctx)
	rcancel()
	if err != nil {
		c.stop()
		return nil, err
	}
	go c.nats.keep(kctx)
	// ingest first: it (like every service) applies the stream layout; the
	// others then start against it.
	for _, p := range c.svcs {
		p.op.Lock()
		err := p.start()
		p.op.Unlock()
		if err != nil {
			c.stop()
			return nil, err
		}
		go p.keep(kctx)
	}
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	c.nc, err = nats.Connect(c.natsURL, nats.Name("tenaz-chaos"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectBufSize(-1))
	if err != nil {
		c.stop()
		return nil, err
	}
	c.js, _ = jetstream.New(c.nc)
	return c, nil
}

// waitReady waits until nats-server and every service are up and ready.
func (c *cluster) waitReady(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var errs []error
	for _, p := range c.all() {
		if err := p.waitReady(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stop drains every service (SIGTERM), then nats-server, then the
// providers.
func (c *cluster) stop() {
	if c.cancel != nil {
		c.cancel()
	}
	if c.nc != nil {
		c.nc.Close()
	}
	for _, p := range c.svcs {
		p.shutdown()
	}
	if c.nats != nil {
		c.nats.shutdown()
	}
	if c.fleet != nil {
		c.fleet.close()
	}
}

// findings are the lines of every log that must never appear.
func (c *cluster) findings() []string {
	var out []string
	for _, p := range c.all() {
		f, err := logFindings(p.logPath)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: reading the log: %v", p.name, err))
		}
		out = append(out, f...)
	}
	return out
}
