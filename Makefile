# gracekit: `make demo` and `make test` are the two commands a newcomer needs.
GO          ?= go
PKGS        ?= ./...
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.6.1
TESTFLAGS   ?=
# Tests that start their own ZooKeeper run in parallel (t.Parallel): most of
# their time is waits, not CPU.
PARALLEL    ?= 4
# Test binaries at once (go test -p; its default is the core count): the
# tests mostly wait on ZooKeeper, so four on two cores finish sooner.
PROCS       ?= 4
BENCHFLAGS  ?=
FUZZTIME    ?= 15s
# The library's module, then the examples' and the benchmarks' own modules
# (each with a replace to the library), so users inherit none of their
# dependencies.
MODULES     ?= . examples bench

.PHONY: all zookeeper build vet lint test cover tidy bench demo chaos fuzz clean

all: build test

# Installs ZooKeeper (and Java), and the Curator client the tests run, from
# the distribution's packages when missing.
zookeeper:
	@scripts/install-zookeeper.sh --curator

build:
	@set -e; for m in $(MODULES); do echo "build: $$m"; (cd $$m && $(GO) build $(PKGS)); done

vet:
	@set -e; for m in $(MODULES); do echo "vet: $$m"; (cd $$m && $(GO) vet $(PKGS)); done

lint: vet
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) run $(STATICCHECK) $(PKGS)); done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

TESTARGS    = -race -count=1 -timeout 20m -p $(PROCS) -parallel $(PARALLEL) $(TESTFLAGS)

# The sd suite runs in both watch modes: persistent recursive watches (the
# default) with the library's packages, and the per-node fallback
# (ZooKeeper 3.5) in a go test of its own beside the modules, its output
# after theirs.
test: zookeeper vet
	@out=$$(mktemp); rc=0; \
	  (GRACEKIT_SD_WATCH_MODE=per-node $(GO) test $(TESTARGS) ./sd/ > "$$out" 2>&1) & pernode=$$!; \
	  for m in $(MODULES); do \
	    echo "test: $$m"; (cd $$m && $(GO) test $(TESTARGS) $(PKGS)) || { rc=1; break; }; \
	  done; \
	  echo "test: sd, per-node watches"; wait $$pernode || rc=1; cat "$$out"; \
	  rm -f "$$out"; exit $$rc

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
# CHAOS_MUTANTS=1 is the mutation mode: each planted bug (a gracekit_mutant_*
# build tag) must be caught by the validator meant for it (MUTANT, RESULT lines).
chaos: zookeeper
	cd examples && $(GO) run ./chaos $(if $(CHAOS_MUTANTS),-mutants) $(if $(CHAOS_SEED),-seed $(CHAOS_SEED),$(if $(CHAOS_SEEDS),-seeds $(CHAOS_SEEDS))) $(CHAOS_FLAGS)

clean:
	rm -f coverage.out
