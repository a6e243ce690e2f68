# kperfdiff: every set-up step is idempotent and keyed on what it depends on,
# so a second `make demo` or `make test` skips straight to the work.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .build
# Debian packages the project needs on a fresh machine.
APT_PACKAGES := python3 python3-venv linux-perf gcc libc6-dev make gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
                iproute2 procps util-linux file chromium pipx \
                qemu-system-arm qemu-system-x86 openssh-server openssh-client golang-go \
                postgresql lava-common bc bison flex libelf-dev
# The LAVA lab of `make test-lab` (a server, its database and a dispatcher on this machine): large, and
# only that target needs it. PGHOST/PGPORT point lava-server's installer away from any PostgreSQL running
# here, so it creates no database of its own (the lab makes a private one).
LAB_APT_PACKAGES := lava-server lava-dispatcher postgresql
# Debian's kernel source for `make test-bisect` (a real tree to bisect: about 140 MB, only that target
# needs it); the tools a kernel build runs (bc, bison, flex, libelf-dev) are in APT_PACKAGES.
KBUILD_APT_PACKAGES := linux-source-6.1
# Where make test-bisect keeps the unpacked, committed tree and its build outputs between runs (the
# second run's builds are incremental).
KERNEL_TREE_CACHE ?= /tmp/kperfdiff-kernel-tree
# Rust comes from rustup when it is there, otherwise from Debian's current toolchain.
RUST_APT_PACKAGES := rustc-web cargo-web
export PATH := $(if $(wildcard $(HOME)/.cargo/bin/cargo),$(HOME)/.cargo/bin:)$(PATH)
PY_REQUIREMENTS := requirements-dev.txt
# installed without their declared dependencies (see the file: apache-otava for `kperfdiff changes`)
PY_NODEPS := requirements-nodeps.txt
NATIVE_SOURCES := $(shell find native/src -name '*.rs' 2>/dev/null) native/Cargo.toml $(wildcard native/Cargo.lock)
PY_SOURCES := $(shell find src -name '*.py' 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: setup demo studies test test-native test-python test-slow test-lab test-bisect test-sentinel bench-harness dist clean

setup: $(STAMPS)/apt $(STAMPS)/venv $(STAMPS)/native $(STAMPS)/tools $(STAMPS)/bytecode

$(STAMPS)/apt: Makefile
	@mkdir -p $(STAMPS)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	command -v cargo >/dev/null || missing="$$missing $(RUST_APT_PACKAGES)"; \
	if [ -n "$$(echo $$missing)" ]; then \
	  [ "$$(id -u)" = 0 ] || { echo "set-up installs Debian packages ($$missing) with apt-get: run make as root" >&2; exit 1; }; \
	  echo "installing Debian packages:" $$missing; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@command -v cargo >/dev/null || { echo "cargo is still missing after installing $(RUST_APT_PACKAGES)" >&2; exit 1; }
	@touch $@

$(STAMPS)/venv: $(PY_REQUIREMENTS) $(PY_NODEPS) $(STAMPS)/apt
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --disable-pip-version-check -r $(PY_REQUIREMENTS)
	@$(BIN)/pip install -q --disable-pip-version-check --no-deps -r $(PY_NODEPS)
	@touch $@

$(STAMPS)/native: $(STAMPS)/venv $(NATIVE_SOURCES) pyproject.toml
	@echo "building kperfdiff (native core, release)"
	@VIRTUAL_ENV=$(CURDIR)/$(VENV) $(BIN)/maturin develop --release -q 2>&1 | grep -v '^\s*$$' | tail -3
	@$(BIN)/python -c "import kperfdiff.native" || { echo "the native module did not build" >&2; exit 1; }
	@touch $@

# Bytecode compiled once, as an installed package has it: the CLI then starts without compiling
# its modules, even where PYTHONDONTWRITEBYTECODE is set (kperfdiff --help in ~0.04 s here).
$(STAMPS)/bytecode: $(STAMPS)/venv $(PY_SOURCES)
	@$(BIN)/python -m compileall -q src/kperfdiff >/dev/null
	@touch $@

# Tools the tests run on kperfdiff's output: inferno's flame graph and diff-folded (from crates.io),
# installed into .tools/bin (the tests look there and on PATH). go tool pprof comes with golang-go.
# Only its command-line tools, built at opt-level 1 (the tests give them small inputs): 18 s here
# against 28 s for a default install.
INFERNO_VERSION := 0.12.8
$(STAMPS)/tools: $(STAMPS)/apt
	@[ -x .tools/bin/inferno-flamegraph ] || CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=false \
	  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo install -q --locked --root $(CURDIR)/.tools \
	  --no-default-features --features cli inferno@$(INFERNO_VERSION)
	@touch $@

# The superpages study on this machine: huge pages off vs on for gups, anonymous
# faults and fork at 1 and 2 cores, with profiles; prints the comparison table,
# the kperfdiff table of the benchmark that moved most and the report's path.
DEMO_STORE ?= demo-out/kperfdiff.db
demo: setup
	@mkdir -p demo-out
	$(BIN)/kperfdiff --store $(DEMO_STORE) run examples/superpages.toml --report demo-out/superpages.html
	@echo; echo "next, ready to paste:"; K="$(BIN)/kperfdiff --store $(DEMO_STORE)"; \
	echo "  $$K runs"; \
	echo "  $$K show superpages/huge"; \
	echo "  $$K compare --experiment superpages --format markdown"; \
	echo "  $$K diff superpages/4k:fault.anon.4k superpages/huge:fault.anon.huge --children --top 10"; \
	echo "  $$K report --experiment superpages --format markdown -o demo-out/superpages.md"

# The five studies kperfdiff comes from, one experiment file each (examples/studies/), run
# locally and in emulated arm64/x86_64 guests; resumable (run it again after Ctrl-C or a failure);
# writes one HTML report with a section per study. About 15 minutes here (see docs/studies.md).
STUDIES_STORE ?= studies-out/kperfdiff.db
studies: setup
	@mkdir -p studies-out
	$(BIN)/kperfdiff --store $(STUDIES_STORE) studies run --keep-going examples/studies/*.toml -o studies-out/studies.html

test: setup test-native test-python

# The Rust tests need the real HOME (rustup's toolchains live there).
test-native: setup
	cargo test --profile testing -q --manifest-path native/Cargo.toml -- --show-output

# The Python tests must not depend on HOME: .ci/run runs them with an empty one. They run in parallel
# workers (pytest-xdist, one per CPU up to 4); tests that change the machine's own state (sysctls,
# cgroups; marked machine_state) hold one lock file, so they run one at a time whichever worker has
# them (tests/conftest.py). The 20 slowest are printed at the end, so every run shows where the time goes.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
test-python: setup
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) --durations=20 $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -q -m "slow and not lab and not bisect and not sentinel" $(PYTEST_ARGS)

# Bisection over a real kernel: Debian's linux-source-6.1 as a git repository with 16 synthetic commits,
# one of which slows fork (tests/support/kernel_tree.py), built for the x86_64 guest at each probe.
test-bisect: setup $(STAMPS)/kbuild-apt
	KPERFDIFF_KERNEL_TREE=$(KERNEL_TREE_CACHE) $(BIN)/python -m pytest -q -s -m bisect $(PYTEST_ARGS)

# The sentinel over a real kernel: Debian's linux-source-6.1 with a start commit and 12 commits pushed one
# by one (tests/support/kernel_tree.py:sentinel_tree), `kperfdiff watch` after each push, every commit built
# for the x86_64 guest and counted exactly in a deterministic one (tests/watch/test_sentinel_kernel.py).
test-sentinel: setup $(STAMPS)/kbuild-apt
	KPERFDIFF_KERNEL_TREE=$(KERNEL_TREE_CACHE) $(BIN)/python -m pytest -q -s -m sentinel $(PYTEST_ARGS)

$(STAMPS)/kbuild-apt: Makefile
	$(call apt-install,$(KBUILD_APT_PACKAGES),test-bisect or test-sentinel)

# A LAVA server, scheduler and dispatcher on this machine (tests/support/lava_lab.py) run a two-variant experiment
# end to end through LAVA's REST API on two qemu devices, a bisection and a watch (about 35 minutes here; the
# first run installs Debian's lava-server and lava-dispatcher, about a minute).
test-lab: setup $(STAMPS)/lab-apt
	$(BIN)/python -m pytest -q -s -m lab tests/targets/test_lava_lab.py $(PYTEST_ARGS)

# $(call apt-install,PACKAGES,TARGET,ENV): install those of PACKAGES that are missing with apt-get (as root),
# for `make TARGET`, with the extra environment ENV
define apt-install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$(echo $$missing)" ]; then \
	  [ "$$(id -u)" = 0 ] || { echo "make $(2) installs Debian packages ($$missing) with apt-get: run it as root" >&2; exit 1; }; \
	  echo "installing Debian packages for make $(2):" $$missing; \
	  export DEBIAN_FRONTEND=noninteractive $(3); \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@mkdir -p $(dir $@) && touch $@
endef

$(STAMPS)/lab-apt: Makefile
	$(call apt-install,$(LAB_APT_PACKAGES),test-lab,PGHOST=/nonexistent PGPORT=1)

bench-harness: setup
	$(BIN)/python validation/bench_stability.py

# The source distribution and a wheel built from it (as pip and pipx build one), into dist/:
# `pip install dist/kperfdiff-*.whl` or `pipx install dist/kperfdiff-*.whl` on this machine,
# `pip install dist/kperfdiff-*.tar.gz` wherever there is a Rust toolchain.
dist: $(STAMPS)/venv
	rm -rf dist
	$(BIN)/python -m build -o dist

clean:
	rm -rf $(STAMPS) native/target dist
