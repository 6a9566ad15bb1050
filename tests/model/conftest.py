import pytest


@pytest.fixture(autouse=True)
def _every_kernel_path(kernel_path):
    """Every test here runs under each kernel path (tests/conftest.py)."""
