"""nuclio's entry point under the name the nuclio config names
(docs/deployment.md); the runtime lives in
``mlserve.function.nuclio``."""

from mlserve.function.nuclio import *  # noqa: F403
from mlserve.function.nuclio import __all__  # noqa: F401

# mlrun's entry point (nuclio_init_hook / context.mlrun_handler), for code written for mlrun.
from mlserve.runtimes.mlrun_hook import (  # noqa: E402,F401
    mlrun_handler,
    nuclio_init_hook,
    serving_subkind,
    v2_serving_handler,
    v2_serving_streaming_handler,
)
