"""Build script: where the packages go, and the compiled pieces.

Installed from a wheel (``pip install .``, ``pip install chronolog[spark]``), Chronolog
adds two top-level names to an environment and no generic ones: ``chronolog`` (the
repository's ``broker``, ``protocol``, ``storage``, ``config`` and ``pipeline`` as
``chronolog.broker``, ``chronolog.protocol``, ...) and ``pyspark_kafka_compatible``, the
PySpark data source, which PySpark finds by that ``pyspark_`` prefix (format
``kafka-compatible``, no registration call). The build copies each module with its
imports of those packages rewritten (``from protocol import records`` becomes ``from
chronolog.protocol import records``); the repository keeps the flat layout.

An editable install (``pip install -e .``, what ``make`` does) and ``python setup.py
build_ext --inplace`` use the repository as it is: the packages at the top level, the
extensions built next to their sources.

The compiled pieces: protocol/_recwalk.c, the record walker the produce path runs over
every record (see protocol/record_walk.py); protocol/_fastwire.c, which runs the message
decoders and encoders protocol/_codegen.py derives from the schemas; storage/_append.c
and broker/_produce.c, the common case of a produced batch's append and of the produce
handler's loop; broker/_lane.c, a connection's consecutive Produce frames answered in one
call; broker/_metrics.c, the metric updates of each request; and
storage/_cleaner.c, the log cleaner's key map and record loops (see storage/cleaner.py).
All are optional: without a C compiler the install still succeeds and each falls back to
its pure-Python reference (the broker logs a warning when it starts). Everything else is
declared in pyproject.toml."""

import os
import re
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

INTERNAL = ("broker", "protocol", "storage", "config", "pipeline")
DATA_SOURCE = "pyspark_kafka_compatible"
NAMESPACE = "chronolog"

# the repository's own layout: editable installs and in-place extension builds
IN_PLACE = any(a in sys.argv for a in ("editable_wheel", "develop", "--inplace", "-i"))
PREFIX = "" if IN_PLACE else NAMESPACE + "."

_IMPORT = re.compile(r"^(\s*)(from|import)(\s+)(" + "|".join(INTERNAL) + r")(?=[.\s])", re.M)


def rewrite_imports(source: str) -> str:
    """``from broker.x import y`` / ``import protocol.messages as M`` -> the same under
    ``chronolog.``. A bare ``import broker`` would bind another name: the code has none."""
    return _IMPORT.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{NAMESPACE}.{m.group(4)}", source)


class namespaced_build_py(build_py):
    """Copies the modules with their internal imports rewritten under ``chronolog.``."""

    def build_module(self, module, module_file, package):
        out = super().build_module(module, module_file, package)
        if PREFIX:
            path = out[0] if isinstance(out, tuple) else self.get_module_outfile(
                self.build_lib, package.split(".") if isinstance(package, str) else package, module)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            new = rewrite_imports(text)
            if new != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
        return out


def packages():
    found = find_packages(include=[f"{p}*" for p in (*INTERNAL, DATA_SOURCE)])
    if not PREFIX:
        return found, {}
    mapped = [p if p.startswith(DATA_SOURCE) else PREFIX + p for p in found]
    dirs = {PREFIX + p: p.replace(".", os.sep) for p in found if not p.startswith(DATA_SOURCE)}
    return mapped, dirs


PACKAGES, PACKAGE_DIR = packages()

setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data={PREFIX + "protocol": ["schemas/*.json", "schemas/LICENSE", "schemas/NOTICE",
                                        "schemas/KAFKA_COMMIT", "schemas/SHARE_GROUPS.md"]},
    entry_points={"console_scripts": [f"chronolog = {PREFIX}broker.cli:main"]},
    cmdclass={"build_py": namespaced_build_py},
    ext_modules=[
        Extension(
            PREFIX + "protocol._recwalk",
            sources=["protocol/_recwalk.c"],
            depends=["protocol/_pyint.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            PREFIX + "protocol._fastwire",
            sources=["protocol/_fastwire.c"],
            depends=["protocol/_pyint.h", "protocol/_mvslice.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            PREFIX + "storage._append",
            sources=["storage/_append.c"],
            depends=["protocol/_pyint.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            PREFIX + "broker._produce",
            sources=["broker/_produce.c"],
            depends=["broker/_slots.h", "broker/_exc.h", "protocol/_pyint.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            PREFIX + "broker._lane",
            sources=["broker/_lane.c"],
            depends=["broker/_slots.h", "broker/_exc.h", "protocol/_mvslice.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            PREFIX + "broker._metrics",
            sources=["broker/_metrics.c"],
            depends=["broker/_slots.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            PREFIX + "storage._cleaner",
            sources=["storage/_cleaner.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ],
)
