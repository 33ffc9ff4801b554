# baton: the two commands a new user needs are `make demo` and `make test`.
GO ?= go
BIN := bin/baton

.PHONY: all build test vet demo clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/baton

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# The whole suite against a real redis-server, with the race detector.
test: vet
	$(GO) test -race -count=1 -timeout 8m ./...

# Build, start a throwaway redis-server, enqueue jobs, fire baton run as cron
# would, show progress and the slot table, stop Redis.
demo: build
	./scripts/demo.sh

clean:
	rm -rf bin

# Benchmarks against asynq and bare loops, one throwaway redis-server, about
# four minutes; rewrites the table in docs/benchmarks.md. BENCHFLAGS=-quick for
# a smoke check (docs untouched), BENCHFLAGS=-json for one JSON object.
.PHONY: bench
bench:
	@bash scripts/install-redis.sh
	@cd bench && $(GO) run . -docs ../docs/benchmarks.md $(BENCHFLAGS)
