package deadletter

import (
	"net/http"

	"github.com/tenaz/tenaz/pkg/ops"
)

// entityData is the entity page: "what happened to X" from the audit
// archive (timeline.go).
type entityData struct {
	Reply ops.TimelineReply
	// Back is the page the operator came from ("" for none).
	Back string
}

// entity shows an entity's timeline across its events.
func (u *ui) entity(w http.ResponseWriter, r *http.Request) {
	rep, err := u.s.timeline(r.Context(), ops.TimelineRequest{Account: r.PathValue("account"), EntityID: r.PathValue("entity")})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	p := u.page(w, r, "", "Entity "+rep.EntityID)
	p.Data = entityData{Reply: rep, Back: backTo(r.URL.Query().Get("back"), "")}
	u.render(w, http.StatusOK, "entity", p)
}
