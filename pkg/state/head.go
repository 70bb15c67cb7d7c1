package state

import (
	"bytes"
	"encoding/json"
	"time"
)

// Head is a record without its history: what a sweep over every record
// (the reconciler, a check of the whole bucket) needs. The history comes
// last in the stored JSON and dominates its size.
type Head struct {
	ID        string     `json:"id"`
	Account   string     `json:"account"`
	Kind      string     `json:"kind"`
	Status    State      `json:"status"`
	Stage     string     `json:"stage"`
	NextRunAt *time.Time `json:"next_run_at"`
	Deadline  *time.Time `json:"deadline"`
	UpdatedAt time.Time  `json:"updated_at"`
}

var historyKey = []byte(`,"history":`)

// DecodeHead decodes the Head of a stored record without decoding its
// history. AppendJSON writes "history" after every field of Head, and
// the last `,"history":` of the JSON is that key (one inside the result
// or the payload comes before it; one inside a history string is
// escaped), so the JSON cut there is the head. A cut that does not
// decode (JSON another encoder wrote, in another key order) is decoded
// whole.
func DecodeHead(b []byte) (Head, error) {
	var h Head
	if i := bytes.LastIndex(b, historyKey); i > 0 {
		cut := make([]byte, 0, i+1)
		cut = append(append(cut, b[:i]...), '}')
		if json.Unmarshal(cut, &h) == nil {
			return h, nil
		}
	}
	err := json.Unmarshal(b, &h)
	return h, err
}
