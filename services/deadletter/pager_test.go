package deadletter_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/state"
)

// The pager's links of the dead letters list keep the filter as a query
// string (account=acme&…), not as one escaped value.
func TestDeadListPagerKeepsTheFilter(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.seed(2, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 2)
	resp, err := http.Get(e.http.URL + "/ui/dead?account=acme&limit=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `href="/ui/dead?account=acme&amp;cursor=`) {
		t.Fatalf("the next page's link: want /ui/dead?account=acme&cursor=…, the page has %s", b)
	}
}
