package dispatcher

import (
	"encoding/json"

	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/metrics"
)

// Version is reported by the micro service: the build's version, the
// same for every tenaz service (metrics.BuildInfo.SemVer).
var Version = metrics.Build().SemVer()

// registerMicro registers tenaz-dispatcher with an "accounts" endpoint
// listing the accounts this replica consumes.
func (s *Service) registerMicro() (micro.Service, error) {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name: "tenaz-dispatcher", Version: Version,
		Description: "Delivers events to their targets",
		QueueGroup:  "tenaz-dispatcher",
		// Every endpoint's stats carry the same essentials as /metrics.
		StatsHandler: s.o.Metrics.StatsHandler,
	})
	if err != nil {
		return nil, err
	}
	g := svc.AddGroup(s.cfg.Prefix + ".api.dispatcher")
	// Every account's name: an operator's.
	if err := g.AddEndpoint("accounts", s.o.Auth.OperatorOnly(micro.HandlerFunc(func(req micro.Request) {
		b, _ := json.Marshal(s.Accounts())
		_ = req.Respond(b)
	}))); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	// Once Start returns, the server routes requests to the endpoints.
	if err := s.nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}
