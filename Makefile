# autoswitch developer entry points. Every target creates and uses the local venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-runtime
PYTEST_ARGS ?=
# The suite runs on this many pytest-xdist workers, each test file on one worker (its module-scoped
# servers and network namespaces stay in one process): most of a test's time is spent waiting for
# real processes, so two workers use the two cores that one left half idle. TEST_WORKERS=0 runs it
# in this process, as before.
TEST_WORKERS ?= 2
SEEDS ?= 2000
SEED_START ?= 0
LEASE_SCENARIOS ?= 100000
LEASE_MEMBERSHIP_SCENARIOS ?= 20000
LEASE_STORE_SCENARIOS ?= 20000
ROUNDS ?= 200
STORE_SEEDS ?= 1000

.PHONY: setup setup-run run test lint typecheck proto proto-check fuzz sim soak chaos zone-cut powerloss upgrade-test clean \
        bench-replication bench-produce bench-recovery bench-controller bench-election bench-rolling bench-backends \
        bench-scale bench-failover bench-audit bench-fetch bench-grayfailure bench-rocketmq bench-peer-rocketmq bench-smoke

# setuptools warns on every editable build (ext-modules "experimental", "editable installation"):
# nothing the user can act on, so the install steps run without Python warnings.
QUIET_PIP := PYTHONWARNINGS=ignore $(BIN)/pip

# The runtime alone (grpcio, protobuf, ...): what `make run` needs, no PySpark, Java or Chromium.
$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(QUIET_PIP) install -q --upgrade pip
	$(QUIET_PIP) install -q -e .
	touch $(RUN_STAMP)

# Everything the tests and benchmarks use: test tools and the PySpark pipeline extra.
$(STAMP): $(RUN_STAMP)
	$(QUIET_PIP) install -q -e '.[dev,pipeline,sql,zookeeper]'
	touch $(STAMP)

# Byte-compile the tree (an editable install has no .pyc files, and where PYTHONDONTWRITEBYTECODE
# is set nothing writes them): otherwise every process start compiles ~140 modules first, ~0.2 s
# of a broker's ~0.6 s start here (docs/operations.md "Process start"). Only changed files are
# compiled again, so this runs before every target that starts processes.
BYTECODE := $(BIN)/python -m compileall -q -j 0 autoswitch broker controller ha epochfile

## Runtime only (make run).
setup-run: $(RUN_STAMP)
	@$(BYTECODE)

## System packages (java, chromium, nftables, iproute2) via apt when root, then the venv.
setup: $(STAMP)
	@scripts/system_deps.sh
	@$(BYTECODE) pipeline bench tests scripts

## Start a local cluster on the embedded defaults (Ctrl-C stops it). Installs the runtime only.
run: setup-run
	$(BIN)/autoswitch playground

## The default test suite (unit, simulation seeds, real-process integration).
test: setup
	$(BIN)/python scripts/gen_proto.py --check
	$(BIN)/ruff check .
	$(BIN)/python scripts/typecheck.py
	$(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) --durations=15 $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/python scripts/typecheck.py

typecheck: setup
	$(BIN)/python scripts/typecheck.py

proto: setup
	$(BIN)/python scripts/gen_proto.py

proto-check: setup
	$(BIN)/python scripts/gen_proto.py --check

fuzz: setup
	$(BIN)/python -m tests.fuzz.run_atheris

sim: setup
	$(BIN)/python -m tests.sim.soak --seeds 1 --seed-start $${SIM_SEED:-0} --verbose

soak: setup
	$(BIN)/python -m tests.sim.soak --seeds $(SEEDS) --seed-start $(SEED_START) --lease-scenarios $(LEASE_SCENARIOS) \
		--lease-membership-scenarios $(LEASE_MEMBERSHIP_SCENARIOS) --lease-store-scenarios $(LEASE_STORE_SCENARIOS) \
		--store-seeds $(STORE_SEEDS)

chaos: setup
	$(BIN)/python -m tests.chaos.run

# a zone cut in network namespaces (root): docs/operations.md "Zones"
zone-cut: setup
	$(BIN)/python -m tests.chaos.zones

## Power cuts on LazyFS (root; builds LazyFS on first use: docs/operations-powerloss.md says from where).
powerloss: setup
	$(BIN)/python -m tests.powerloss.run --rounds $(ROUNDS)

# A rolling upgrade from the previous release (docs/releases.toml) to this tree and back under
# acked produce, then the planted incompatible change (docs/compatibility.md); last line JSON.
upgrade-test: setup
	$(BIN)/python -m tests.upgrade.run --groups $(or $(GROUPS),2)

bench-replication: setup
	$(BIN)/python -m bench.replication $(if $(TLS),--tls) $(ARGS)

bench-produce: setup
	$(if $(UNBATCHED),$(BIN)/python -m bench.unbatched $(ARGS),$(BIN)/python -m bench.produce $(if $(CONSUMER),--consumer-group --rounds 5) $(if $(METRICS),--metrics) $(if $(FLUSH_AB),--flush-ab) $(ARGS))

bench-fetch: setup
	$(BIN)/python -m bench.fetch $(ARGS)

bench-recovery: setup
	$(BIN)/python -m bench.recovery $(ARGS)

bench-controller: setup
	$(BIN)/python -m bench.controller $(if $(TLS),--tls) $(if $(METRICS),--metrics) $(ARGS)

bench-election: setup
	$(BIN)/python -m bench.election $(ARGS)

bench-scale: setup
	$(BIN)/python -m bench.scale $(ARGS)

bench-failover: setup
	$(BIN)/python -m bench.failover $(if $(TLS),--tls) $(ARGS)

bench-rolling: setup
	$(BIN)/python -m bench.rolling $(ARGS)

# Needs root and FUSE (the tests' slowfs disk); ROUNDS=N rounds with the watchdog on, then N off.
bench-grayfailure: setup
	$(BIN)/python -m bench.grayfailure $(if $(ROUNDS),--rounds $(ROUNDS)) $(ARGS)

bench-audit: setup
	$(BIN)/python -m bench.audit $(ARGS)

bench-backends: setup
	$(BIN)/python -m bench.backends $(ARGS)

# RocketMQ 5's own brokers under RocketMQ's controller and under autoswitch's, rounds of kill -9
# of the master (needs RocketMQ: ROCKETMQ_HOME or the fixture beside the checkout, and a JDK).
bench-rocketmq: setup
	$(BIN)/python -m bench.rocketmq $(ARGS)

# Acknowledged produce side by side with RocketMQ 5 (its brokers, controllers and Java producer):
# one message per request at 4 and 16 producers and batches of 100, alternating blocks, each
# system in its own network namespace when run as root (needs RocketMQ and a JDK, as above).
bench-peer-rocketmq: setup
	$(BIN)/python -m bench.peer_rocketmq $(ARGS)

# Every bench-* target above at a tiny size: a smoke that each still runs and prints its JSON line
# (not a measurement). CI runs it; one line per target, the last one JSON.
bench-smoke: setup
	$(BIN)/python -m bench.smoke

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis run-data
