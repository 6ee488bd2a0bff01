"""A 4 MB tensor in and out through system shared memory, against the binary tensor
extension (docs/protocol.md#system-shared-memory).

    python -m benchmarks.shared_memory [--calls 200] [--repeat 3] [--mb 4] [--no-doc]

``mlserve serve examples/triton_models.py --model-control-mode explicit``;
tritonclient.http calls ``custom_identity_int32`` (an INT32 identity) one request
at a time, the tensor either in the body (binary extension, both ways) or in
registered regions (input and output). Rounds alternate; the table has the median
round's latency per call.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks.common import arguments, heading, progress, publish, running, table_lines

ROOT = Path(__file__).resolve().parents[1]
MODEL = "custom_identity_int32"


def _serve(port: int, workdir: Path) -> list[str]:
    models = str(ROOT / "examples" / "triton_models.py")
    command = [sys.executable, "-m", "mlserve", "serve", models, "--port", str(port)]
    return [*command, "--model-control-mode", "explicit"]


def _shm() -> ModuleType:
    sys.path.insert(0, str(ROOT))  # tests/triton_shm: tritonclient's shm without pkg_resources
    from tests.triton_shm import shm_module

    return shm_module()


def _binary_call(client: Any, http: ModuleType, array: np.ndarray) -> None:
    tensor = http.InferInput("INPUT0", list(array.shape), "INT32")
    tensor.set_data_from_numpy(array, binary_data=True)
    output = http.InferRequestedOutput("OUTPUT0", binary_data=True)
    answer = client.infer(MODEL, [tensor], outputs=[output]).as_numpy("OUTPUT0")
    assert answer.shape == array.shape


def _shm_call(client: Any, http: ModuleType, array: np.ndarray, size: int) -> None:
    tensor = http.InferInput("INPUT0", list(array.shape), "INT32")
    tensor.set_shared_memory("bench_in", size)
    output = http.InferRequestedOutput("OUTPUT0", binary_data=True)
    output.set_shared_memory("bench_out", size)
    client.infer(MODEL, [tensor], outputs=[output])


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--calls", type=int, default=200, help="calls per round")
    parser.add_argument("--repeat", type=int, default=3, help="alternating rounds")
    parser.add_argument("--mb", type=int, default=4, help="tensor size, MiB")
    args = parser.parse_args(argv)
    import tritonclient.http as http

    shm = _shm()
    size = args.mb * 1024 * 1024
    array = np.arange(size // 4, dtype=np.int32).reshape(1, -1)
    tag = uuid.uuid4().hex[:8]
    rounds: dict[str, list[float]] = {"binary extension": [], "system shared memory": []}
    with running(_serve, "shared-memory") as (port, _, _):
        client = http.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120)
        into = shm.create_shared_memory_region("bench_in", f"/bench-in-{tag}", size)
        out = shm.create_shared_memory_region("bench_out", f"/bench-out-{tag}", size)
        try:
            shm.set_shared_memory_region(into, [array])
            client.register_system_shared_memory("bench_in", f"/bench-in-{tag}", size)
            client.register_system_shared_memory("bench_out", f"/bench-out-{tag}", size)
            _shm_call(client, http, array, size)
            got = shm.get_contents_as_numpy(out, np.int32, list(array.shape))
            assert np.array_equal(got, array), "the output region does not hold the input"
            calls = {
                "binary extension": lambda: _binary_call(client, http, array),
                "system shared memory": lambda: _shm_call(client, http, array, size),
            }
            for call in calls.values():  # warm-up: the model's gate has learnt
                for _ in range(10):
                    call()
            for round_ in range(args.repeat):
                for name, call in calls.items():
                    started = time.perf_counter()
                    for _ in range(args.calls):
                        call()
                    rounds[name].append((time.perf_counter() - started) / args.calls)
                    progress(f"round {round_ + 1} {name}: {rounds[name][-1] * 1e3:.2f} ms/call")
        finally:
            client.unregister_system_shared_memory()
            shm.destroy_shared_memory_region(into)
            shm.destroy_shared_memory_region(out)
    median = {name: statistics.median(times) for name, times in rounds.items()}
    base = median["binary extension"]
    lines = heading(
        "A big tensor through system shared memory",
        f"python -m benchmarks.shared_memory --calls {args.calls} --repeat {args.repeat} "
        f"--mb {args.mb}",
        f". tritonclient.http, one call at a time, to `{MODEL}` of examples/triton_models.py: "
        f"an INT32 tensor of {args.mb} MiB in and the same back; median of {args.repeat} "
        f"alternating rounds of {args.calls} calls.",
    )
    lines += table_lines(
        ["the tensor travels", "ms per call", "vs the binary extension"],
        ([name, f"{t * 1e3:.2f}", f"{base / t:.1f}x"] for name, t in median.items()),
    )
    publish("shared-memory", "\n".join(lines), args)


if __name__ == "__main__":
    main()
