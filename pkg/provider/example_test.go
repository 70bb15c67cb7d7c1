package provider_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/tenaz/tenaz/pkg/provider"
)

// A provider that fails the first call for every key, then succeeds.
func Example() {
	p := provider.New(provider.Faults{FailFirst: 1}, provider.WithSeed(1))
	defer p.Close()
	srv := httptest.NewServer(p)
	defer srv.Close()

	for attempt := 1; attempt <= 2; attempt++ {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"order_id":"o-1"}`))
		req.Header.Set("Idempotency-Key", "o-1")
		req.Header.Set("Tenaz-Attempt", strconv.Itoa(attempt))
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(attempt, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	fmt.Println("effects:", p.Effects("o-1"), "duplicates:", p.DuplicateEffects())
	// Output:
	// 1 503 {"error":"service unavailable: fail first 1 (call 1)"}
	// 2 200 {"id":"ref_1","status":"accepted","key":"o-1"}
	// effects: 1 duplicates: map[]
}

// An idempotent provider replays its answer instead of applying twice.
func ExampleWithIdempotent() {
	p := provider.New(provider.Faults{}, provider.WithIdempotent())
	defer p.Close()
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":500}`))
		req.Header.Set("Idempotency-Key", "c-1")
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed"), strings.TrimSpace(rec.Body.String()))
	}
	fmt.Println("effects:", p.Effects("c-1"))
	// Output:
	// 200  {"id":"ref_1","status":"accepted","key":"c-1"}
	// 200 true {"id":"ref_1","status":"accepted","key":"c-1"}
	// effects: 1
}
