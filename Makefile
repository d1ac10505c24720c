# nandi: make test runs everything (unit and integration against real
# servers, with -race); make test-unit needs no server.
GO        ?= go
PKGS      := ./...
UNIT_PKGS := $(shell $(GO) list ./... | grep -v /integration)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test test-unit test-integration bench lint fuzz

test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

test-unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

test-integration:
	$(GO) test -race -count=1 -timeout 15m ./integration/...

# Figures for the lease on a real redis-server; prints tables.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./integration/ ./partition/

lint:
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzOptionsValidate -fuzztime 30s ./partition/
