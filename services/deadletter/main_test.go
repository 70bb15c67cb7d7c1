package deadletter_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the service starts (consumers, the index watch, the job
// runner, the state scan, the digest) ends with Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
