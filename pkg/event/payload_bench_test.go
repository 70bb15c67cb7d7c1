package event_test

import (
	"testing"

	"github.com/tenaz/tenaz/pkg/event"
)

// benchPayload is a typical payload of about 1 KB: an order with a
// customer, an address, three lines and a note with an escape or two.
var benchPayload = []byte(`{"order_id":"o-20260301-000123","status":"paid","created_at":"2026-03-01T12:00:00Z",
"customer":{"id":"c-9876","name":"José da Silva","email":"jose.silva@example.com","phone":"+55 11 91234-5678",
"tags":["vip","wholesale"]},"shipping":{"street":"Rua das Flores, 123","city":"São Paulo","state":"SP",
"postal_code":"01234-567","country":"BR"},"lines":[{"sku":"SKU-001","name":"Widget \"Pro\"","qty":2,"unit_price":1990,
"discount":0},{"sku":"SKU-002","name":"Gadget","qty":1,"unit_price":4990,"discount":500},{"sku":"SKU-003",
"name":"Cable 2m","qty":3,"unit_price":990,"discount":0}],"totals":{"subtotal":11940,"discount":500,"shipping":1500,
"tax":0,"total":12940,"currency":"BRL"},"payment":{"method":"card","brand":"visa","last4":"4242","installments":3,
"authorized_at":"2026-03-01T12:00:03Z"},"note":"Deixar na portaria.\nLigar antes \u2014 obrigado!","metadata":
{"channel":"web","campaign":"spring-sale","ab":[1,0,1],"referrer":null,"gift":false}}`)

// BenchmarkCheckPayload is the check every submission's payload passes.
func BenchmarkCheckPayload(b *testing.B) {
	b.SetBytes(int64(len(benchPayload)))
	b.ReportAllocs()
	for b.Loop() {
		if err := event.CheckPayload(benchPayload); err != nil {
			b.Fatal(err)
		}
	}
}
