# outbox-relay: build, test and run targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN ?= bin/outbox-relay

# Build stamps, printed by `outbox-relay version`. The Dockerfile passes them explicitly
# (its build context has no .git).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)

# Benchmarks: one pass of each, about a second apiece, so `make bench` stays in minutes.
BENCHTIME ?= 1s
# BENCH_ROWS is the backlog drained by the relay's benchmarks and by `outbox-relay bench`.
BENCH_ROWS ?= 100000

.PHONY: help build check-build services services-stop rocketmq rocketmq-stop sql-recipes-deps test test-race test-short test-alerts test-chart bench bench-local bench-load bench-failover bench-rolling bench-partitions lint vet demo clean

help:
	@echo "make demo        run the order service example end to end (starts MariaDB and Redis);"
	@echo "                 DEMO_PROXY=1 runs it through RocketMQ 5.x's proxy in cluster mode"
	@echo "make test        start the servers, go vet, every test, and check the release build"
	@echo "make test-race   every test under the race detector"
	@echo "make test-short  go test -short: packages skip their slow tests"
	@echo "make test-chart  render the Helm chart, check it against the Kubernetes API types and the binary"
	@echo "make test-alerts promtool check rules and test rules of deploy/prometheus (fetches promtool)"
	@echo "make bench       the benchmarks (BENCHTIME=$(BENCHTIME))"
	@echo "make bench-local drain BENCH_ROWS rows to the in-process test broker (no RocketMQ needed)"
	@echo "make bench-load  production load: writers, relay processes, outbox-relay vs the classic local-message relay (~8 min)"
	@echo "make bench-failover  delivery gap after kill -9 and SIGTERM of the leader"
	@echo "make bench-rolling   a Kubernetes rolling update replayed with relay processes: gap, duplicates, RSS"
	@echo "make bench-partitions  a relay group sharing one table: rows/s with 1-3 relays, takeover, Redis upkeep"
	@echo "make lint        gofmt, go vet, SPDX identifiers, every Markdown link and anchor, relay functions <= 80 lines"
	@echo "make build       static binary $(BIN) (CGO_ENABLED=0, -trimpath, version stamps)"
	@echo "make release VERSION=vX.Y.Z  tag, binaries, SHA256SUMS and notes in dist/VERSION (docs/releasing.md)"
	@echo "make services    start or reuse MariaDB and Redis on 127.0.0.1"
	@echo "make rocketmq    start or reuse Apache RocketMQ (name server 127.0.0.1:19876) from Maven Central"

# build is what the Dockerfile's build stage runs, too.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/outbox-relay

# check-build runs the Dockerfile's build stage (scripts/build-release.sh) without Docker and
# checks the result: a static binary that runs and carries its version stamp.
check-build:
	@mkdir -p bin
	@VERSION='$(VERSION)' COMMIT='$(COMMIT)' DATE='$(DATE)' bash scripts/build-release.sh bin/release > bin/.check-build.out
	@grep -q '^outbox-relay $(VERSION)$$' bin/.check-build.out && grep -q '^commit: $(COMMIT)$$' bin/.check-build.out \
	  || { echo "check-build: bad version output:" >&2; cat bin/.check-build.out >&2; exit 1; }
	@if ldd bin/release/outbox-relay >/dev/null 2>&1; then echo "check-build: bin/release/outbox-relay is dynamically linked" >&2; exit 1; fi
	@echo "check-build: bin/release/outbox-relay $(VERSION) is static and runs"

# release builds a tagged release into dist/VERSION (scripts/release.sh, docs/releasing.md).
.PHONY: release spdx
release:
	@VERSION='$(VERSION)' bash scripts/release.sh

# spdx gives every source file its SPDX licence identifier (scripts/spdx.sh).
spdx:
	@bash scripts/spdx.sh

# services starts (or reuses) private MariaDB and Redis servers and writes their addresses to
# bin/services.env, which test and demo read; it never changes a server it did not start.
services:
	@bash scripts/services.sh >/dev/null

# services-stop and rocketmq-stop stop the servers only when no other checkout on the machine
# is registered as using them (scripts/users.sh); FORCE=1 stops them anyway.
services-stop:
	@bash scripts/services.sh stop $(if $(FORCE),--force)

# rocketmq starts (or reuses) a real Apache RocketMQ name server and broker (scripts/rocketmq.sh,
# jars from Maven Central, cached) and adds OUTBOX_TEST_ROCKETMQ_NAMESRV to bin/services.env;
# run it after services, which rewrites that file.
rocketmq:
	@bash scripts/rocketmq.sh start

rocketmq-stop:
	@bash scripts/rocketmq.sh stop $(if $(FORCE),--force)

# sql-recipes-deps installs the drivers docs/sql-recipes.md's Java, Python and Node programs use.
sql-recipes-deps:
	@bash examples/sql-recipes/install.sh

# WITH_SERVICES runs a command with bin/services.env in its environment.
WITH_SERVICES = set -a && . bin/services.env && set +a &&

vet:
	$(GO) vet ./...
	$(GO) -C $(CHARTTEST) vet ./...

# CHARTTEST is the Helm chart's test (deploy/helm/charttest): a Go module of its own, so that
# Helm's and Kubernetes' libraries stay out of the relay's go.mod; `./...` does not reach it.
CHARTTEST := deploy/helm/charttest

# browser-deps comes before sql-recipes-deps: it installs Node.js and npm, which the Node
# recipe needs. The tests' results go through internal/cmd/testsummary, which prints what
# go test prints and then, outside CI, every skipped test with its reason.
# scripts/listeners.sh fails the run when a test server, or anything the tests start, listens
# on a non-loopback address: once the servers are up, then every few seconds during go test.
test: services rocketmq browser-deps sql-recipes-deps vet
	bash scripts/listeners.sh
	set -o pipefail && $(WITH_SERVICES) bash scripts/listeners.sh --during $(GO) test -json -count=1 -timeout 15m ./... | $(GO) run ./internal/cmd/testsummary
	$(MAKE) --no-print-directory test-chart
	$(MAKE) --no-print-directory check-build

# test-chart renders deploy/helm/outbox-relay, decodes every manifest into the Kubernetes API
# types and checks them against the relay binary (and a running relay, with the servers).
test-chart: services rocketmq
	$(WITH_SERVICES) bash scripts/listeners.sh --during $(GO) -C $(CHARTTEST) test -count=1 -timeout 10m ./...

test-race: services rocketmq
	$(WITH_SERVICES) $(GO) test -race -count=1 -timeout 25m ./...
	$(WITH_SERVICES) $(GO) -C $(CHARTTEST) test -race -count=1 -timeout 10m ./...

# test-alerts checks the shipped Prometheus rules and runs their promtool unit tests;
# scripts/promtool.sh fetches promtool from Debian's prometheus package when it is missing.
test-alerts:
	bash scripts/promtool.sh check rules deploy/prometheus/alerts.yml
	bash scripts/promtool.sh test rules deploy/prometheus/alerts_test.yml

test-short:
	$(GO) test -short -count=1 -timeout 5m ./...

# browser-deps installs what the dashboard's browser test (internal/dashboard TestBrowser) needs
# when missing: Debian's chromium, node and npm, and `npm ci` in its test folder.
# test-browser installs them and runs that test alone.
.PHONY: browser-deps test-browser
browser-deps:
	@bash scripts/browser-test.sh install

test-browser: services
	@bash scripts/browser-test.sh

# The relay's benchmarks fill and drain whole tables, so they run once each (-benchtime=1x),
# with BENCH_ROWS rows per drain; then `outbox-relay bench`'s measure runs once against the
# in-process broker (bench-local). docs/performance.md records the figures.
bench: services
	$(WITH_SERVICES) $(GO) test -run='^$$' -bench=. -benchtime=$(BENCHTIME) -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/relay$$')
	$(WITH_SERVICES) OUTBOX_BENCH_ROWS=$(BENCH_ROWS) $(GO) test -v -run='^$$' -bench=. -benchtime=1x -count=1 -timeout 60m ./relay/
	$(MAKE) --no-print-directory bench-local

# The development benchmark tool (internal/cmd/relaybench) runs against the in-process test
# broker, which the release binary does not link; `outbox-relay bench` measures a real broker.
bench-local: services
	$(WITH_SERVICES) $(GO) run ./internal/cmd/relaybench drain --rows $(BENCH_ROWS)

# LOAD_ARGS tunes the production-load run (e.g. LOAD_ARGS='--duration 10s --polls 1s').
LOAD_ARGS ?=
bench-load: services
	$(WITH_SERVICES) $(GO) run ./internal/cmd/relaybench load $(LOAD_ARGS)

bench-failover: services
	$(WITH_SERVICES) $(GO) run ./internal/cmd/relaybench failover

# bench-rolling replays a Kubernetes rolling update with processes (docs/kubernetes.md).
bench-rolling: services
	$(WITH_SERVICES) $(GO) run ./internal/cmd/relaybench rolling $(ROLLING_ARGS)

bench-partitions: services
	$(WITH_SERVICES) $(GO) run ./internal/cmd/relaybench partitions $(PARTITIONS_ARGS)

# lint also checks every relative link and #anchor of the Markdown files
# (internal/cmd/linkcheck, GitHub's heading anchors).
lint: vet
	@bash scripts/spdx.sh --check
	@$(GO) run ./internal/cmd/linkcheck .
	@$(GO) run ./internal/cmd/funclen -max 80 -allow scripts/funclen.allow ./...
	@files=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi

# demo runs the example order service and stock consumer against the real servers, with the
# relay binary built first and run as a sidecar process (DEMO_ARGS= runs it in-process).
DEMO_ARGS ?= -relay-bin $(BIN)
# With Java the demo runs against a real Apache RocketMQ (make rocketmq), else rmqtest.
# DEMO_PROXY=1 runs the demo through Apache RocketMQ 5.x's proxy in cluster mode
# (scripts/rocketmq.sh deploy-start): the relay and the consumer are given the proxy's remoting
# address as their name server.
demo: services build
	@if [ -n "$(DEMO_PROXY)" ]; then \
	  bash scripts/rocketmq.sh start >/dev/null && bash scripts/rocketmq.sh deploy-start >/dev/null && \
	  $(WITH_SERVICES) bash scripts/rocketmq.sh deploy-admin updateTopic -b "$$OUTBOX_TEST_ROCKETMQ_PROXY_BROKER" -t orders -r 4 -w 4 >/dev/null && \
	  $(WITH_SERVICES) echo "demo: broker: Apache RocketMQ through its 5.x proxy (cluster mode) at $$OUTBOX_TEST_ROCKETMQ_PROXY" && \
	  $(WITH_SERVICES) $(GO) run ./examples/orders $(DEMO_ARGS) -nameservers "$$OUTBOX_TEST_ROCKETMQ_PROXY"; \
	elif command -v java >/dev/null 2>&1 && bash scripts/rocketmq.sh start >/dev/null; then \
	  $(WITH_SERVICES) echo "demo: broker: Apache RocketMQ, name server $$OUTBOX_TEST_ROCKETMQ_NAMESRV" && \
	  $(WITH_SERVICES) $(GO) run ./examples/orders $(DEMO_ARGS) -nameservers "$$OUTBOX_TEST_ROCKETMQ_NAMESRV"; \
	else \
	  echo "demo: broker: rmqtest, the in-process test broker (no java, or scripts/rocketmq.sh start failed)" && \
	  $(WITH_SERVICES) $(GO) run ./examples/orders $(DEMO_ARGS); \
	fi

clean:
	rm -rf bin/
