import pytest

# The shared test mixins assert too; show their diffs like a test module's.
pytest.register_assert_rewrite("tests.portal.api.base")
