# dlq — build, run, test and benchmark.
#
#   make run      start RabbitMQ + PostgreSQL if needed, build, migrate, serve
#   make test     vet, the fast suite, then the fault suite (which restarts shared servers)
#   make test-cluster   many instances, a RabbitMQ cluster, a PostgreSQL failover (slow)
#
# Every variable below can be overridden on the command line or from the environment.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO ?= go
FUZZTIME ?= 30s
# What `dlq version` prints: the release from the file VERSION (its one place;
# CHANGELOG.md has a section per release), and the commit it was built from.
VERSION ?= $(shell cat VERSION)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
ARGS ?=

# Every package of the module, except scratch under tmp/ (ignored by git, but `./...`
# would still build and test it). -e lists broken packages too, so go vet/test report
# them instead of skipping them silently. Recursive (=), so it runs only when used.
PKGS ?= $(shell $(GO) list -e ./... | grep -v -e '/tmp/' -e '/tmp$$')

# The packages whose tests take a minute or more, longest first: go test starts
# packages in the order given, two at a time (-p 2), so these start at once and the
# small ones fill the gaps, instead of the longest starting last and running alone
# (when this order was chosen, on a slower host: main suite 676 s in alphabetical order,
# 621 s in this one, on one warm cache; the figures below are today's).
SLOW_PKGS = $(addprefix $(MODULE)/,store console api replay test/ingest cron consumer)
TEST_PKGS = $(filter $(PKGS),$(SLOW_PKGS)) $(filter-out $(SLOW_PKGS),$(PKGS))
# The module path, from go.mod.
MODULE = $(shell $(GO) list -m)

# The packages with files behind a build tag of the other suites: the second vet of
# make test checks only these (the first has checked every package without tags; vetting
# all of them again with the tags type-checks each a second time, ~20 s from a fresh clone).
TAGGED_PKGS ?= $(shell grep -rlE --include='*.go' '^//go:build.*(faults|soak|cluster|tls)' . | grep -v '^./tmp/' | xargs -rn1 dirname | sort -u)

# The packages with fault tests (a _test.go file built with the tag faults, not
# !faults): the fault pass builds and links only their test binaries, one at a time.
FAULT_PKGS ?= $(shell grep -rlE --include='*_test.go' '^//go:build.*[^!]faults' . | grep -v '^./tmp/' | xargs -rn1 dirname | sort -u)

# Tests connect to the shared local servers; each test makes its own queues/schemas.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
DLQ_TEST_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/
export TEST_DATABASE_URL DLQ_TEST_AMQP_URL
# A binary built with -race sleeps a second before it exits (the race detector's
# atexit_sleep_ms, for goroutines still running then to report): a second for each of
# the ~50 test binaries of make test, run two at a time. A race during a test is
# reported, and fails that test, when it happens; only one in a goroutine still running
# after the last test could go unseen, and the tests stop theirs before they end.
GORACE ?= atexit_sleep_ms=0
export GORACE

# `make run` talks to the local database `dlq` (services.sh creates it) unless told otherwise.
# Only `run` gets it: tests of the configuration defaults must see it unset.
run: export DLQ_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/dlq?sslmode=disable

# bench-limits: the raw limits of this machine (no dlq code), from the shared folder.
BENCH_LIMITS_DIR ?= ../shared/bench-limits
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/bench?sslmode=disable
BENCH_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/
BENCH_LIMITS_ARGS ?= -tests pipeline,replay,naive -runs 3 -n 200000 -nnaive 20000 -batch 500 -flush 50ms -prefetch 1000 -pipeq quorum
# Its folder is read-only, so its result files go here (tmp/ is ignored by git).
BENCH_LIMITS_OUT ?= $(CURDIR)/tmp/bench-limits

.PHONY: release build services run test test-cluster test-tls fuzz soak clean screenshot \
	bench-ingest bench-replay bench-api bench-cleanup bench-console bench-limits bench-search-cost bench-session bench-replay-rounds bench-ingest-rounds bench-ingest-profile \
	bench-instances bench-upgrade bench-wal

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/dlq ./cmd/dlq

# A release in dist/: the binaries for linux/amd64 and linux/arm64 and the container
# image as an OCI image archive (written without a container engine by cmd/dlq-release;
# `docker load -i` or `skopeo copy oci-archive:…` takes it), stamped with VERSION and
# the commit, with SHA256SUMS. The archive is reproducible: the same commit gives the
# same digest. It refuses a VERSION without its section in CHANGELOG.md, and (unless
# ALLOW_DIRTY=1, for a trial build) uncommitted changes, entries left under [Unreleased]
# and a tag v$(VERSION) on another commit (docs/UPGRADING.md, "Cutting a release").
# Where a Docker engine answers, the image is loaded too, as dlq:VERSION. docs/UPGRADING.md says how to roll a release out.
RELEASE_ARCHS ?= amd64 arm64
RELEASE_CA ?= /etc/ssl/certs/ca-certificates.crt
release:
	@grep -q '^## \[$(VERSION)\]' CHANGELOG.md || { echo "release: CHANGELOG.md has no section '## [$(VERSION)]': write the release notes first" >&2; exit 1; }
	@if [ -z "$(ALLOW_DIRTY)" ] && ! git diff --quiet HEAD; then echo "release: the tree has uncommitted changes: commit them (or ALLOW_DIRTY=1 for a trial build)" >&2; exit 1; fi
	@if [ -z "$(ALLOW_DIRTY)" ] && sed -n '/^## \[Unreleased\]/,/^## \[/p' CHANGELOG.md | grep -q '^- '; then echo "release: CHANGELOG.md still has entries under [Unreleased]: move them under '## [$(VERSION)]' (docs/UPGRADING.md, 'Cutting a release'), or ALLOW_DIRTY=1 for a trial build" >&2; exit 1; fi
	@tagged=$$(git rev-parse -q --verify 'refs/tags/v$(VERSION)^{commit}' || true); \
	if [ -z "$(ALLOW_DIRTY)" ] && [ -n "$$tagged" ] && [ "$$tagged" != "$$(git rev-parse HEAD)" ]; then echo "release: $(VERSION) was released from $${tagged:0:12} (tag v$(VERSION)), not this commit: write the next version into VERSION (docs/UPGRADING.md, 'Cutting a release'), or ALLOW_DIRTY=1 for a trial build" >&2; exit 1; fi
	rm -rf dist && mkdir -p dist
	for arch in $(RELEASE_ARCHS); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -tags timetzdata \
			-ldflags '-s -w $(LDFLAGS)' -o dist/dlq-$(VERSION)-linux-$$arch ./cmd/dlq; \
	done
	$(GO) run ./cmd/dlq-release -version '$(VERSION)' -revision '$(COMMIT)' -created "$$(git log -1 --format=%ct)" \
		$$([ -r '$(RELEASE_CA)' ] && echo -ca '$(RELEASE_CA)') -o dist/dlq-$(VERSION)-oci.tar \
		$(foreach a,$(RELEASE_ARCHS),$(a)=dist/dlq-$(VERSION)-linux-$(a)) > dist/IMAGE_DIGEST
	cd dist && sha256sum dlq-* > SHA256SUMS
	@if docker info >/dev/null 2>&1; then docker load -i dist/dlq-$(VERSION)-oci.tar; fi
	@echo "release $(VERSION) ($(COMMIT)) in dist/: image index $$(cat dist/IMAGE_DIGEST)"; ls -l dist

# Idempotent: starts (or installs) only what does not answer. See scripts/services.sh.
services:
	scripts/services.sh

# serve migrates too; migrating first makes a migration error visible on its own.
run: services build
	bin/dlq migrate
	bin/dlq serve

# The fault tests (//go:build faults) stop and restart the shared RabbitMQ/PostgreSQL,
# so they run alone (-p 1) after everything else has finished.
# The fast suite runs four parallel tests a package (-parallel 4; go test's default is
# GOMAXPROCS, two here): many tests wait on PostgreSQL's statistics, a poll interval or
# a browser, and at two the cores stood idle. On one warm cache on 2026-11-30: 454 s
# at -parallel 2, 376 s at 4 with the cores 91% busy. The whole of `make test` from a
# fresh clone (services, build, vet, both suites): 561 s on 2026-11-30 at 63a3682.
# The process-level tests run the binary built here (DLQ_TEST_DLQ_BIN), so
# every package tests the same build and dlq is built once, not once per
# package (without it test/ingest builds its own, and passes either way).
test: services build
	$(GO) vet $(PKGS)
	$(GO) vet -tags 'faults soak cluster tls' $(TAGGED_PKGS)
	DLQ_TEST_DLQ_BIN=$(CURDIR)/bin/dlq $(GO) test -race -count=1 -timeout 15m -p 2 -parallel 4 $(TEST_PKGS)
	DLQ_TEST_DLQ_BIN=$(CURDIR)/bin/dlq $(GO) test -race -count=1 -tags faults -run 'Fault' -p 1 -timeout 20m $(FAULT_PKGS)

# The cluster tests (build tag cluster, test/cluster): three dlq instances on one
# database and queue, two of them killed with -9 during 50,000 dead letters, then a
# replay handed from instance to instance; a three-node RabbitMQ cluster that loses
# the node of dlq's queue leader during ingest and the target's node during a replay
# (every message arrives; what arrived twice printed as MEASURED), then restarts each
# node in turn during another replay (a rolling broker upgrade);
# a PostgreSQL primary whose streaming standby is promoted during ingest and a replay
# (synchronous replication: nothing lost; asynchronous: the loss measured and printed
# as MEASURED); the rolling upgrade from fdd4749 (built from git history into tmp/earlier/)
# to this version while dead letters keep arriving, and back. Lost, duplicated and
# unexpected are counted and asserted zero. They
# start and stop extra servers of their own (RabbitMQ nodes on free ports, PostgreSQL
# clusters made with initdb as the postgres user, so run them as root) and never touch
# the shared ones; 5 to 10 minutes on 2 cores, depending on the machine's load.
test-cluster: services build
	$(GO) vet -tags cluster ./test/cluster/
	DLQ_TEST_DLQ_BIN=$(CURDIR)/bin/dlq $(GO) test -race -count=1 -tags cluster -p 1 -timeout 45m -v ./test/cluster/

# One `go test -fuzz` per Fuzz target (the fuzzer takes one target in one package at a time).
fuzz:
	@targets=$$($(GO) test -list '^Fuzz' $(PKGS) | \
		awk '/^Fuzz/ { names = names " " $$1; next } /^ok / { if (names != "") print $$2 names; names = "" }'); \
	if [ -z "$$targets" ]; then echo "fuzz: no Fuzz targets found"; exit 0; fi; \
	while read -r pkg names; do \
		for name in $$names; do \
			echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$${name}\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
		done; \
	done <<< "$$targets"

# The README's screenshot of the web console, taken by a browser test (headless Chromium).
screenshot: services
	DLQ_TEST_SCREENSHOT=$(CURDIR)/docs/console.png $(GO) test -count=1 -run '^TestScreenshot$$' ./console/

soak: services
	$(GO) test -tags soak -run Soak -timeout 60m $(PKGS)

# dlq's own benchmarks; pass options with ARGS='...' (e.g. make bench-ingest
# ARGS='-dead-letter ttl'). They run in their own database, `bench`
# (BENCH_DATABASE_URL), never in the test database: each run creates a schema there,
# and a benchmark must not compete with, or be disturbed by, a test suite.
bench-ingest bench-replay bench-api bench-cleanup bench-console:
	scripts/services.sh --database bench
	env -u TEST_DATABASE_URL BENCH_DATABASE_URL='$(BENCH_DATABASE_URL)' DLQ_AMQP_URL='$(BENCH_AMQP_URL)' \
		$(GO) run ./cmd/dlq-bench $(@:bench-%=%) $(ARGS)

# What the search indexes cost ingest: interleaved dlq-bench ingest pairs with
# and without them. ARGS: [pairs] [messages per run] [dlq-bench ingest flags].
bench-search-cost:
	scripts/services.sh --database bench
	env -u TEST_DATABASE_URL BENCH_DATABASE_URL='$(BENCH_DATABASE_URL)' DLQ_AMQP_URL='$(BENCH_AMQP_URL)' \
		scripts/bench-search-cost.sh $(ARGS)

# A whole benchmark session as docs/BENCHMARKS.md records it (about 25 minutes):
# raw limits interleaved with dlq's ingest and replay runs, and the search cost.
bench-session: services
	scripts/bench-session.sh

# Replay against its raw limit in interleaved rounds (ROUNDS, default 5): for each
# queue type of QTYPES (default 'quorum classic') the raw replay, then dlq's replay
# in each mode of MODES (default 'seeded e2e': stored rows, and dlq serve ingesting
# then replaying on a control-queue command); N messages (default 100000); an
# optional A/B against the build of another revision (BASELINE=<git revision>).
bench-replay-rounds: services
	ROUNDS='$(ROUNDS)' N='$(N)' QTYPES='$(QTYPES)' MODES='$(MODES)' BASELINE='$(BASELINE)' scripts/bench-replay-rounds.sh

# Ingest against the raw COPY pipeline in ROUNDS rounds (default 3) of N dead
# letters (default 100000), msgs/s and CPU µs per message; SETTINGS any of
# 'text notext encrypted limits' (default text: text search on; limits: the raw
# pipeline's own dead letters, the same bytes on both sides). With BASELINE (a git
# revision) an A/B in the same rounds that FAILS (exit 1) when HEAD's median
# ratio to raw drops more than THRESHOLD percent (default 10) below the
# baseline's: run it before merging a change to consumer/, store/ingest*,
# broker/ or a migration touching dead_messages (docs/BENCHMARKS.md). MODE=process
# runs `dlq serve` itself instead of the consumer in the benchmark's process (with
# BASELINE, the baseline's dlq on this tree's schema), as a user runs it.
#   make bench-ingest-rounds BASELINE=$(git merge-base main HEAD) SETTINGS='limits text notext encrypted'
bench-ingest-rounds: services
	ROUNDS='$(ROUNDS)' N='$(N)' SETTINGS='$(SETTINGS)' THRESHOLD='$(THRESHOLD)' BASELINE='$(BASELINE)' MODE='$(MODE)' \
		scripts/bench-ingest-rounds.sh

# Where each microsecond of an ingest drain goes: RUNS drains (default 3) of N
# dead letters (default 100000) with CPU and allocation profiles, and a table
# per stage (scripts/bench-profile-stages.py). ARGS: dlq-bench ingest flags,
# e.g. ARGS='-text-search=false' or ARGS='-encrypt on'.
bench-ingest-profile: services
	N='$(N)' RUNS='$(RUNS)' scripts/bench-ingest-profile.sh $(ARGS)

# The WAL of one drain of N dead letters (default 1000000) by relation and kind of
# record, full-page images apart, on a PostgreSQL server of its own
# (scripts/bench-wal.sh; root). REV=<git revision> measures another build.
bench-wal: services
	N='$(N)' REV='$(REV)' scripts/bench-wal.sh

# Ingest and replay with 1, 2 and 3 `dlq serve` instances, next to the raw limits
# measured in the same session (bench-limits pipeline and replay), in ROUNDS rounds
# (default 2, about 5 minutes each); N dead letters per run (default 100000);
# INSTANCES the instance counts in their order (default 1,2,3).
bench-instances: services
	ROUNDS='$(ROUNDS)' N='$(N)' INSTANCES='$(INSTANCES)' scripts/bench-instances.sh

# The rolling upgrade of test/cluster's TestUpgradeFromEarlierVersion as a benchmark: the
# earlier version (fdd4749, built from git history) stores N dead letters (default
# 1000000) with INSTANCES instances (default 3), which this version then replaces one by
# one while dead letters keep arriving at RATE per second (default 1000). It prints, as
# MEASURED lines, the time of each migration, the longest time without a committed dead
# letter, the roll's and the backfill's durations; docs/UPGRADING.md and
# docs/BENCHMARKS.md record them. In a schema of the bench database (BENCH_DATABASE_URL);
# over an hour on 2 cores, most of it the fill. BACKFILL_WATCH=10m watches the backfill for
# that long and reports its rate instead of waiting for the whole pass (hours at N=10000000).
bench-upgrade: services build
	scripts/services.sh --database bench
	DLQ_TEST_DLQ_BIN=$(CURDIR)/bin/dlq DLQ_TEST_UPGRADE_DATABASE_URL='$(BENCH_DATABASE_URL)' \
		DLQ_TEST_UPGRADE_FILL='$(or $(N),1000000)' DLQ_TEST_UPGRADE_INSTANCES='$(or $(INSTANCES),3)' \
		DLQ_TEST_UPGRADE_RATE='$(or $(RATE),1000)' DLQ_TEST_UPGRADE_BACKFILL_WATCH='$(BACKFILL_WATCH)' \
		$(GO) test -count=1 -tags cluster -run '^TestUpgradeFromEarlierVersion$$' -timeout 180m -v ./test/cluster/

bench-limits:
	scripts/services.sh --database bench
	mkdir -p '$(BENCH_LIMITS_OUT)'
	cd '$(BENCH_LIMITS_DIR)' && $(GO) run . -pg '$(BENCH_DATABASE_URL)' -amqp '$(BENCH_AMQP_URL)' \
		$(BENCH_LIMITS_ARGS) \
		-out '$(BENCH_LIMITS_OUT)/results.jsonl' -summary '$(BENCH_LIMITS_OUT)/summary.md' \
		-explain '$(BENCH_LIMITS_OUT)/explain.txt' $(ARGS)

clean:
	rm -rf bin/ dist/ '$(BENCH_LIMITS_OUT)'
	rm -f coverage*.out *.test

# TLS against a RabbitMQ node and a PostgreSQL cluster the tests start on their own ports
# (5691/5692/25691, 5491) and remove at the end; as root, alone (about a minute).
test-tls: build
	DLQ_TEST_DLQ_BIN=$(CURDIR)/bin/dlq $(GO) test -count=1 -tags tls -timeout 10m ./test/tls/
