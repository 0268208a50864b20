# mt — every target installs what it needs, so `make demo` and `make test` work on a fresh clone.
#
#   make demo                 fetch Multi30k, train en->de for $(BUDGET) with the config the recipe
#                             chooses for this machine (printed with its reasons), evaluate, plot
#   make demo BUDGET=5m       a quicker look; SRC=de TGT=en the other direction
#   make demo CONFIG=configs/multi30k_de_en.yaml   train a given config instead of the recipe's
#   make test                 the test suite (fetches Multi30k first: mirror or download)
#   make test-offline         only the tests that need no corpus (the others are skipped)
#   make docs                 the documentation site (mkdocs), built into site/
#   make reference            regenerate docs/reference/cli.md and configuration.md from the code
#   make TORCH_SPEC='torch==2.13.0 --index-url <CUDA wheel index URL>' install   (GPU)

PYTHON     ?= python3
VENV       ?= .venv
# Pinned: on CPU-only machines an unpinned torch pulls several GB of CUDA packages. Unquoted on
# purpose, so a GPU build can add pip options: TORCH_SPEC="torch==2.13.0 --index-url URL".
TORCH_SPEC ?= torch==2.13.0
CONFIG     ?= configs/multi30k_en_de.yaml
SRC        ?= en
TGT        ?= de
BUDGET     ?= 20m
BEAM       ?= 5
SET        ?=
# Offline machines read Multi30k from a local mirror; ../shared/data/multi30k is used when present.
MT_DATA_MIRROR ?= $(if $(wildcard ../shared/data/multi30k/train.en.gz),$(abspath ../shared/data/multi30k),)
export MT_DATA_MIRROR

BIN  := $(VENV)/bin
MT   := $(BIN)/mt
# `make demo` trains what the recipe (`mt train --data`, mt/train/recipe.py) chooses for Multi30k,
# the budget and this machine, unless CONFIG is given (command line or environment): then that config.
# The recipe's run is named as `mt train --data` names it: multi30k_$(SRC)_$(TGT).
DEMO_RECIPE = $(filter file,$(origin CONFIG))
NAME  = $(if $(DEMO_RECIPE),multi30k_$(SRC)_$(TGT),$(basename $(notdir $(CONFIG))))
RUN   = runs/$(NAME)
# The checkpoint evaluated by `make evaluate` / `make demo`: the averaged one when training wrote it.
CKPT  = $(if $(wildcard $(RUN)/checkpoints/averaged.pt),$(RUN)/checkpoints/averaged.pt,$(RUN)/checkpoints/best.pt)
# `make test` runs the suite in one worker process per core (pytest-xdist), each torch on one thread
# (OMP_NUM_THREADS=1: two workers' OpenMP pools on two cores contend, and tiny models gain nothing
# from a second thread); TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= auto
TEST_SPLITS ?= --split test_2016_flickr --split test_2017_flickr --split test_2017_mscoco

.PHONY: install install-dev install-docs browser-deps data prepare train translate evaluate plot demo test test-offline docs docs-check reference bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# mt with the extras the README's commands use, so each works right after `make demo`: documents and
# subtitles (files), mt serve (serve), glossary terms by lemma (terms), mt export --format ctranslate2 (ct2).
EXTRAS ?= files,serve,terms,ct2

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

# mkdocs + mkdocs-material, pinned in pyproject.toml's `docs` extra.
$(VENV)/.installed-docs: $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[docs]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

install-docs: $(VENV)/.installed-docs

data: install
	$(MT) data fetch multi30k --dest data/multi30k

prepare: data
	$(MT) prepare $(CONFIG) $(SET)

train: prepare
	$(MT) train $(CONFIG) $(SET) $(RESUME)

evaluate: install
	$(MT) evaluate -c $(CKPT) $(TEST_SPLITS) --beam $(BEAM) --samples 5

translate: install
	$(MT) translate -c $(CKPT) --beam $(BEAM)

plot: install
	$(MT) plot $(RUN) --attention

# A demo that was killed (or already finished) resumes from last.pt: the budget counts total
# training time across resumes, so a finished run goes straight to evaluation. The recipe's run
# resumes from the config it wrote (recipe.yaml), chosen once; a run without a checkpoint yet is
# planned again. A run an older `make demo` trained from CONFIG (no recipe.yaml) resumes as it was.
RESUME = $(if $(wildcard $(RUN)/checkpoints/last.pt),--resume,)
RECIPE = $(RUN)/recipe.yaml
RECIPE_RESUMES = $(and $(DEMO_RECIPE),$(RESUME),$(wildcard $(RECIPE)))
RECIPE_PLANS   = $(and $(DEMO_RECIPE),$(if $(RESUME),,yes))
DEMO_TRAIN = $(if $(RECIPE_RESUMES),$(MT) train $(RECIPE) --set train.time_budget=$(BUDGET) $(SET) --resume,\
  $(if $(RECIPE_PLANS),$(MT) train --data data/multi30k --src-lang $(SRC) --tgt-lang $(TGT) --budget $(BUDGET) $(SET),\
  $(MT) train $(CONFIG) --set train.time_budget=$(BUDGET) $(SET) $(RESUME)))

# The last lines say how to put `mt` on PATH: make installs it into $(VENV), which no shell has
# activated (the README's Quickstart says the same).
demo: data
	$(DEMO_TRAIN)
	$(MAKE) --no-print-directory evaluate NAME=$(NAME)
	$(MAKE) --no-print-directory plot NAME=$(NAME)
	@echo "demo: done: the checkpoints are in $(RUN)/checkpoints/, the plots in $(RUN)/plots/"
	@echo "demo: mt is installed in $(VENV); put it on PATH in this shell with:  . $(VENV)/bin/activate"

# Lint first (rules in pyproject.toml): a ruff finding fails the target before any test runs; then
# the documentation site must build strictly (docs-check, below).
# The whole suite needs Multi30k: `data` copies it from the mirror or downloads it first, and a
# data test that still finds none FAILS (tests/conftest.py). `make test-offline` runs only the
# tests that need no corpus, skipping the others explicitly (MT_TESTS_OFFLINE=1).
# pytest exits 5 when it collected no tests: that is a failure, not a pass.
# tests/test_page.py drives a real headless Chromium: Debian's chromium + chromium-driver, installed
# here when missing (as root, or through sudo). It fails loudly when it cannot; the test itself
# fails, never skips, without a browser. Debian's gettext comes with them: tests/test_documents_l10n.py
# checks a translated .po with `msgfmt --check`; a JRE for EPUBCheck (tests/test_documents_slides.py).
# Before it installs anything it says what and why (docs/getting-started.md, "What make test installs").
browser-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v msgfmt >/dev/null && command -v java >/dev/null; then exit 0; fi; \
	SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
	echo "browser-deps: the tests need programs from the system's package manager; installing the missing ones with: $${SUDO:+sudo }apt-get install"; \
	echo "  chromium chromium-driver   tests/test_page.py drives mt serve's web page in a headless browser"; \
	echo "  gettext                    msgfmt --check reads the translated .po files (tests/test_documents_l10n.py)"; \
	echo "  default-jre-headless       W3C's EPUBCheck, a Java program, checks the written .epub books (tests/test_documents_slides.py)"; \
	$$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y chromium chromium-driver gettext default-jre-headless \
	  || { echo "browser-deps: FAILED to install chromium + chromium-driver + gettext + a JRE (apt-get); the tests need them" >&2; exit 1; }; \
	command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v msgfmt >/dev/null && command -v java >/dev/null \
	  || { echo "browser-deps: chromium/chromedriver/msgfmt/java still missing after apt-get" >&2; exit 1; }

# The documentation site (mkdocs.yml; pages in docs/, the configuration reference generated from
# mt/config.py by the hook scripts/tools/config_reference.py). --strict: a broken link or anchor, a page
# missing from the nav or a missing include fails the build. It needs nothing from the internet.
# NO_MKDOCS_2_WARNING silences mkdocs-material's banner about MkDocs 2.0 on every build.
MKDOCS = NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: install-docs
	$(MKDOCS) build --strict --site-dir site
	@echo "docs: open site/index.html"

# What `make test` and `make test-offline` run after the linter: the strict build into a scratch
# folder (site/ is left alone); a failed build fails the target before any test runs. No --quiet:
# mkdocs 1.6 then drops its warnings before --strict counts them, and a broken link would pass.
DOCS_CHECK = tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && $(MKDOCS) build --strict --site-dir "$$tmp"

docs-check: install-docs
	@$(DOCS_CHECK)

# The two generated references, rewritten from the code after an option or a config key changed
# (tests/test_docs.py fails while either committed page is stale): docs/reference/cli.md from the
# Typer app, docs/reference/configuration.md from mt/config.py.
reference: install
	$(BIN)/python scripts/tools/cli_reference.py --write
	$(BIN)/python scripts/tools/config_reference.py --write

test: install-dev install-docs data browser-deps
	$(BIN)/ruff check mt tests scripts
	$(DOCS_CHECK)
	MT_TESTS_OFFLINE=0 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25 tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

test-offline: install-dev install-docs browser-deps
	$(BIN)/ruff check mt tests scripts
	$(DOCS_CHECK)
	MT_TESTS_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: data
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python scripts/bench/bench_model.py
	$(BIN)/python scripts/bench/bench_loss.py
	$(BIN)/python scripts/bench/bench_translate.py
	$(BIN)/python scripts/bench/bench_prepare.py

clean:
	rm -rf runs .pytest_cache site
	find . -name __pycache__ -prune -exec rm -rf {} +
