# gracekit: `make demo` and `make test` are the two commands a newcomer needs.
GO          ?= go
PKGS        ?= ./...
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.6.1
TESTFLAGS   ?=
# bash for pipefail: make test pipes go test through testsum.
SHELL       := bash
.SHELLFLAGS := -o pipefail -c
CORES       := $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
# Test binaries at once (go test -p; its default is the core count), and
# parallel tests in each: both follow the cores. The tests mostly wait on
# ZooKeeper, so each binary runs two parallel tests a core.
PROCS       ?= $(CORES)
PARALLEL    ?= $(shell echo $$((2 * $(CORES))))
BENCHFLAGS  ?=
# vet builds what it checks with the tests' flags, so that make test
# compiles each dependency once, not once for vet and again for -race.
VETFLAGS    ?= -race
# Every go command here (and the go commands the tests run) keys its build
# cache by content, not by the checkout's path: a fresh clone reuses what
# an earlier clone compiled instead of compiling the whole module again.
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
FUZZTIME    ?= 15s
# The library's module, then the examples' and the benchmarks' own modules
# (each with a replace to the library), so users inherit none of their
# dependencies.
MODULES     ?= . examples bench

.PHONY: all zookeeper build vet lint test stress cover tidy bench demo chaos fuzz clean

all: build test

# Installs ZooKeeper (and Java), and the Curator client the tests run, from
# the distribution's packages when missing.
zookeeper:
	@scripts/install-zookeeper.sh --curator

build:
	@set -e; for m in $(MODULES); do echo "build: $$m"; (cd $$m && $(GO) build $(PKGS)); done

vet:
	@set -e; for m in $(MODULES); do echo "vet: $$m"; (cd $$m && $(GO) vet $(VETFLAGS) $(PKGS)); done

# lint also vets internal/failpoint's tagged file, which make vet's untagged
# run never sees (in make test, vetting under a tag vetted the standard
# library again).
lint: vet
	@$(GO) vet $(VETFLAGS) -tags gracekit_failpoints ./internal/failpoint/
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) run $(STATICCHECK) $(PKGS)); done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# -vet=off: make test runs make vet (every analyzer) first; go test's own
# subset would check the same files again. -ldflags=-w: no debug info in
# the test binaries (stack traces and race reports need none), about half
# of each link's CPU, and make test links some seventy binaries.
TESTARGS    = -race -count=1 -vet=off -ldflags=-w -timeout 20m -p $(PROCS) -parallel $(PARALLEL) $(TESTFLAGS)

# scripts/test.sh: the library's module in the foreground, sd's two watch
# modes' passes and the other modules beside it, their lines after its; at
# the end every failed test by name, the ten slowest and a closing count.
# vet runs while ZooKeeper installs, as the demo's build does: on a fresh
# machine each takes most of a minute.
test:
	@scripts/install-zookeeper.sh --curator & inst=$$!; \
	  $(MAKE) --no-print-directory vet || { wait $$inst; exit 1; }; \
	  wait $$inst || exit 1; \
	  GO=$(GO) TESTARGS="$(TESTARGS)" PKGS="$(PKGS)" MODULES="$(MODULES)" scripts/test.sh

# The flake hunt: runs make test (or, with STRESS_PKGS, go test of those
# packages of the library's module) STRESS_RUNS times in a row beside a CPU
# hog on one core, and lists every failure by run and test name.
STRESS_RUNS ?= 5
STRESS_PKGS ?=
stress: zookeeper
	@STRESS_RUNS=$(STRESS_RUNS) STRESS_PKGS="$(STRESS_PKGS)" TESTARGS="$(TESTARGS)" GO=$(GO) scripts/stress.sh

cover: zookeeper
	$(GO) test -race -count=1 -coverprofile=coverage.out $(PKGS)
	$(GO) tool cover -func=coverage.out | tail -1

tidy:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff); done

# Side-by-side benchmarks against go-kit; prints BENCH lines.
bench: zookeeper
	cd bench && $(GO) run . $(BENCHFLAGS)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# Runs every fuzz target for FUZZTIME each; `make test` runs their seed corpora.
# -fuzzminimizetime keeps a new input's minimization from eating the budget.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz: $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x $$pkg; \
	  done; \
	done

# The demo's programs build while ZooKeeper installs (on a fresh machine
# both take about half a minute), so that the demo stays under two minutes;
# only those four, into a temporary folder the driver runs them from
# (-bindir), so nothing is compiled or linked twice.
demo:
	@bin=$$(mktemp -d "$${TMPDIR:-/tmp}/gracekit-demo-bin.XXXXXX") || exit 1; trap 'rm -rf "$$bin"' EXIT; trap 'exit 130' INT TERM; \
	  (cd examples && $(GO) build -o "$$bin/" ./rollout ./provider ./gateway ./cachedgw) & build=$$!; \
	  scripts/install-zookeeper.sh || { kill $$build 2>/dev/null; exit 1; }; \
	  wait $$build || exit 1; \
	  "$$bin/rollout" -bindir "$$bin" $(DEMO_FLAGS)

# The fault matrix under load: a 3-member ensemble, 3 providers, 2 gateways;
# prints CHAOS lines per fault and a RESULT line (README, "make chaos").
# CHAOS_SEEDS=n runs n seeded random fault schedules instead, each history
# checked against the registry's truth (ROBUST lines); CHAOS_SEED=s replays one.
# CHAOS_MUTANTS=1 is the mutation mode: each planted bug (an edit applied with
# go build -overlay, examples/chaos/mutations.go) must be caught by the
# validator meant for it (MUTANT, RESULT lines).
chaos: zookeeper
	cd examples && $(GO) run ./chaos $(if $(CHAOS_MUTANTS),-mutants) $(if $(CHAOS_SEED),-seed $(CHAOS_SEED),$(if $(CHAOS_SEEDS),-seeds $(CHAOS_SEEDS))) $(CHAOS_FLAGS)

clean:
	rm -f coverage.out
