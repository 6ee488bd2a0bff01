"""Stand-ins for mlrun's LLM model-provider classes, as test data only.

vendor/test_streaming.py subclasses ``ModelProvider`` and builds a
``MockModelProvider`` when it is imported (in a ``parametrize`` list), so both
names must be classes for the module to load; the cases that use them need
mlrun's ``LLModel`` and are skipped (skip.txt). Nothing here serves.
"""


class ModelProvider:
    """mlrun.datastore.model_provider.model_provider.ModelProvider, as a bare class."""

    supports_streaming = True


class MockModelProvider(ModelProvider):
    """mlrun.datastore.model_provider.mock_model_provider.MockModelProvider, as a bare class."""
