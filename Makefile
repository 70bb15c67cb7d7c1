# tenaz — every target runs across all modules of go.work, found with
# `go list -m`, never a hand-kept list.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)
GO ?= go
# In a go.work workspace go build stamps no git revision (tenaz version
# prints it) unless asked; outside a git checkout asking fails.
BUILDVCS := $(shell git rev-parse --is-inside-work-tree >/dev/null 2>&1 && echo true || echo auto)
BIN := $(CURDIR)/bin
MODULES = $(shell $(GO) list -m -f '{{.Dir}}')
PACKAGES = $(patsubst $(CURDIR)/%,./%/...,$(MODULES))
NATSCLI_VERSION := v0.5.0
STATICCHECK_VERSION := v0.8.2
FUZZTIME ?= 10s
SOAK_DURATION ?= 30m
CHAOS_FLAGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build every binary (tenaz, tenaz-<service>, tenaz-bench) into ./bin
	@mkdir -p $(BIN)
	@for m in $(MODULES); do \
	  if [ -d $$m/cmd ]; then (cd $$m && GOBIN=$(BIN) $(GO) install -buildvcs=$(BUILDVCS) ./cmd/...) || exit 1; fi; \
	done

.PHONY: tools
tools: $(BIN)/nats ## Install the nats CLI into ./bin (for the README tour)

$(BIN)/nats:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

.PHONY: run
run: build tools ## Start tenaz on :8080: embedded NATS, demo config, demo provider
	@echo "tenaz: http://localhost:8080  (nats CLI: ./bin/nats; add ./bin to PATH)"
	$(BIN)/tenaz run $(if $(CONFIG),--config $(CONFIG))

.PHONY: test
# Tests built only without the race detector (a file with `//go:build
# !race` says why), run after the rest.
NORACE_TESTS = ^(TestClusterCompareAndSet|TestClusterLeaseRace|TestClusterLaneAppendAfterRelease)$$

# One go test over every module: it runs two packages at a time (one a
# core), so a module whose tests are one long package no longer leaves a
# core idle for minutes. Every package runs even after one fails, and the
# failed ones are named at the end.
test: test-deps ## Unit, property and integration tests of every module, with the race detector
	@out=$$(mktemp); \
	$(GO) test -race -count=1 -timeout 15m $(PACKAGES) 2>&1 | tee $$out; rc=$${PIPESTATUS[0]}; \
	$(GO) test -count=1 -timeout 5m -run '$(NORACE_TESTS)' ./pkg/natstest/ 2>&1 | tee -a $$out; [ $${PIPESTATUS[0]} -eq 0 ] || rc=1; \
	failed=$$(awk '$$1 == "FAIL" && NF >= 2 {print $$2}' $$out | sort -u | xargs); rm -f $$out; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED in: $${failed:-nothing named (a build or setup error, above)}"; exit 1; fi; \
	echo "make test: every package passed"

# The system packages the tests drive for real, from Debian, installed
# only when missing (root, or through sudo): chromium for the operator
# screen's browser tests (services/deadletter), prometheus for promtool,
# which deploy/'s tests use to check and unit-test the alert rules and
# parse the dashboard's queries (its daemon is not needed), postgresql for
# the outbox relay's tests (services/tenaz/internal/outbox, and deploy/'s
# TestNATSUsers, which runs the relay as its NATS user: pkg/pgtest starts a
# throwaway cluster with initdb, which Debian keeps off PATH, hence the
# glob).
TEST_DEPS := chromium:chromium promtool:prometheus /usr/lib/postgresql/*/bin/initdb:postgresql

.PHONY: test-deps
test-deps: ## Install what the tests need and Go cannot fetch (Debian packages; root or sudo)
	@missing=""; for d in $(TEST_DEPS); do \
	  command -v $${d%%:*} >/dev/null 2>&1 || missing="$$missing $${d#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  s=""; [ "$$(id -u)" -eq 0 ] || s="sudo"; \
	  echo "test-deps: installing$$missing"; \
	  $$s apt-get update -q && $$s env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

.PHONY: fuzz
# The targets are found in the test files' source: asking go test -list
# builds every package's tests, minutes of CI for the few with a target.
fuzz: ## Run every fuzz target for FUZZTIME each (default 10s); fails if any target fails
	@failed=""; for m in $(MODULES); do cd $$m; \
	  for pd in $$($(GO) list -f '{{.ImportPath}}={{.Dir}}' ./...); do pkg=$${pd%%=*}; \
	    for f in $$(cat $${pd#*=}/*_test.go 2>/dev/null | sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p'); do \
	      echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || failed="$$failed $$pkg.$$f"; \
	    done; done; done; \
	if [ -n "$$failed" ]; then echo "make fuzz: FAILED:$$failed"; exit 1; fi; \
	echo "make fuzz: every target passed"

.PHONY: bench
bench: ## Benchmarks: tenaz end to end against raw JetStream (BENCH_QUICK=1: short run; BENCH_PHASE=capacity: one phase)
	cd services/tenaz && $(GO) run ./cmd/tenaz-bench -out $(CURDIR)/docs/performance.md

.PHONY: chaos
chaos: ## Crash suite, full run (7-11 min): kills services and nats-server under load, prints every invariant
	cd services/tenaz && $(GO) run ./cmd/tenaz-chaos $(CHAOS_FLAGS)

.PHONY: chaos-short
chaos-short: ## Crash suite, short run (< 3 min; CI runs it)
	cd services/tenaz && $(GO) run ./cmd/tenaz-chaos -short $(CHAOS_FLAGS)

.PHONY: soak
soak: ## Soak for SOAK_DURATION (default 30m): RSS and goroutines of every process; fails on growth
	cd services/tenaz && $(GO) run ./cmd/tenaz-chaos -soak $(SOAK_DURATION) $(CHAOS_FLAGS)

.PHONY: release-check
release-check: ## A module outside the repo go-gets the dispatcher from a proxy made of HEAD at the release version and runs a handler
	cd tools && $(GO) run ./releasecheck

# One run over every module of the workspace: a run per module analysed
# the modules they share again each time (62 s against 24 s here).
.PHONY: lint
lint: ## gofmt, go vet and staticcheck on every module
	@test -z "$$(gofmt -l $(MODULES))" || (gofmt -l $(MODULES); echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet $(PACKAGES)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PACKAGES)

# Each go.mod's replace lines point at its local siblings, so go mod tidy
# resolves them from the checkout, not from a proxy that has no release of
# them yet; a module outside the repo never reads those lines.
.PHONY: tidy
tidy: ## go mod tidy in every module
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy); done

.PHONY: clean
clean: ## Remove ./bin and the demo's data directory
	rm -rf $(BIN) .tenaz
