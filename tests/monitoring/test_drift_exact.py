"""Reference statistics, drift and monitoring applications: the numbers equal mlrun
1.12.1's own code (tests/monitoring/mlrun_reference.py), and the API behaves."""

from __future__ import annotations

import json
import logging
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mlserve.monitoring as monitoring
from mlserve.monitoring.applications import (
    HistogramDataDriftApplication,
    ModelMonitoringApplicationMetric,
    ModelMonitoringApplicationResult,
    MonitoringApplication,
    MonitoringApplicationContext,
    ResultKindApp,
    ResultStatusApp,
    run_applications,
)
from mlserve.monitoring.drift import DriftThresholds, drift_measures, hellinger, kld, tvd
from mlserve.monitoring.endpoints import EndpointMetadata, EndpointSpec, ModelEndpoint
from mlserve.monitoring.statistics import (
    feature_stats,
    inputs_statistics,
    load_feature_stats,
    pad_features_hist,
)
from mlserve.protocol.tensors import dumps_strict
from tests.monitoring.mlrun_reference import (
    mlrun_df_stats,
    mlrun_drift,
    mlrun_inputs_statistics,
    mlrun_padded,
)

RNG_SEED = 27


def close(ours: Any, theirs: Any, path: str = "") -> None:
    """Equal, floats to 1e-9 (relative or absolute), NaN equal to NaN."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and ours.keys() == theirs.keys(), path
        for key in theirs:
            close(ours[key], theirs[key], f"{path}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            close(a, b, f"{path}[{i}]")
    elif isinstance(theirs, float | np.floating):
        if math.isnan(theirs):
            assert math.isnan(ours), path
        else:
            assert ours == pytest.approx(float(theirs), rel=1e-9, abs=1e-9), path
    else:
        assert ours == theirs and type(ours) is type(theirs), path


def reference_frame(rows: int = 2000) -> pd.DataFrame:
    rng = np.random.default_rng(RNG_SEED)
    return pd.DataFrame(
        {
            "normal": rng.normal(size=rows),
            "skewed": rng.lognormal(sigma=1.2, size=rows),
            "count": rng.poisson(4, size=rows),
            "constant": np.full(rows, 3.5),
            "uniform": rng.uniform(-1, 1, size=rows),
        }
    )


def windows() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(RNG_SEED + 1)

    def frame(rows: int, shift: float = 0.0, scale: float = 1.0) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "normal": rng.normal(shift, scale, size=rows),
                "skewed": rng.lognormal(shift, 1.2 * scale, size=rows),
                "count": rng.poisson(4 + 4 * shift, size=rows),
                "constant": np.full(rows, 3.5 + shift),
                "uniform": rng.uniform(-1 + shift, 1 + shift, size=rows),
            }
        )

    with_nan = frame(300)
    with_nan.loc[::7, "normal"] = np.nan
    with_text = frame(200).assign(colour=rng.choice(["red", "green"], size=200))
    outside = frame(100, shift=40.0, scale=5.0)
    outside.loc[0, "uniform"] = np.inf
    partial = frame(50)[["normal", "count"]]
    return {
        "same": frame(500),
        "shifted": frame(500, shift=1.0),
        "wider": frame(400, scale=3.0),
        "nan": with_nan,
        "text_column": with_text,
        "outside_range": outside,
        "features_missing": partial,
        "one_row": frame(1, shift=0.5),
        "two_rows": frame(2),
        "three_rows": frame(3, shift=2.0),
    }


# --- statistics equal mlrun's get_df_stats -------------------------------------------------


def stats_frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(RNG_SEED + 2)
    frame = reference_frame(300)
    return {
        "numeric": frame,
        "mixed": frame.assign(
            colour=rng.choice(["red", "green", "blue"], size=300),
            flag=rng.random(300) > 0.5,
            when=pd.date_range("2026-01-01", periods=300, freq="min"),
        ),
        "nan": frame.assign(gaps=np.where(rng.random(300) > 0.2, rng.normal(size=300), np.nan)),
        "all_nan": frame.assign(nothing=np.nan),
        "one_row": frame.head(1),
        "ints_only": pd.DataFrame({"a": rng.integers(0, 9, 40), "b": rng.integers(-5, 5, 40)}),
    }


@pytest.mark.parametrize("name", list(stats_frames()))
@pytest.mark.parametrize("bins", [20, 7])
def test_feature_stats_equal_mlrun(name: str, bins: int) -> None:
    frame = stats_frames()[name]
    close(feature_stats(frame, bins=bins), mlrun_df_stats(frame, bins=bins))


def test_feature_stats_of_rows_name_columns_as_pandas_would() -> None:
    rows = [[1.0, 2], [3.0, 4], [5.0, 7]]
    named = feature_stats(rows, names=["x", "y"])
    assert list(named) == ["x", "y"]
    close(named, mlrun_df_stats(pd.DataFrame(rows, columns=["x", "y"])))
    unnamed = feature_stats(np.asarray(rows))
    assert list(unnamed) == ["0", "1"]
    assert unnamed["0"] == named["x"]


def test_feature_stats_of_nothing_and_bad_names() -> None:
    assert feature_stats(pd.DataFrame()) == {}
    assert feature_stats(pd.DataFrame({"x": []})) == {}
    with pytest.raises(ValueError, match="names are for an array"):
        feature_stats(pd.DataFrame({"x": [1]}), names=["x"])


# --- padding ---------------------------------------------------------------------------------


def test_padding_equals_mlrun_and_is_idempotent() -> None:
    stats = feature_stats(reference_frame(100).assign(colour="red"))
    padded = pad_features_hist(stats)
    assert padded == mlrun_padded(stats)
    assert pad_features_hist(padded) == padded
    assert "hist" not in padded["colour"]
    counts, edges = padded["normal"]["hist"]
    assert counts[0] == counts[-1] == 0 and len(counts) == 22
    assert edges[0] == -sys.float_info.max and edges[-1] == sys.float_info.max
    assert len(stats["normal"]["hist"][0]) == 20  # the input is left alone


# --- drift equals mlrun's application ------------------------------------------------------


@pytest.mark.parametrize("name", list(windows()))
def test_drift_equals_mlrun(name: str) -> None:
    reference = feature_stats(reference_frame())
    window = windows()[name]
    padded = pad_features_hist(reference)
    current = inputs_statistics(padded, window)
    if set(reference) <= set(window.columns):
        close(current, mlrun_inputs_statistics(mlrun_padded(reference), window))

    measures = drift_measures(padded, current)
    # mlrun raises on a reference feature the window lacks; here it is skipped.
    shared = {key: value for key, value in reference.items() if key in window.columns}
    per_feature, means, general, status = mlrun_drift(shared, window)
    features = {key: value for key, value in measures.items() if isinstance(value, dict)}
    close(features, per_feature)
    close({key: measures[key] for key in means}, means)
    close(measures["general_drift"], general)
    assert DriftThresholds().app_status(measures["general_drift"]) == status


@settings(max_examples=40, deadline=None)
@given(
    reference=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60),
    window=st.lists(st.floats(-1e7, 1e7) | st.just(math.nan), min_size=1, max_size=30),
    bins=st.integers(1, 25),
)
def test_drift_equals_mlrun_on_any_values(
    reference: list[float], window: list[float], bins: int
) -> None:
    reference_stats = feature_stats(pd.DataFrame({"x": reference}), bins=bins)
    assert reference_stats == mlrun_df_stats(pd.DataFrame({"x": reference}), bins=bins)
    frame = pd.DataFrame({"x": window})
    padded = pad_features_hist(reference_stats)
    measures = drift_measures(padded, inputs_statistics(padded, frame))
    per_feature, means, general, _ = mlrun_drift(reference_stats, frame)
    close(measures["x"], per_feature["x"])
    close(measures["general_drift"], general)


def test_features_mlrun_cannot_measure_are_skipped() -> None:
    """A reference column without a histogram (text, or NaN in the training set) makes
    mlrun raise; here it keeps its statistics and drift measures the other features."""
    rng = np.random.default_rng(RNG_SEED)
    training = reference_frame(500).assign(
        colour=rng.choice(["red", "blue"], size=500), gaps=np.nan
    )
    window = windows()["shifted"].assign(colour="red", gaps=1.0)
    padded = pad_features_hist(feature_stats(training))
    current = inputs_statistics(padded, window)
    assert "hist" not in current["colour"] and current["colour"]["top"] == "red"
    assert "hist" not in current["gaps"] and current["gaps"]["count"] == 500.0
    measures = drift_measures(padded, current)
    assert "colour" not in measures and "gaps" not in measures
    numeric = list(reference_frame().columns)
    _, means, general, _ = mlrun_drift(feature_stats(training[numeric]), window[numeric])
    close(measures["general_drift"], general)
    close(measures["tvd_mean"], means["tvd_mean"])


def test_no_shared_feature_gives_nan_and_no_drift() -> None:
    padded = pad_features_hist(feature_stats(reference_frame(50)))
    assert inputs_statistics(padded, pd.DataFrame({"other": [1.0]})) == {}
    measures = drift_measures(padded, {})
    assert math.isnan(measures["general_drift"]) and math.isnan(measures["kld_mean"])
    assert DriftThresholds().status(measures["general_drift"]) == "NO_DRIFT"


def test_infinite_kld_is_kept_and_written_as_null() -> None:
    t = np.array([0.5, 0.5, 0.0])
    u = np.array([0.0, 0.5, 0.5])
    assert kld(t, u) == pytest.approx(2 * 0.5 * math.log(0.5 / 1e-4))
    assert kld(t, u, zero_scaling=0.0) == math.inf
    assert tvd(t, u) == 0.5 and hellinger(t, u) == pytest.approx(math.sqrt(0.5))
    assert hellinger(t, t) == 0.0 and kld(t, t) == 0.0
    record = {"kld": kld(t, u, zero_scaling=0.0)}
    assert json.loads(dumps_strict(record)) == {"kld": None}
    assert all(type(f(t, u)) is float for f in (tvd, hellinger, kld))


# --- thresholds ------------------------------------------------------------------------------


def test_thresholds_classify_like_mlrun() -> None:
    thresholds = DriftThresholds()
    assert [thresholds.status(v) for v in (0.0, 0.49, 0.5, 0.69, 0.7, 1.0)] == [
        "NO_DRIFT",
        "NO_DRIFT",
        "POSSIBLE_DRIFT",
        "POSSIBLE_DRIFT",
        "DRIFT_DETECTED",
        "DRIFT_DETECTED",
    ]
    assert thresholds.app_status(0.6) is ResultStatusApp.potential_detection
    assert DriftThresholds(0.1, 0.2).app_status(0.15) is ResultStatusApp.potential_detection
    for potential, detected in ((0.7, 0.5), (0.0, 0.5), (0.5, 1.0), (0.5, 0.5)):
        with pytest.raises(ValueError, match="0 < potential < detected < 1"):
            DriftThresholds(potential, detected)


# --- load_feature_stats ----------------------------------------------------------------------


def test_load_feature_stats(tmp_path: Path) -> None:
    model = tmp_path / "model.pkl"
    model.write_bytes(b"model")
    assert load_feature_stats(model) is None
    stats = feature_stats(reference_frame(30))
    (tmp_path / "feature_stats.json").write_text(json.dumps(stats))
    assert load_feature_stats(model) == stats
    assert load_feature_stats(tmp_path) == stats
    assert load_feature_stats(str(model)) == stats
    (tmp_path / "feature_stats.json").write_text("{not json")
    with pytest.raises(ValueError, match="feature_stats.json: not valid JSON"):
        load_feature_stats(model)
    (tmp_path / "feature_stats.json").write_text('{"x": [1, 2]}')
    with pytest.raises(ValueError, match="feature_stats.json: expected an object"):
        load_feature_stats(model)


# --- the application API ---------------------------------------------------------------------


def endpoint(stats: dict[str, Any]) -> ModelEndpoint:
    return ModelEndpoint(
        metadata=EndpointMetadata(project="proj", uid="uid1"),
        spec=EndpointSpec(
            function_uri="proj/fn",
            model="m1:latest",
            feature_names=list(stats),
            label_names=["y"],
            feature_stats=stats,
        ),
    )


def context(app: str, stats: dict[str, Any], sample: pd.DataFrame) -> MonitoringApplicationContext:
    start = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    end = datetime(2026, 11, 27, 12, 10, tzinfo=UTC)
    return MonitoringApplicationContext(app, endpoint(stats), sample, start, end)


def test_histogram_application_gives_mlruns_metrics_and_result() -> None:
    reference = feature_stats(reference_frame())
    window = windows()["shifted"]
    ctx = context(HistogramDataDriftApplication.NAME, reference, window)
    outputs = HistogramDataDriftApplication().do_tracking(ctx)
    _, means, general, status = mlrun_drift(reference, window)
    metrics = [o for o in outputs if isinstance(o, ModelMonitoringApplicationMetric)]
    assert [m.name for m in metrics] == list(means) == ["hellinger_mean", "kld_mean", "tvd_mean"]
    close([m.value for m in metrics], list(means.values()))
    (result,) = [o for o in outputs if isinstance(o, ModelMonitoringApplicationResult)]
    assert result.name == "general_drift" and result.kind is ResultKindApp.data_drift
    close(result.value, general)
    assert result.status == status
    assert result.extra_data["current_stats"] is ctx.sample_df_stats
    assert result.extra_data["drift_measures"]["general_drift"] == result.value
    assert result.extra_data["drift_status"] == DriftThresholds().status(result.value)
    strict = HistogramDataDriftApplication(DriftThresholds(0.01, 0.02)).do_tracking(ctx)[-1]
    assert isinstance(strict, ModelMonitoringApplicationResult)
    assert strict.status is ResultStatusApp.detected
    assert strict.extra_data["drift_status"] == "DRIFT_DETECTED"
    assert (
        result.to_dict()["result_kind"] == 0 and result.to_dict()["result_name"] == "general_drift"
    )


def test_histogram_application_without_reference_returns_nothing() -> None:
    ctx = context("histogram-data-drift", {}, windows()["same"])
    assert HistogramDataDriftApplication().do_tracking(ctx) == []
    assert ctx.sample_df_stats == {}


def test_context_properties() -> None:
    reference = feature_stats(reference_frame(100))
    window = windows()["two_rows"]
    ctx = context("my_app", reference, window)
    assert ctx.application_name == "my_app" and ctx.endpoint_id == "uid1"
    assert ctx.sample_df is window and ctx.model_endpoint.spec.model == "m1:latest"
    assert ctx.feature_names == list(reference) and ctx.label_names == ["y"]
    assert ctx.end_infer_time - ctx.start_infer_time == datetime(1, 1, 1, 0, 10) - datetime(1, 1, 1)
    assert ctx.feature_stats == pad_features_hist(reference)
    assert ctx.feature_stats is ctx.feature_stats and ctx.sample_df_stats is ctx.sample_df_stats
    histograms = ctx.dict_to_histogram(ctx.feature_stats)
    assert list(histograms.columns) == list(reference)  # every column here is numeric
    assert histograms["normal"].sum() == pytest.approx(1.0)
    assert ctx.logger.logger.name == "mlserve.monitoring.my_app"


def test_context_logger_takes_mlruns_keywords(caplog: pytest.LogCaptureFixture) -> None:
    ctx = context("kw_app", {}, pd.DataFrame())
    with caplog.at_level(logging.INFO, logger="mlserve.monitoring.kw_app"):
        ctx.logger.info("Computing metrics for feature", feature_name="x", rows=3)
        ctx.logger.warning("plain %s", "args")
    assert caplog.messages == [
        "Computing metrics for feature feature_name='x' rows=3",
        "plain args",
    ]


class CountRows(MonitoringApplication):
    def do_tracking(
        self, monitoring_context: MonitoringApplicationContext
    ) -> ModelMonitoringApplicationMetric:
        monitoring_context.logger.info("counting", rows=len(monitoring_context.sample_df))
        return ModelMonitoringApplicationMetric("rows", len(monitoring_context.sample_df))


class Broken(MonitoringApplication):
    NAME = "broken"

    def do_tracking(self, monitoring_context: MonitoringApplicationContext) -> list[Any]:
        raise RuntimeError("bad application")


class WrongType(MonitoringApplication):
    def do_tracking(self, monitoring_context: MonitoringApplicationContext) -> Any:
        return {"value": 1}


def test_run_applications_goes_on_past_a_failing_one(caplog: pytest.LogCaptureFixture) -> None:
    assert CountRows.NAME == "count_rows" and WrongType.NAME == "wrong_type"
    reference = feature_stats(reference_frame())
    window = windows()["same"]
    apps = [Broken(), CountRows(), WrongType(), HistogramDataDriftApplication()]
    made: list[str] = []

    def factory(application: MonitoringApplication) -> MonitoringApplicationContext:
        made.append(application.NAME)
        return context(application.NAME, reference, window)

    with caplog.at_level(logging.ERROR, logger="mlserve.monitoring"):
        outputs, failed = run_applications(apps, factory)
    assert made == ["broken", "count_rows", "wrong_type", "histogram-data-drift"]
    assert failed == ["broken", "wrong_type"]
    assert list(outputs) == ["count_rows", "histogram-data-drift"]
    assert outputs["count_rows"] == [ModelMonitoringApplicationMetric("rows", 500)]
    assert len(outputs["histogram-data-drift"]) == 4
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 2 and failures[0].exc_info is not None
    assert "broken" in failures[0].getMessage()
    with pytest.raises(ValueError, match="distinct names"):
        run_applications([CountRows(), CountRows()], factory)


def test_names_are_checked_and_inherited() -> None:
    for bad in ("1st", "has-dash", "", "a b"):
        with pytest.raises(ValueError, match="must match"):
            ModelMonitoringApplicationMetric(bad, 1.0)
        with pytest.raises(ValueError, match="must match"):
            ModelMonitoringApplicationResult(
                bad, 1.0, ResultKindApp.concept_drift, ResultStatusApp.irrelevant
            )

    class MyDrift(HistogramDataDriftApplication):
        pass

    class HTTPLatencyCheck(CountRows):
        pass

    assert MyDrift.NAME == "histogram-data-drift"
    assert HTTPLatencyCheck.NAME == "count_rows"
    with pytest.raises(TypeError):
        MonitoringApplication()  # type: ignore[abstract]


def test_mlrun_names_from_the_package() -> None:
    assert monitoring.ModelMonitoringApplicationBase is MonitoringApplication
    assert monitoring.MonitoringApplication is MonitoringApplication
    assert monitoring.HistogramDataDriftApplication is HistogramDataDriftApplication
    assert monitoring.MonitoringApplicationContext is MonitoringApplicationContext
    assert monitoring.ModelMonitoringApplicationResult is ModelMonitoringApplicationResult
    assert monitoring.ModelMonitoringApplicationMetric is ModelMonitoringApplicationMetric
    assert monitoring.DriftThresholds is DriftThresholds
    assert monitoring.feature_stats is feature_stats
    assert [k.value for k in monitoring.ResultKindApp] == [0, 1, 2, 3, 4]
    assert {s.name: s.value for s in monitoring.ResultStatusApp} == {
        "irrelevant": -1,
        "no_detection": 0,
        "potential_detection": 1,
        "detected": 2,
    }
    with pytest.raises(AttributeError):
        monitoring.no_such_name  # noqa: B018
