"""Build script for the two compiled pieces: protocol/_recwalk.c, the record walker the
produce path runs over every record (see protocol/record_walk.py), and storage/_cleaner.c,
the log cleaner's key map and record loops (see storage/cleaner.py).  Everything else is
declared in pyproject.toml.  Both extensions are optional: without a C compiler the
install still succeeds and each falls back to its pure-Python reference (the broker logs
a warning when it starts)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "protocol._recwalk",
            sources=["protocol/_recwalk.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "storage._cleaner",
            sources=["storage/_cleaner.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
