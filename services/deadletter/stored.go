package deadletter

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/tenaz/tenaz/pkg/config"
	liveconfig "github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/ops"
)

// The config in force and the accounts bucket (pkg/live), for operators:
//
//	GET    /v1/config                     ConfigStatus: the last reload, the keys awaiting a restart
//	GET    /v1/config/accounts            StoredListReply (query: account), header values redacted
//	PUT    /v1/config/accounts/{account}  {definition, reason} → StoredAccount
//	DELETE /v1/config/accounts/{account}  {reason} → StoredAccount (as it was)
//
// and the same as the NATS endpoints config.status, accounts.list,
// accounts.set and accounts.rm. Setting and removing are audited as
// actions on the account.

func (s *Service) storedRoutes(mux readyMux) {
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		s.answer(w, http.StatusOK, s.configStatus(), nil)
	})
	mux.HandleFunc("GET /v1/config/accounts", func(w http.ResponseWriter, r *http.Request) {
		q, ok := s.query(w, r, "account")
		if !ok {
			return
		}
		rep, err := s.storedList(r.Context(), ops.StoredListRequest{Account: q.Get("account")})
		s.answer(w, http.StatusOK, rep, err)
	})
	mux.HandleFunc("PUT /v1/config/accounts/{account}", decoded(s, func(r *http.Request, req *ops.StoredSetRequest) { req.Account = r.PathValue("account") }, s.storedSet))
	mux.HandleFunc("DELETE /v1/config/accounts/{account}", decoded(s, func(r *http.Request, req *ops.StoredRemoveRequest) { req.Account = r.PathValue("account") }, s.storedRemove))
}

// storedEndpoints are the NATS endpoints of the routes above.
func (s *Service) storedEndpoints() []struct {
	name string
	h    func(ctx context.Context, data []byte) (any, error)
} {
	return []struct {
		name string
		h    func(ctx context.Context, data []byte) (any, error)
	}{
		{ops.ConfigShow, func(context.Context, []byte) (any, error) { return s.configStatus(), nil }},
		{ops.StoredList, endpoint(s.storedList)},
		{ops.StoredSet, endpoint(s.storedSet)},
		{ops.StoredRemove, endpoint(s.storedRemove)},
	}
}

func (s *Service) configStatus() ops.ConfigStatus { return s.live.Status() }

func (s *Service) storedList(_ context.Context, req ops.StoredListRequest) (ops.StoredListReply, error) {
	if err := checkListRequest(ops.ListRequest{Account: req.Account}); err != nil {
		return ops.StoredListReply{}, err // not an empty list: no account has that name
	}
	rep, err := s.live.List(req.Account)
	return rep, storedError(err)
}

func (s *Service) storedSet(ctx context.Context, req ops.StoredSetRequest) (ops.StoredAccount, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return ops.StoredAccount{}, fail(http.StatusBadRequest, "reason_required", "a reason is required: it is recorded in the audit")
	}
	if len(req.Definition) == 0 {
		return ops.StoredAccount{}, fail(http.StatusBadRequest, "bad_request", "definition is required")
	}
	rep, err := s.live.Set(ctx, req.Account, req.Definition)
	if err != nil {
		return rep, storedError(err)
	}
	return rep, s.audit(ctx, ops.Action{At: s.now(), Action: ops.ActionSetAccount, Account: req.Account, Actor: actorOf(ctx), Reason: req.Reason})
}

func (s *Service) storedRemove(ctx context.Context, req ops.StoredRemoveRequest) (ops.StoredAccount, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return ops.StoredAccount{}, fail(http.StatusBadRequest, "reason_required", "a reason is required: it is recorded in the audit")
	}
	if err := config.ValidateAccountName(req.Account); err != nil {
		return ops.StoredAccount{}, storedError(err)
	}
	was, _ := s.live.List(req.Account)
	if err := s.live.Remove(ctx, req.Account); err != nil {
		return ops.StoredAccount{}, storedError(err)
	}
	var rep ops.StoredAccount
	if len(was.Items) == 1 {
		rep = was.Items[0]
	}
	return rep, s.audit(ctx, ops.Action{At: s.now(), Action: ops.ActionRemoveAccount, Account: req.Account, Actor: actorOf(ctx), Reason: req.Reason})
}

// storedError is how the operator API answers an error of pkg/live.
func storedError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, config.ErrInvalidConfig):
		return fail(http.StatusUnprocessableEntity, "invalid_config", "%v", err)
	case errors.Is(err, liveconfig.ErrNotStored):
		return fail(http.StatusNotFound, "not_found", "%v", err)
	case errors.Is(err, liveconfig.ErrNotWatching):
		return fail(http.StatusServiceUnavailable, "unavailable", "%v", err)
	}
	return err
}
