from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlserve.repository.config import PLATFORMS, ModelConfig, parse_config
from mlserve.repository.layout import (
    detect_class,
    fingerprint,
    is_repository,
    scan_models,
    scan_versions,
)
from mlserve.repository.policy import VersionPolicy, parse_labels

TF_CLASS = "mlserve.frameworks.tensorflow.TFModelServer"
ROOT = Path(__file__).resolve().parents[2]


def test_versions_are_numbered_folders_only(tmp_path: Path) -> None:
    for name in ("1", "2", "10", ".3", "4.tmp", "latest", ".hidden"):
        (tmp_path / "m" / name).mkdir(parents=True)
    (tmp_path / "m" / "5").write_text("a file, not a version")
    assert sorted(scan_versions(tmp_path / "m")) == [1, 2, 10]


def test_models_are_folders_holding_versions(tmp_path: Path) -> None:
    (tmp_path / "a" / "1").mkdir(parents=True)
    (tmp_path / "b" / "notes").mkdir(parents=True)
    (tmp_path / ".c" / "1").mkdir(parents=True)
    assert list(scan_models(tmp_path)) == ["a"]
    assert is_repository(tmp_path)
    assert not is_repository(tmp_path / "b")
    assert not is_repository(tmp_path / "missing")


def test_saved_model_is_detected_by_name_without_importing_tensorflow(tmp_path: Path) -> None:
    (tmp_path / "saved_model.pb").write_bytes(b"")
    assert detect_class(tmp_path) == TF_CLASS
    assert detect_class(tmp_path / "missing") is None
    code = (
        "import sys, mlserve.repository, mlserve.repository.router, mlserve.repository.watcher;"
        "print(sorted(m for m in ('tensorflow', 'tensorflow_serving') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_fingerprint_changes_while_a_folder_is_written(tmp_path: Path) -> None:
    empty = fingerprint(tmp_path)
    (tmp_path / "variables").mkdir()
    (tmp_path / "variables" / "data").write_bytes(b"12")
    first = fingerprint(tmp_path)
    assert first != empty and first == fingerprint(tmp_path)
    (tmp_path / "variables" / "data").write_bytes(b"1234")
    assert fingerprint(tmp_path) != first


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, [7]),
        ("latest", [7]),
        ({"latest": {"num_versions": 2}}, [3, 7]),
        ("all", [1, 3, 7]),
        ({"all": {}}, [1, 3, 7]),
        ({"specific": {"versions": [1, 3, 9]}}, [1, 3]),
    ],
)
def test_version_policies(policy: object, expected: list[int]) -> None:
    assert VersionPolicy.parse(policy).select({7, 1, 3}) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "newest",
        {"latest": {"num_versions": 0}},
        {"specific": {"versions": []}},
        {"latest": {}, "all": {}},
    ],
)
def test_bad_policies_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError):
        VersionPolicy.parse(bad)


def test_labels_name_versions() -> None:
    assert parse_labels({"stable": "1", "canary": 2}) == {"stable": 1, "canary": 2}
    with pytest.raises(ValueError):
        parse_labels({"3": 1})


def test_yaml_config(tmp_path: Path) -> None:
    text = """
models:
  - name: fraud
    class_name: pkg.Fraud
    version_policy: {latest: {num_versions: 2}}
    labels: {stable: 1, canary: 2}
    class_args: {threshold: 0.5}
    max_batch_size: 16
  - name: tf
    base_path: /abs/tf
    model_platform: tensorflow
"""
    configs = parse_config(text, tmp_path)
    fraud, tf = configs["fraud"], configs["tf"]
    assert fraud.base_path == tmp_path / "fraud"
    assert fraud.class_for(tmp_path) == "pkg.Fraud"
    assert fraud.version_policy == VersionPolicy("latest", num_versions=2)
    assert fraud.labels == {"stable": 1, "canary": 2}
    assert fraud.class_args == {"threshold": 0.5, "max_batch_size": 16}
    assert tf.base_path == Path("/abs/tf")
    assert tf.class_for(tmp_path) == PLATFORMS["tensorflow"] == TF_CLASS


def test_model_config_list_text_format(tmp_path: Path) -> None:
    text = """model_config_list {
      config { name: 'm' base_path: '/p' model_platform: 'tensorflow'
               model_version_policy { specific { versions: 1 versions: 2 } }
               version_labels { key: 'stable' value: 1 } version_labels { key: 'canary' value: 2 } }
      config { name: 'n' base_path: 'rel' model_platform: 'tests.repository.fixtures.LinearModel'
               model_version_policy { latest { num_versions: 3 } } }
      config { name: 'k' base_path: 'k' model_version_policy { all {} } }
    }"""
    configs = parse_config(text, tmp_path)
    m, n, k = configs["m"], configs["n"], configs["k"]
    assert m.base_path == Path("/p") and m.class_for(tmp_path) == TF_CLASS
    assert m.version_policy == VersionPolicy("specific", versions=(1, 2))
    assert m.labels == {"stable": 1, "canary": 2}
    assert n.base_path == tmp_path / "rel" and n.version_policy.num_versions == 3
    assert n.class_for(tmp_path) == "tests.repository.fixtures.LinearModel"
    assert k.version_policy.kind == "all"
    with pytest.raises(ValueError, match="class_name"):
        k.class_for(tmp_path)


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_config("models: [{name: a}, {name: a}]", tmp_path)
    with pytest.raises(ValueError, match="name"):
        parse_config("models: [{base_path: x}]", tmp_path)
    with pytest.raises(ValueError, match="models"):
        parse_config("models: 3", tmp_path)
    assert ModelConfig("a", tmp_path).version_policy == VersionPolicy()


def test_model_config_list_with_comments_and_colons(tmp_path: Path) -> None:
    text = """# models served by TF Serving
# (the file TF Serving users pass as --model_config_file)
model_config_list: {
  config: {
    name: "a", base_path: "/models/a", model_platform: "tensorflow",
    model_version_policy: { specific: { versions: [1, 2] } }
  }
}"""
    configs = parse_config(text, tmp_path)
    assert configs["a"].base_path == Path("/models/a")
    assert configs["a"].version_policy == VersionPolicy("specific", versions=(1, 2))
