"""A translation server: LibreTranslate's API and our own, requests batched together, a page
that shows the attention. `transduce serve --model RUN_DIR`, or `create_app` for any ASGI
server."""

from typing import TYPE_CHECKING

from transduce.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "transduce.serve.app": ("create_app",),
    "transduce.serve.models": ("ModelSpec", "ServedModel", "load_models"),
    "transduce.serve.settings": ("ServeSettings",),
})

if TYPE_CHECKING:
    from transduce.serve.app import create_app
    from transduce.serve.models import ModelSpec, ServedModel, load_models
    from transduce.serve.settings import ServeSettings

__all__ = ["ModelSpec", "ServeSettings", "ServedModel", "create_app", "load_models"]
