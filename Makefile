# mlserve: `make serve` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# `make serve` needs the core package only (no TensorFlow, no test tools).
CORE   := $(VENV)/.installed-core
HOST   ?= 127.0.0.1
PORT   ?= 8080

.PHONY: install install-core system-deps serve serve-tf test lint bench clean generate docs-images docs-console-images

$(BIN)/python:
	@echo "mlserve: creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

$(CORE): pyproject.toml | $(BIN)/python
	@echo "mlserve: installing the core package into $(VENV) (about a minute on a fresh machine)"
	$(BIN)/pip install --progress-bar on -e .
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "mlserve: installing mlserve with every extra and the development tools into $(VENV)"
	$(BIN)/pip install -q -U pip wheel setuptools
	$(BIN)/pip install -e '.[all,dev]'
	# The TF Serving protos; their wheel asks for the full `tensorflow`, tensorflow-cpu serves.
	$(BIN)/pip install -q --no-deps 'tensorflow-serving-api==2.21.*'
	# mlrun's own drift code, the oracle of tests/monitoring/test_drift_exact.py (its dependencies are not installed).
	$(BIN)/pip download -q --no-deps 'mlrun==1.12.1' -d $(VENV)/reference
	touch $@

install: $(STAMP)

install-core: $(CORE)

# Servers the tests start on 127.0.0.1 (Redis, PostgreSQL), the load generator, and the
# headless browser of the page tests (tests/browser.py).
system-deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	command -v h2load >/dev/null || missing="$$missing nghttp2-client"; \
	command -v dot >/dev/null || missing="$$missing graphviz"; \
	command -v valgrind >/dev/null || missing="$$missing valgrind"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

serve: install-core
	@echo "try: curl -s http://$(HOST):$(PORT)/v2/models/flowers/infer -d '{\"inputs\": [[5.1, 3.5, 1.4, 0.2]]}'"
	$(BIN)/mlserve serve examples/serving.py --host $(HOST) --port $(PORT)

# The TensorFlow model repository of examples/ (docs/repository.md); installs the full set.
serve-tf: install
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/mlserve serve examples/tf_repository --host $(HOST) --port $(PORT)

test: install system-deps
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m pytest -q -p no:cacheprovider

# mlrun's own serving tests, imports mapped to mlserve (issue 11; ../shared/conformance/mlrun),
# then mlrun's streaming tests (conformance/mlrun, through the same rewrite): each prints
# its own "mlrun-port...: P passed, F failed, S skipped" line; either failing fails the target.
CONFORMANCE ?= ../shared/conformance/mlrun/run.sh
.PHONY: conformance
conformance: install
	@PYTHONPATH=$(CURDIR) TF_CPP_MIN_LOG_LEVEL=2 bash $(CONFORMANCE); shared=$$?; \
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python conformance/mlrun/run.py; ours=$$?; \
	exit $$(( shared || ours ))

lint: install
	$(BIN)/ruff check mlserve tests benchmarks examples tools
	$(BIN)/ruff format --check mlserve tests benchmarks examples tools
	$(BIN)/mypy mlserve

# docs/images/layers.dot and .svg, drawn from the package's imports (docs/architecture.md;
# tests/test_layers.py checks the committed DOT matches the code), and the streamed
# request's sequence, docs/images/streaming.svg (docs/streaming.md), and the waterfall
# of a recorded trace, docs/images/trace.svg (docs/observability.md; `python -m
# tools.trace_picture --record` records its spans again from a real run).
docs-images: install
	$(BIN)/python -m tools.layers
	$(BIN)/python -m tools.sequence
	$(BIN)/python -m tools.trace_picture

# docs/images/console-*.png: the console's browser tests, saving their screenshots.
docs-console-images: install system-deps
	MLSERVE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/console/test_console_browser.py tests/console/test_console_explain.py -q -p no:cacheprovider

bench: install system-deps
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) $(PROTOC_VENV) mlserve-data .pytest_cache

# The gRPC stubs of mlserve/grpc/proto and the TF Serving config module of
# mlserve/protocol/proto (checked in; tests/grpc/test_generated.py checks they match).
# An old protoc on purpose, in a venv of its own: newer ones write stubs that refuse
# protobuf runtimes older than themselves, and the package supports protobuf>=4.25.
PROTOC_REQUIREMENTS := grpcio-tools==1.62.3 protobuf==4.25.0
PROTOC_VENV := .venv-protoc

$(PROTOC_VENV)/bin/python:
	$(PYTHON) -m venv $(PROTOC_VENV)
	$(PROTOC_VENV)/bin/pip install -q $(PROTOC_REQUIREMENTS)

generate: $(PROTOC_VENV)/bin/python
	$(PROTOC_VENV)/bin/python -m grpc_tools.protoc -Imlserve/grpc/generated=mlserve/grpc/proto \
		--python_out=. --grpc_python_out=. --pyi_out=. mlserve/grpc/generated/grpc_predict_v2.proto
	$(PROTOC_VENV)/bin/python -m grpc_tools.protoc -Imlserve/protocol/generated=mlserve/protocol/proto \
		--python_out=. --pyi_out=. mlserve/protocol/generated/model_server_config.proto
