package auth_test

import (
	"errors"
	"testing"

	"github.com/tenaz/tenaz/pkg/auth"
)

// Update puts another config's keys in force at once: a rotated key is
// refused and its successor accepted, and auth cannot be turned off (or
// on) this way: such an Update is refused and changes nothing.
func TestUpdateRotatesKeys(t *testing.T) {
	t.Parallel()
	before := parse(t, `
auth:
  keys:
    acme: {account: acme, scopes: [submit], hash: "${ACME}"}
    globex: {account: globex, scopes: [submit], hash: "${GLOBEX}", rate: 1/h, burst: 1}
`)
	a, err := auth.New(before)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.AuthenticateHeader("Bearer " + globexKey); err != nil || p.ID != "globex" {
		t.Fatalf("globex before: want its key, got %v %v", p, err)
	}
	after := parse(t, `
auth:
  keys:
    acme-2: {account: acme, scopes: [submit], hash: "${ALICE}"}
    globex: {account: globex, scopes: [submit], hash: "${GLOBEX}", rate: 1/h, burst: 1}
`)
	if err := a.Update(after); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AuthenticateHeader("Bearer " + acmeKey); !errors.Is(err, auth.ErrBadCredentials) {
		t.Fatalf("the rotated key: want ErrBadCredentials, got %v", err)
	}
	if p, err := a.AuthenticateHeader("Bearer " + aliceKey); err != nil || p.ID != "acme-2" || p.Account != "acme" {
		t.Fatalf("its successor: want acme-2 of acme, got %+v %v", p, err)
	}
	if err := a.Update(parse(t, "auth: {disabled: true}\n")); err == nil {
		t.Fatal("Update turned auth off")
	}
	if p, err := a.AuthenticateHeader("Bearer " + aliceKey); err != nil || p.ID != "acme-2" {
		t.Fatalf("a refused Update changed the keys: %+v %v", p, err)
	}
}
