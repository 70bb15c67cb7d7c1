package config_test

import (
	"errors"
	"fmt"

	"github.com/tenaz/tenaz/pkg/config"
)

func ExampleParse() {
	doc := `
accounts:
  "*": {rate: 50/s}
targets:
  erp:
    url: "https://erp.example.com/api/{{.Kind}}"
    signing_secret: "${ERP_SIGNING_SECRET}"
kinds:
  order.create: {target: erp, attempts: 3}
`
	env := map[string]string{
		"ERP_SIGNING_SECRET": "whsec_ZXhhbXBsZS1lcnAtc2lnbmluZy1zZWNyZXQtMzJieXQ=",
		"TENAZ_HTTP_ADDR":    ":9090",
	}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	cfg, err := config.Parse([]byte(doc), getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	k, _ := cfg.Kind("order.create")
	t := cfg.TargetFor("acme", k.Target)
	a := cfg.Account("acme")
	fmt.Println(cfg.HTTP.Addr, k.Attempts, k.Backoff.Initial, t.Method, t.SigningSecret)
	fmt.Println(a.Concurrency, a.Rate, a.Breaker.Failures, a.Breaker.Cooldown)

	_, err = config.Parse([]byte(`kinds: {order.create: {target: nope}}`), nil)
	fmt.Println(errors.Is(err, config.ErrInvalidConfig), err)
	// Output:
	// :9090 3 30s POST [redacted]
	// 8 50/s 5 2m
	// true kinds.order.create.target: unknown target "nope"
}
