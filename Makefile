# nandi: make test runs everything against real servers: the packages'
# own tests with -race, and beside them (make -j2) the scenarios, the fault
# suite and the modules of their own; make test-unit runs with -short, which skips every
# test that needs a real server (and says so).
GO        ?= go
PKGS      := ./...
# The integration tests run one package at a time (-p 1): they time a
# group of leases on 2 cores.
NOT_INTEGRATION = $(shell $(GO) list ./... | grep -v /integration)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The suites, in the order they run; each is a target of its own.
PACKAGES := test-race test-watermill-suite
SYSTEMS  := test-fetch test-sim test-scenarios test-deploy test-pgsink test-examples test-payments test-containers

.PHONY: tidy test test-fetch test-containers test-packages test-systems test-unit test-integration test-loaded chaos model bench lint fuzz \
	$(PACKAGES) $(SYSTEMS) test-fault

# Watermill's own suite (watermillpubsub's pubsub_test.go, build tag
# !race) runs after test-packages' raced run, without -race, as the
# delivery scenarios do (test-systems, beside it, is the longer of the two):
# the package's raced test is subscriber_test.go. make test runs it at
# Watermill's short size (ForceShort); make chaos at its full size, and
# its TestReconnect (two restarts of each server) five times more.
# The fault suite (integration/chaos) runs without -race here: its workers
# are processes, which -race slows by 70%, and every line they run is
# raced by the other tests; make chaos runs it with -race. The same for
# the lease's and the delivery scenarios (./integration/...): the
# consumer, lease and transports they drive are raced by their packages'
# own tests, and make chaos runs them with -race too. The lease's
# simulation at scale (10,000 workers on fake time) runs 500 workers under
# -race and its full size without. deploy/ is its own module (it needs
# k8s.io/api to check the manifests, which nandi's users should not fetch).
# go test runs vet's high-confidence checks on every package it tests;
# make lint runs all of vet and staticcheck (a separate go vet here cost 2m40s
# of compiling without -race on a fresh machine).
# Each suite runs whatever another one did: a failure is reported (make
# names each target that failed, and the last line says so) and the rest
# still run, the fault suite included.
test: tidy
	@status=0; \
	$(MAKE) -k -j2 --output-sync=target test-packages test-systems || status=1; \
	$(MAKE) --no-print-directory test-fault || status=1; \
	[ $$status -eq 0 ] || echo "make test: FAILED: the suites above that failed are named by make's 'Error' lines; every suite ran"; \
	exit $$status

# The packages' own tests, with -race, then Watermill's suite.
test-packages:
	@status=0; for t in $(PACKAGES); do $(MAKE) --no-print-directory $$t || status=1; done; exit $$status

test-race:
	$(GO) test -race -count=1 -timeout 15m $(NOT_INTEGRATION)

test-watermill-suite:
	$(GO) test -count=1 -timeout 15m -run '^TestPubSubOver' ./watermillpubsub/

# The simulation, the scenarios against real servers and the modules of
# their own, one after another, beside test-packages (a test here must
# pass on a busy machine anyway: make test-loaded); the fault suite runs
# after both: its failovers are timed against bounds of a few seconds.
test-systems:
	@status=0; for t in $(SYSTEMS); do $(MAKE) --no-print-directory $$t || status=1; done; exit $$status

test-sim:
	$(GO) test -count=1 -timeout 15m -run TestSimulationAtScale ./partition/

test-scenarios:
	$(GO) test -count=1 -p 1 -timeout 15m ./integration/ ./integration/delivery/ ./integration/transports/

# What go mod tidy fetches for a user's module that imports the Redis,
# Kafka or NATS packages, on a fresh module cache: at most 20 zips and 40
# MB for Redis, nothing of the other transports, Watermill or Docker
# (scripts/fetch-check says the bounds and why).
test-fetch:
	scripts/fetch-check

# internal/containers, the Docker fallback of the test harnesses, in a
# module of its own (testcontainers-go stays out of nandi's module graph).
test-containers:
	cd internal/containers && $(GO) vet ./...

test-deploy:
	cd deploy && $(GO) vet ./... && $(GO) test -count=1 ./...

test-pgsink:
	cd sink/pgsink && $(GO) vet ./... && $(GO) test -race -count=1 -skip '^TestSink' ./... && $(GO) test -count=1 -run '^TestSink' ./...

test-examples:
	cd examples && $(GO) vet ./... && $(GO) test -race -count=1 ./...

test-payments:
	cd examples/payments && $(GO) vet ./... && $(GO) test -count=1 ./...

test-fault:
	$(GO) test -count=1 -timeout 15m ./integration/chaos/

# make test 3 times in a row with every core kept busy by a shell loop, as
# on a shared, noisy machine: a test that passes only on a quiet machine
# fails here. LOADED_RUNS=5 for more.
LOADED_RUNS ?= 3
test-loaded:
	scripts/under-load $(LOADED_RUNS) $(MAKE) test

test-unit:
	$(GO) test -short -race -count=1 $(PKGS)

test-integration:
	$(GO) test -race -count=1 -p 1 -timeout 15m ./integration/...

# The fault suite with 10 times the tasks of its make test version, and
# the protocol's models at their largest bounds (bitstate search).
chaos:
	$(GO) test -race -count=1 -p 1 -timeout 30m ./integration/ ./integration/delivery/
	NANDI_CHAOS_SCALE=10 $(GO) test -race -count=1 -timeout 60m -v ./integration/chaos/
	NANDI_WATERMILL_FULL=1 $(GO) test -count=1 -timeout 20m ./watermillpubsub/
	$(GO) test -count=5 -timeout 20m -run 'TestPubSubOver.*/TestReconnect' ./watermillpubsub/
	cd sink/pgsink && NANDI_CHAOS_SCALE=10 $(GO) test -race -count=1 -timeout 60m -v -run '^TestSink' ./...
	NANDI_MODEL=chaos $(GO) test -count=1 -p 1 -timeout 120m -v ./partition/model/ ./checkpoint/model/
	NANDI_LEDGER_SCALE=full $(GO) test -count=1 -timeout 30m -v -run TestLedgerAtScale ./checkpoint/

# The protocol's models (partition/model, checkpoint/model) at their
# larger bounds, exhaustively (with hash compaction), and every seeded
# bug; make test checks the small bounds, make chaos adds the lease at the
# default gap, by bitstate search. About 17 minutes here, up to 10 GB of
# memory.
model:
	NANDI_MODEL=full $(GO) test -count=1 -p 1 -timeout 60m -v ./partition/model/ ./checkpoint/model/

# Figures for the lease, the consumer and the transports on real servers,
# and the lease's simulation at scale; prints tables.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m -p 1 ./integration/... ./partition/ ./consumer/ ./presence/ ./cmd/nandi/
	$(GO) test -count=1 -run TestSimulationAtScale -v ./partition/ | grep -E 'figures|FAIL|^ok'
	cd sink/pgsink && $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./...

lint: tidy
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	cd examples && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

# Every module's go.mod and go.sum are what go mod tidy makes of them
# (make test runs this first: a go.sum missing a line fails here, saying
# so, instead of in a test's build).
MODULES := . examples examples/payments sink/pgsink deploy internal/containers
tidy:
	@for m in $(MODULES); do \
		(cd $$m && $(GO) mod tidy -diff) || { echo "go.mod or go.sum of $$m is not tidy: run go mod tidy there"; exit 1; }; \
	done

# Every fuzzer for FUZZTIME each (go test -fuzz takes one at a time).
FUZZTIME ?= 30s
FUZZERS := ./partition/:FuzzOptionsValidate ./partition/:FuzzParseGroup ./checkpoint/:FuzzParse \
	./consumer/:FuzzOptionsValidate ./consumer/:FuzzID \
	./transport/:FuzzParsePosition ./transport/redisstream/:FuzzMessage ./transport/kafkatopic/:FuzzMessage \
	./transport/natscore/:FuzzMessage ./transport/natsjs/:FuzzMessage ./transport/watermillsub/:FuzzMessage
fuzz:
	@for f in $(FUZZERS); do \
		echo "== $${f%%:*} $${f##*:}"; \
		$(GO) test -run '^$$' -fuzz "^$${f##*:}$$" -fuzztime $(FUZZTIME) "$${f%%:*}" || exit 1; \
	done
