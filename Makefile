# mrp-repro: the two commands are `make reproduce` and `make test`.
#   make reproduce                   # PROFILE=chain16 (the issue-34 stand-in, block 16); CPU, 2 cores
#   make reproduce PROFILE=tiny      # the earlier stand-in (block 8), kept for its committed figures and fast tests
#   make test PYTEST_ARGS="-x"           # the suite less the slow tests, on 2 workers (<= 12 min on 2 cores)
#   make test-portable                   # numerics-sensitive tests under each CPU capability emulated here
#   make test-slow                       # the slow tests (CI runs them once, after test-portable)
#   make test-random SEED=1234           # the suite in a random order (pytest-randomly; the seed is printed)
#   make reproduce NPROC=1           # everything in the notebooks, one process (default auto: a torchrun rank per
#                                    # CPU core for the heavy stages; 1 on a GPU or with FROM_SCRATCH)
#   make reproduce FROM_SCRATCH=1        # retrain the published backbone and head (artifacts/<profile>/) and compare
# Profiles: configs/<name>.yaml (smoke, tiny, chain16, sdar-mini, sdar-1.7b, sdar-4b, sdar-8b).
#   make reproduce PROFILE=sdar-mini  # the SDAR path on CPU: a generated toy SDAR checkpoint + released-format head
#                                     # (python -m mrp_repro.sdar_mini --out DIR writes them; the first stage does it)

PYTHON ?= python3
PROFILE ?= chain16
NPROC ?= auto
FROM_SCRATCH ?=
PYTEST_ARGS ?=
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
KERNEL := mrp-repro

.DEFAULT_GOAL := help
.PHONY: help setup test test-portable test-slow test-random reproduce ablations variance lab clean distclean gpu-check

help:
	@echo "make setup       create $(VENV), install pinned deps, register Jupyter kernel '$(KERNEL)'"
	@echo "make test        setup, then pytest less the slow tests on TEST_WORKERS=2 workers (PYTEST_ARGS=... passes through)"
	@echo "make test-portable  the numerics-sensitive tests under each emulated CPU capability ($(PORTABLE_CAPS))"
	@echo "make test-slow   the tests marked slow (CI runs them once)"
	@echo "make test-random the suite in a random order; SEED=N repeats one (the seed is printed at the top)"
	@echo "make reproduce   setup, then run every notebook on PROFILE=$(PROFILE) (runs/$(PROFILE)/, figures/$(PROFILE)/)"
	@echo "                 NPROC=N runs the heavy stages first on N torchrun ranks (1: in the notebooks; default auto:"
	@echo "                 a rank per CPU core, at most 8, on a CPU; 1 on a GPU or with FROM_SCRATCH)"
	@echo "                 evaluates the published artifacts/PROFILE/ where there are some (chain16, tiny); FROM_SCRATCH=1"
	@echo "                 retrains them instead (runs/from-scratch/; 22 min measured on tiny) and compares (docs/published.md)"
	@echo "make gpu-check   the GPU check with the machine's CUDA torch, no install (kernels vs reference, verify at SDAR-4B"
	@echo "                 shapes, engine; ~7-9 min) into GPU_CHECK_OUT=figures/gpu_check/"
	@echo "make ablations   setup, then the head ablations on PROFILE (opt-in: 12 heads on tiny, ~85 min measured on 2 shared"
	@echo "                 cores; resumable) and notebook 10: figures/$(PROFILE)/ablation_*"
	@echo "make variance    setup, then head and backbone seeds 0 1 2 on PROFILE (seed 0: the published run; opt-in: ~46 min"
	@echo "                 measured on tiny, most of it 2 backbones; resumable): figures/$(PROFILE)/variance*"
	@echo "make lab         setup, then JupyterLab on notebooks/"
	@echo "make clean       remove runs/ and caches (keeps $(VENV)); distclean also removes $(VENV)"

setup: $(STAMP)

# The venv itself: created once, with a Python >= 3.11.
$(VPY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "error: $(PYTHON) is older than 3.11; run e.g. make setup PYTHON=python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Install is re-run only when pyproject.toml changes (the stamp is newer otherwise).
$(STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install -e ".[dev]"
	$(VPY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "mrp-repro (.venv)"
	@touch $@

# Two pytest workers (pytest-xdist), a test file each at a time (--dist loadfile: a file's module fixtures, such as
# the smoke notebooks' run directory, are built once): the suite ran on one core of two (15-19 min; 9 min 23 s on 2).
TEST_WORKERS ?= 2
test: setup
	$(VPY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-slow: setup
	$(VPY) -m pytest -q -m slow $(PYTEST_ARGS)

SEED ?=
# -q hides pytest-randomly's header, so the seed is drawn here and printed before the run
test-random: setup
	@seed=$(if $(SEED),$(SEED),$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')); echo "test-random: --randomly-seed=$$seed"; \
	  $(VPY) -m pytest -q -p randomly --randomly-seed=$$seed $(PYTEST_ARGS)

# The numerics-sensitive tests (bf16/fp32 losslessness, upstream equality, kernels, determinism, adjacent KL,
# published-artifact regeneration on smoke) under each CPU capability this machine can emulate: ATen's kernels
# (ATEN_CPU_CAPABILITY), MKL's code path and oneDNN's ISA held to AVX2. `make test` is the native run. What cannot be
# emulated (arm64, AMX, a GPU): docs/portability.md. Left out (-k): Triton's import, dispatch and benchmark plumbing,
# and its split-count tests (the Triton interpreter computes in numpy, not in ATen's kernels).
PORTABLE_TESTS := tests/test_lossless_bf16.py tests/test_mrp_tree.py tests/test_upstream.py tests/test_kernels.py tests/test_determinism.py \
  tests/test_adjacent.py tests/test_published.py
PORTABLE_K := not import_without_triton and not bench and not dispatch and not split
PORTABLE_CAPS ?= avx2 default
CAP_avx2 := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
CAP_default := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
test-portable: setup
	@$(foreach c,$(PORTABLE_CAPS),echo "== test-portable: $(c): $(CAP_$(c))" && \
	  env $(CAP_$(c)) $(VPY) -m pytest -q -k "$(PORTABLE_K)" $(PORTABLE_TESTS) $(PYTEST_ARGS) && ) true

reproduce: setup
	$(if $(FROM_SCRATCH),MRP_REPRO_FROM_SCRATCH=$(FROM_SCRATCH) )$(VPY) -m mrp_repro.reproduce --profile $(PROFILE) --nproc $(NPROC)

# No network, no install: a GPU machine's own python3 when its torch sees CUDA (the repo on PYTHONPATH; never
# reinstalls torch), else the venv's (whose CPU torch makes gpu_check say, in one line, that there is no GPU).
GPU_CHECK_OUT ?= figures/gpu_check
gpu-check:
	@if $(PYTHON) -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then \
	  echo "gpu-check: $(PYTHON)'s torch (CUDA), repo on PYTHONPATH"; \
	  PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(PYTHON) -m mrp_repro.gpu_check --out $(GPU_CHECK_OUT); \
	elif [ -x $(VPY) ]; then $(VPY) -m mrp_repro.gpu_check --out $(GPU_CHECK_OUT); \
	else echo "error: no torch with CUDA in $(PYTHON) and no $(VENV); run on a GPU machine (PYTHON=...)" >&2; exit 1; fi

ablations: setup
	$(VPY) -m mrp_repro.report.ablations --profile $(PROFILE)
	$(VPY) -m mrp_repro.reproduce --profile $(PROFILE) --only 10

variance: setup
	$(VPY) -m mrp_repro.report.variance --profile $(PROFILE)

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

clean:
	rm -rf runs .pytest_cache .ruff_cache
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)
