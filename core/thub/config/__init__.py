"""Configuration: parameter introspection (``fields``) and layered resolution (``resolve``).

Submodules are imported on use: ``thub.config.fields`` is needed by ``thub --help``,
``thub.config.resolve`` (pydantic) only by commands that resolve parameters.
"""
