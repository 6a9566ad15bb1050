"""A translation server: LibreTranslate's API and our own, requests batched together, a page
that shows the attention. `transduce serve --model RUN_DIR`, or `create_app` for any ASGI
server."""

from transduce.serve.app import create_app
from transduce.serve.models import ModelSpec, ServedModel, load_models
from transduce.serve.settings import ServeSettings

__all__ = ["ModelSpec", "ServeSettings", "ServedModel", "create_app", "load_models"]
