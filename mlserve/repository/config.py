"""Repository configuration (docs/repository.md#configuration): which models are served, and how.

Two formats, told apart by content:

YAML (``models:`` list)::

    models:
      - name: fraud
        base_path: fraud            # relative to the repository folder (or the config file)
        class_name: mypkg.FraudModel  # or platform: sklearn (PLATFORMS); default: detected
        version_policy: {latest: {num_versions: 2}}
        labels: {stable: 1, canary: 2}
        weights: {1: 90, 2: 10}     # how calls to 'fraud' are shared among versions
        rollout: {2: {min_requests: 200, promote_step: 10}}  # a version's rollout policy
        class_args: {threshold: 0.5}
        max_batch_size: 32          # passed to the model class as a parameter
        done_file: DONE             # a version loads only once it holds this file

TF Serving's ``model_config_list`` (protobuf text of ``ModelServerConfig``)::

    model_config_list {
      config { name: 'fraud' base_path: '/models/fraud' model_platform: 'tensorflow'
               model_version_policy { specific { versions: 1 versions: 2 } }
               version_labels { key: 'stable' value: 1 } }
    }

``model_platform`` (YAML: ``platform`` too) is a known platform (``PLATFORMS``:
``tensorflow_savedmodel``, ``sklearn``, ``xgboost``, ``onnxruntime_onnx``...) or a
dotted class name, so a text config can name any ``V2ModelServer`` class. Without a config every
model folder of the repository is served with the ``latest`` policy and the
class detected from its files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlserve.graph.rollout import RolloutPolicy
from mlserve.repository.layout import check_done_file, detect_class, scan_models
from mlserve.repository.policy import VersionPolicy, parse_labels

__all__ = [
    "PLATFORMS",
    "ModelConfig",
    "configs_from_proto",
    "confine",
    "default_configs",
    "load_config",
    "parse_config",
]

# Triton / KServe style platform names -> the server class, by name
PLATFORMS: dict[str, str] = {
    "tensorflow": "mlserve.frameworks.tensorflow.TFModelServer",
    "tensorflow_savedmodel": "mlserve.frameworks.tensorflow.TFModelServer",
    "sklearn": "mlserve.frameworks.sklearn.SKLearnModelServer",
    "xgboost": "mlserve.frameworks.xgboost.XGBoostModelServer",
    "onnxruntime_onnx": "mlserve.frameworks.onnx.ONNXModelServer",
    "onnx": "mlserve.frameworks.onnx.ONNXModelServer",
}

# Keys of a YAML model entry that are handed to the model class as parameters.
MODEL_PARAMETERS = ("max_batch_size", "max_batch_time", "signature_name", "warmup_file")


@dataclass(frozen=True)
class ModelConfig:
    """One served model: where its versions live, which class serves them."""

    name: str
    base_path: Path
    class_name: str | None = None
    platform: str = ""
    version_policy: VersionPolicy = field(default_factory=VersionPolicy)
    labels: dict[str, int] = field(default_factory=dict)
    class_args: dict[str, Any] = field(default_factory=dict)
    done_file: str | None = None  # docs/repository.md#a-version-loads-when-complete
    # version -> its share of the calls to the name (docs/graphs.md#rolling-out-a-new-model)
    weights: dict[str, float] = field(default_factory=dict)
    # version -> its rollout policy (docs/graphs.md#rolling-back-or-promoting-a-canary)
    rollout: dict[str, RolloutPolicy] = field(default_factory=dict)

    def class_for(self, version_dir: Path) -> str:
        """The class serving ``version_dir``: configured, by platform, or detected."""
        by_platform = PLATFORMS.get(self.platform) or (
            self.platform if "." in self.platform else None
        )
        name = self.class_name or by_platform or detect_class(version_dir)
        if not name:
            raise ValueError(
                f"no server class for {version_dir}: set class_name (or model_platform) for "
                f"model '{self.name}' in the model config"
            )
        return name


def default_configs(root: Path) -> dict[str, ModelConfig]:
    """Every model folder under ``root``, with the default policy."""
    return {name: ModelConfig(name, path) for name, path in sorted(scan_models(root).items())}


def load_config(path: str | Path, root: Path | None = None) -> dict[str, ModelConfig]:
    """Read a config file (YAML or ``model_config_list`` text); relative base paths
    are under ``root`` (the repository folder) or else the file's folder."""
    path = Path(path)
    return parse_config(path.read_text(), root or path.resolve().parent)


def parse_config(text: str, root: Path) -> dict[str, ModelConfig]:
    """The models of a config text: ``{name: ModelConfig}``."""
    if _is_text_format(text):
        entries = _text_format_entries(text)
    else:
        struct = yaml.safe_load(text) or {}
        if not isinstance(struct, dict) or not isinstance(struct.get("models", []), list):
            raise ValueError("a YAML model config is a mapping with a 'models' list")
        entries = struct.get("models") or []
    return _by_name([_model_config(entry, root) for entry in entries])


def configs_from_proto(config: Any, root: Path) -> dict[str, ModelConfig]:
    """The models of a ``ModelServerConfig`` message (TF Serving's config reload)."""
    entries = [_entry_from_proto(c) for c in config.model_config_list.config]
    return _by_name([_model_config(entry, root) for entry in entries])


def confine(configs: dict[str, ModelConfig], root: Path, known: list[Path]) -> None:
    """Refuse what a request may not ask for (docs/security.md#model-control-off-by-default):
    a base path outside the model
    repository ``root`` that the running config does not already serve (a pickle
    there would run its code), or a platform given as a class name to import."""
    root, served = root.resolve(), {path.resolve() for path in known}
    for config in configs.values():
        base = config.base_path.resolve()
        if base not in served and not base.is_relative_to(root):
            raise ValueError(
                f"model '{config.name}': base_path {config.base_path} is outside the model "
                f"repository {root}"
            )
        if config.platform and config.platform not in PLATFORMS:
            raise ValueError(
                f"model '{config.name}': platform '{config.platform}' is not one of "
                f"{sorted(PLATFORMS)}"
            )


def _by_name(configs: list[ModelConfig]) -> dict[str, ModelConfig]:
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"models configured twice: {duplicates}")
    return {c.name: c for c in configs}


def _is_text_format(text: str) -> bool:
    """A ``model_config_list`` text: its first line that is not blank or a comment."""
    lines = (line.strip() for line in text.splitlines())
    first = next((line for line in lines if line and not line.startswith("#")), "")
    return first.startswith("model_config_list")


def _model_config(entry: dict[str, Any], root: Path) -> ModelConfig:
    if not entry.get("name"):
        raise ValueError(f"a model config needs a name: {entry!r}")
    name = str(entry["name"])
    base = Path(str(entry.get("base_path") or name)).expanduser()
    class_args = dict(entry.get("class_args") or {})
    for key in MODEL_PARAMETERS:
        if key in entry:
            class_args[key] = entry[key]
    return ModelConfig(
        name=name,
        base_path=base if base.is_absolute() else root / base,
        class_name=entry.get("class_name"),
        platform=_platform(entry),
        version_policy=VersionPolicy.parse(entry.get("version_policy")),
        labels=parse_labels(entry.get("labels")),
        class_args=class_args,
        done_file=_done_file(entry),
        weights=_weights(entry),
        rollout=_rollout(entry),
    )


def _rollout(entry: dict[str, Any]) -> dict[str, RolloutPolicy]:
    """``rollout``: ``{version: policy options}``, each checked."""
    policies = entry.get("rollout") or {}
    if not isinstance(policies, dict):
        raise ValueError(f"model '{entry.get('name')}': rollout is a mapping of version to policy")
    parsed = {}
    for version, policy in policies.items():
        try:
            parsed[str(version)] = RolloutPolicy.of(policy)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"model '{entry.get('name')}', version {version}: {exc}") from None
    return parsed


def _weights(entry: dict[str, Any]) -> dict[str, float]:
    """``weights``: ``{version: weight}``, each weight a number of 0 or more."""
    weights = entry.get("weights") or {}
    if not isinstance(weights, dict):
        raise ValueError(f"model '{entry.get('name')}': weights are a mapping of version to weight")
    parsed = {}
    for version, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            raise ValueError(
                f"model '{entry.get('name')}': the weight of version {version} is a number "
                f"of 0 or more, got {weight!r}"
            )
        parsed[str(version)] = float(weight)
    return parsed


def _done_file(entry: dict[str, Any]) -> str | None:
    """``done_file``: a file name inside each version folder (``DONE``, ``.complete``)."""
    name = entry.get("done_file")
    if name is None:
        return None
    try:
        return check_done_file(name)
    except ValueError as exc:
        raise ValueError(f"model '{entry.get('name')}': {exc}") from None


def _platform(entry: dict[str, Any]) -> str:
    """``model_platform`` (or ``platform``): a known name or a dotted class name."""
    platform = str(entry.get("model_platform") or entry.get("platform") or "")
    if platform and platform not in PLATFORMS and "." not in platform:
        raise ValueError(
            f"model '{entry.get('name')}': unknown platform '{platform}', use one of "
            f"{sorted(PLATFORMS)} or a dotted class name"
        )
    return platform


def _text_format_entries(text: str) -> list[dict[str, Any]]:
    """The entries of a ``model_config_list``, read with TF Serving's protos as vendored
    in ``mlserve/protocol/proto`` (no tensorflow-serving-api needed)."""
    from google.protobuf import text_format

    from mlserve.protocol.generated import model_server_config_pb2

    try:
        config = text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    except text_format.ParseError as err:
        raise ValueError(f"bad model_config_list text: {err}") from err
    return [_entry_from_proto(c) for c in config.model_config_list.config]


def _entry_from_proto(config: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": config.name,
        "base_path": config.base_path,
        "model_platform": config.model_platform,
        "labels": dict(config.version_labels),
    }
    policy = config.model_version_policy
    which = policy.WhichOneof("policy_choice") if config.HasField("model_version_policy") else None
    if which == "latest":
        entry["version_policy"] = {"latest": {"num_versions": policy.latest.num_versions or 1}}
    elif which == "specific":
        entry["version_policy"] = {"specific": {"versions": list(policy.specific.versions)}}
    elif which == "all":
        entry["version_policy"] = "all"
    return entry
