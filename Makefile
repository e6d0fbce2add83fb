# The two commands of the README: `make book` and `make test`. Both create .venv on first use.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
NOTEBOOKS := $(sort $(wildcard book/*.ipynb))
# The notebooks' cell timeout is execute.timeout in _config.yml, the one place it is set (read when used: `=`).
CELL_TIMEOUT = $(shell $(BIN)/python tools/refresh_notebooks.py --print-timeout)
# Machine-specific nbval noise only (see the comments in the file).
NBVAL_FLAGS = --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=$(CELL_TIMEOUT) \
	-p no:cacheprovider

.PHONY: book test install lint unit nbval site-check reader refresh clean

install: $(VENV)/.installed

# Re-install when the pins or the package metadata change.
$(VENV)/.installed: requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(BIN)/python -c "import attention_course, torch, jupyter_book; print('installed: torch', torch.__version__)"
	@touch $@

# The site renders the notebooks' saved outputs (_config.yml: execute_notebooks: off); `make test` first proves
# them current with nbval, and `make refresh` re-executes notebooks to update them.
book: install
	$(BIN)/jupyter-book build . --all
	@echo
	@echo "The site is built. Open: file://$(CURDIR)/_build/html/index.html"

lint: install
	$(BIN)/ruff check .

# Two worker processes (pytest-xdist), measured on 2 cores: unit tests 2:20 → 1:20, nbval 8:28 → 5:15, reader
# tests 6:09 → 3:39 (the interpreter-run kernel tests, most notebook cells and the browser are one thread each).
WORKERS ?= 2

unit: install
	$(BIN)/python -m pytest tests -m "not reader" -n $(WORKERS)

# Under PyTorch CPU kernels other than those the saved outputs were made with (tools/refresh_notebooks.py
# --nbval-capability; ATEN_CPU_CAPABILITY, if set, wins): an output only one processor prints fails here, on any
# machine, not first on a reader's.
# Every live comparison the notebooks make is logged and counted against the budget evidence.threshold assumes
# (tools/count_comparisons.py).
COMPARISON_LOG := $(CURDIR)/_build/comparisons.log
nbval: install
	@cap=$$($(BIN)/python tools/refresh_notebooks.py --nbval-capability $(NOTEBOOKS)) && \
	echo "nbval under ATEN_CPU_CAPABILITY=$$cap" && \
	mkdir -p _build && rm -f $(COMPARISON_LOG) && \
	export ATTENTION_COURSE_COMPARISON_LOG=$(COMPARISON_LOG) && \
	ATEN_CPU_CAPABILITY=$$cap $(BIN)/python -m pytest $(NBVAL_FLAGS) -n $(WORKERS) --dist loadfile $(NOTEBOOKS) && \
	$(BIN)/python tools/count_comparisons.py $(COMPARISON_LOG)

# In `make test` this runs after nbval has checked the saved outputs the site renders.
site-check: install
	$(BIN)/jupyter-book build . --all -W -n --keep-going
	$(BIN)/python tools/check_site.py _build/html

# The reader's experience over the built site: Chromium on every page, JupyterLab, a bare (Colab-like) kernel.
# By scope over the workers (--dist loadscope): each test file's functions on one worker, and test_site.py's class
# TestEveryPage, whose three tests judge one load of every page per width (page_reports), on one worker too.
# (Grouped by file, test_site.py's browser tests ran 8.5 min on one worker while the other idled after 4.)
reader: install
	$(BIN)/python -m pytest tests/reader -m reader -rs -n $(WORKERS) --dist loadscope

# In this order: the site is built after nbval has checked the outputs it renders. (Running the unit tests
# beside nbval was measured slower on two cores: their multi-threaded PyTorch calls wait on the busy core.)
test: lint unit nbval site-check reader
	@echo "make test: all checks passed"

# Re-execute notebooks in place after changing them: make refresh NB="book/01_soft_lookup.ipynb"
refresh: install
	$(BIN)/python tools/refresh_notebooks.py $(or $(NB),$(NOTEBOOKS))

clean:
	rm -rf _build
