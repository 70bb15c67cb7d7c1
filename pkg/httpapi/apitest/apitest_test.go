package apitest_test

import (
	"testing"

	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
)

// The served document is OpenAPI 3.1 and valid as kin-openapi reads it.
func TestDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	if ops := apitest.Operations(doc); len(ops) < 20 {
		t.Fatalf("want every route documented, got %v", ops)
	}
}
