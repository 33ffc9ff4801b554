# baton: the two commands a new user needs are `make demo` and `make test`.
GO ?= go
BIN := bin/baton
# The version baton version prints: the nearest tag, or the commit, and
# -dirty for uncommitted changes. make release VERSION=v0.2.0 to set it.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
PREFIX ?= /usr/local

.PHONY: all build test vet demo chaos clean release install

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/baton

# Static binaries for linux/amd64 and linux/arm64 in dist/, with SHA256SUMS.
release:
	rm -rf dist && mkdir -p dist
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
			-o dist/baton-$(VERSION)-linux-$$arch ./cmd/baton || exit 1; \
	done
	cd dist && sha256sum baton-* > SHA256SUMS
	@cat dist/SHA256SUMS

# Installs bin/baton as $(DESTDIR)$(PREFIX)/bin/baton (/usr/local/bin/baton,
# the path the crontab examples use).
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/baton

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# The whole suite against a real redis-server, with the race detector.
test: vet
	$(GO) test -race -count=1 -timeout 12m ./...

# Build, start a throwaway redis-server, enqueue jobs, fire baton run as cron
# would, show progress and the slot table, stop Redis.
demo: build
	./scripts/demo.sh

# The full chaos run: 20,000 jobs, kill -9s, SIGTERMs and a Redis restart,
# 10 runs in a row (a short form runs in make test). CHAOS_ARGS adds flags,
# e.g. CHAOS_ARGS=-chaos.spawn=4.
chaos:
	bash scripts/install-redis.sh
	$(GO) test -count=1 -timeout 90m -run TestChaos -v ./internal/chaos -args -chaos.jobs=20000 -chaos.runs=10 $(CHAOS_ARGS)

clean:
	rm -rf bin dist

# Benchmarks against asynq and bare loops, one throwaway redis-server, about
# four minutes; rewrites the table in docs/benchmarks.md. BENCHFLAGS=-quick for
# a smoke check (docs untouched), BENCHFLAGS=-json for one JSON object.
.PHONY: bench
bench:
	@bash scripts/install-redis.sh
	@cd bench && $(GO) run . -docs ../docs/benchmarks.md $(BENCHFLAGS)
