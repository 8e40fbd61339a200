# SPDX-License-Identifier: GPL-2.0
#
# ferry's front door. `make` builds the modules; `make test` and `make demo` set
# up everything they need on a fresh Debian machine first. See README.md.
#
# Variables:
#   KDIR=<dir>     build against this prepared Rust-enabled 7.3 tree (with the
#                  toolchain that built it, found by tools/build/kdir.sh)
#                  instead of the cached test kernel (built on first use)
#   FERRY_CACHE=   where the kernel source, its build and tools are cached
#   CLIPPY=1       lint the Rust code with clippy while building
#   V=1            verbose kbuild

SHELL := /bin/bash
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
SETUP := $(ROOT)/tools/testing/setup
TESTING := $(ROOT)/tools/testing

# The kernel tree: given, or the cached test kernel (set up and built if missing).
# A given tree is built with its own toolchain (tools/build/kdir.sh finds it and
# says what is missing); the test kernel with the one the setup installs.
ferry_kdir = $(if $(KDIR),$(KDIR),$$(bash $(SETUP)/kernel.sh))
ferry_kvars = $(if $(KDIR),bash $(ROOT)/tools/build/kdir.sh $(KDIR),\
	. $(SETUP)/common.sh && kmake_vars && echo CLIPPY_DRIVER=$$FERRY_CLIPPY_DRIVER)
ferry_setup = $(if $(KDIR),,setup)

.PHONY: all modules modules-test setup kernel ferryctl test test-debug test-self demo bench profile blktests \
	clippy fmt nl-gen nl-check clean help

all: modules ferryctl

help:
	@sed -n '3,12p' $(ROOT)/Makefile

setup:
	@bash $(SETUP)/deps.sh

kernel: setup
	@bash $(SETUP)/kernel.sh >/dev/null

# Production build: no KUnit suites.
modules: $(ferry_setup)
	@kdir=$(ferry_kdir) && kv=$$($(ferry_kvars)) && \
	$(MAKE) -C "$$kdir" M=$(ROOT) $$kv $(if $(CLIPPY),CLIPPY=1) \
		CONFIG_FERRY=m CONFIG_FERRY_BLK=m CONFIG_FERRY_SAMPLES=m modules

# Test build: the KUnit suites are compiled in and run when the module loads.
modules-test: $(ferry_setup)
	@kdir=$(ferry_kdir) && kv=$$($(ferry_kvars)) && \
	$(MAKE) -C "$$kdir" M=$(ROOT) $$kv $(if $(CLIPPY),CLIPPY=1) \
		CONFIG_FERRY=m CONFIG_FERRY_BLK=m CONFIG_FERRY_SAMPLES=m CONFIG_FERRY_KUNIT_TEST=y modules

# Format the Rust code: kernel code with the kernel's rustfmt settings.
fmt: $(ferry_setup)
	@kdir=$(ferry_kdir) && cd $(ROOT) && \
	/usr/bin/rustfmt --config-path "$$(readlink -f $$kdir/source)/.rustfmt.toml" \
		$$(git ls-files '*.rs' | grep -v '^tools/ferryctl/') && \
	cd tools/ferryctl && cargo fmt

clippy:
	@$(MAKE) --no-print-directory modules CLIPPY=1

ferryctl:
	@cd tools/ferryctl && cargo build --release --quiet

test:
	@bash $(TESTING)/run-tests.sh

# The same suite on a KASAN + lockdep + kmemleak kernel (built on first use);
# each case ends with a leak scan that fails it on any leak of ferry's.
test-debug:
	@FERRY_DEBUG=1 bash $(TESTING)/run-tests.sh

demo:
	@bash $(TESTING)/demo.sh

# The upstream blktests block group's device tests on a ferry_blk disk, from
# the blktests tree BLKTESTS=DIR (not part of `make test`; BLKTESTS_TESTS="block/042 ..."
# runs only those; BLKTESTS_TIMEOUT, 60 s by default, bounds each timed test).
blktests:
	@BLKTESTS=$(BLKTESTS) bash $(TESTING)/blktests.sh

# Not a test: ferry beside perftest, and ferry_blk beside nvme-rdma and RNBD,
# on one rxe device; ratios, figures and charts to tools/bench/out/.
bench:
	@bash $(ROOT)/tools/bench/bench.sh

# Not a test: where a 4 KiB read at QD1 spends its CPU time, ferry_blk's and
# nvme-rdma's (perf in the benchmark's VM), to tools/bench/out/profile.md.
profile:
	@BENCH_PART=profile bash $(ROOT)/tools/bench/bench.sh

# Regenerate / check the netlink code generated from Documentation/netlink/specs.
nl-gen nl-check: $(ferry_setup)
	@kdir=$(ferry_kdir) && . $(SETUP)/common.sh && \
	PYTHON=$$FERRY_VENV/bin/python3 bash $(ROOT)/tools/netlink/ynl-gen.sh \
		$$(readlink -f $$kdir/source) $(if $(filter nl-check,$@),--check)

clean:
	@kdir=$(if $(KDIR),$(KDIR),$$(. $(SETUP)/common.sh && ls -d $$FERRY_CACHE/kbuild/*/ 2>/dev/null | head -1)); \
	[ -z "$$kdir" ] || $(MAKE) -C "$$kdir" M=$(ROOT) clean
	@cd tools/ferryctl && cargo clean --quiet 2>/dev/null || true
