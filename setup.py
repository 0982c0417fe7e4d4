"""Build script for the one compiled piece: protocol/_recwalk.c, the record walker the
produce path runs over every record (see protocol/record_walk.py).  Everything else is
declared in pyproject.toml.  The extension is optional: without a C compiler the install
still succeeds and protocol/record_walk.py falls back to its pure-Python reference (the
broker logs a warning when it starts)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "protocol._recwalk",
            sources=["protocol/_recwalk.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
