module github.com/tenaz/tenaz/tools

go 1.26.8

require golang.org/x/mod v0.41.0
