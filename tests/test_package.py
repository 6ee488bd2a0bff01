"""The package's shape: its API, its import cost, its error table."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import mlserve
import mlserve.graph
import mlserve.protocol
from mlserve.core.public import PUBLIC_NAMES
from mlserve.protocol import errors

HEAVY = (
    "tensorflow",
    "grpc",
    "sqlalchemy",
    "storey",
    "pandas",
    "kafka",
    "redis",
    "graphviz",
    "prometheus_client",
    "nuclio_sdk",
    "uvicorn",
    "confluent_kafka",
    "sklearn",
    "joblib",
    "xgboost",
    "onnx",
    "onnxruntime",
)


@pytest.mark.parametrize("module", [mlserve, mlserve.graph, mlserve.protocol])
def test_all_is_sorted_and_exported(module):
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"


def test_import_loads_no_heavy_dependency():
    code = f"import sys, mlserve; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


MAX_MODULES = 300  # what ``import mlserve`` may add to sys.modules


def _fresh(statement: str) -> set[str]:
    """What ``statement`` adds to a fresh interpreter's sys.modules."""
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        f"{statement}\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize(
    "statement",
    ["import mlserve", "from mlserve import *", "import mlserve\nmlserve.V2ModelServer"],
)
def test_import_stays_small_and_loads_no_optional_stack(statement):
    added = _fresh(statement)
    assert len(added) <= MAX_MODULES, f"{len(added)} modules"
    assert not [m for m in added if m.split(".")[0] in HEAVY]
    # Only exporting a function or a process-pool ensemble needs these.
    assert not added & {"yaml", "multiprocessing", "mlserve.function.build"}


def test_import_mlserve_alone_loads_the_names_on_first_use():
    added = _fresh("import mlserve")
    assert "numpy" not in added and "asyncio" not in added
    assert not [m for m in added if m.startswith("mlserve.")]


def test_every_public_name_is_the_defining_modules_own():
    import importlib

    for name, module in PUBLIC_NAMES.items():
        assert getattr(mlserve, name) is getattr(importlib.import_module(module), name)
    assert set(PUBLIC_NAMES) | {"__version__"} == set(mlserve.__all__)
    assert set(mlserve.__all__) <= set(dir(mlserve))
    assert not hasattr(mlserve, "no_such_name")


def test_subpackages_resolve_after_a_plain_import():
    """``import mlserve`` once loaded the graph, server and function packages with it;
    attribute paths through them still work."""
    code = (
        "import mlserve\n"
        "print(mlserve.graph.ensembles.ParallelRunnerModes.thread.value,"
        " mlserve.server.graph_server.GraphServer.__name__,"
        " mlserve.protocol.errors.InvalidInput.__name__, mlserve.model.V2ModelServer.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["thread", "GraphServer", "InvalidInput", "V2ModelServer"]


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


@pytest.mark.parametrize("cls", list(_subclasses(errors.MLServeError)))
def test_every_error_has_a_rest_status_and_a_grpc_code(cls):
    import grpc

    status = errors.status_of(cls("x"))
    assert 400 <= status < 600
    assert getattr(grpc.StatusCode, errors.GRPC_CODES[status])
    assert errors.error_body(cls("bad thing")) == {"error": f"{cls.__name__}: bad thing"}


def test_an_unknown_exception_is_a_500_and_a_missing_hook_a_501():
    assert errors.status_of(ValueError("boom")) == 500
    assert errors.GRPC_CODES[500] == "INTERNAL"
    assert errors.status_of(NotImplementedError("no explain")) == 501
    assert errors.GRPC_CODES[501] == "UNIMPLEMENTED"


def test_one_kafka_client():
    """confluent-kafka everywhere: kafka-python is in no dependency list and no import."""
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    assert not [r for r in requirements if r.startswith("kafka-python")]
    assert "confluent-kafka>=2.3" in project["optional-dependencies"]["kafka"]
    imports = re.compile(r"^\s*(from|import) kafka\b", re.M)
    sources = [*root.glob("mlserve/**/*.py"), *root.glob("tests/**/*.py"), *root.glob("docs/*.md")]
    assert [str(p) for p in sources if imports.search(p.read_text())] == []


def test_the_first_import_paths_of_moved_names_still_work():
    """Names that moved to mlserve.core keep the paths users' code (and mlrun's port of
    ``MockTrigger``) imports them from."""
    from mlserve.core import events, limits
    from mlserve.function.repository import function_from_repository
    from mlserve.repository import function_from_repository as through_repository
    from mlserve.server.events import MockEvent, Trigger
    from mlserve.server.limits import ServerLimits

    assert (Trigger, MockEvent) == (events.Trigger, events.MockEvent)
    assert ServerLimits is limits.ServerLimits
    assert through_repository is function_from_repository
