module github.com/tenaz/tenaz/services/dispatcher

go 1.26.8

require (
	github.com/tenaz/tenaz/pkg v0.0.0
	github.com/tenaz/tenaz/streams v0.0.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/tenaz/tenaz/pkg => ../../pkg

replace github.com/tenaz/tenaz/streams => ../../streams
