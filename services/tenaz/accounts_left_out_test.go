package tenaz_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/tenaz"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// A stored account with its own URL and credential whose sealed values
// stop opening (the sealing key changed on a reload) is left out. Its
// events must wait, not go to "*"'s URL with "*"'s credential: that is
// another endpoint, and the event is not its business. Once the old key
// is back, the event goes to the account's own URL, once.
func TestALeftOutAccountsEventsWait(t *testing.T) {
	t.Parallel()
	star, starURL := idempotentTarget(t)
	own, ownTarget := servicetest.Provider(t, provider.Faults{}, provider.WithIdempotent())
	dir := t.TempDir()
	file := filepath.Join(dir, "tenaz.yaml")
	const (
		keyA = "dGVuYXotdGVzdC1zZWFsaW5nLWtleS0zMi1ieXRlcyE="
		keyB = "YW5vdGhlci1zZWFsaW5nLWtleS1vZi0zMi1ieXRlcyE="
	)
	sealed := func(key string) string {
		return testConfig(filepath.Join(dir, "data"), starURL, `sealing_key: "`+key+`"`+"\n")
	}
	if err := os.WriteFile(file, []byte(sealed(keyA)), 0o600); err != nil {
		t.Fatal(err)
	}
	hup := make(chan os.Signal, 1)
	tz := startWith(t, sealed(keyA), tenaz.Options{ConfigPath: file, Reload: hup})
	base := "http://" + tz.HTTPAddr()
	op := newOperator(t, tz.NATSURL())

	def := filepath.Join(t.TempDir(), "newco.json")
	const secret = "Bearer newco-erp-credential"
	if err := os.WriteFile(def, []byte(`{"targets":{"erp":{"url":"`+ownTarget.URL+`/newco/{{.Kind}}","headers":{"Authorization":"`+secret+`"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	op.must(cli.ExitOK, "accounts", "set", "newco", "-f", def, "-m", "new customer", "--yes")

	reloadFile(t, base, file, sealed(keyB), hup)
	natstest.Eventually(t, 10*time.Second, func() bool { return configStatus(t, base).StoredErrors["newco"] != "" }, "newco left out")

	a := send(t, http.MethodPost, base+"/v1/events", "", `{"account":"newco","kind":"order.create","payload":{"order_id":"n-1"}}`)
	if a.status != http.StatusAccepted {
		t.Fatalf("submit for the left-out account: want 202 (kept, to wait), got %d %s", a.status, a.body)
	}
	var v view
	_ = json.Unmarshal(a.body, &v)
	// Nothing is awaited here: the event must not move, and a call to
	// "*"'s URL would come within milliseconds of the submission.
	natstest.Never(t, 2*time.Second, func() bool { return star.CallCount()+own.CallCount() > 0 },
		"a left-out account's event: want no call, got %v to \"*\"'s URL and %v to its own",
		natstest.Lazy(func() any { return star.CallCount() }), natstest.Lazy(func() any { return own.CallCount() }))

	reloadFile(t, base, file, sealed(keyA), hup)
	natstest.Eventually(t, 20*time.Second, func() bool {
		_ = json.Unmarshal(send(t, http.MethodGet, base+"/v1/events/"+v.ID, "", "").body, &v)
		return v.Status == "done"
	}, "newco's event done once its definition is back (last seen %+v)", &v)
	calls := own.Calls()
	if star.CallCount() != 0 || len(calls) != 1 || calls[0].Header.Get("Authorization") != secret || !strings.HasPrefix(calls[0].Path, "/newco/") {
		t.Fatalf("want newco's one call at its own URL with its credential and none at \"*\"'s, got %d and %d", len(calls), star.CallCount())
	}
}
