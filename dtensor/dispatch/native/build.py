"""Build the compiled dispatch entry (Note [native fast path] in dtensor.dispatch.native).

    .venv/bin/python dtensor/dispatch/native/build.py   # scripts/setup.sh runs it

Idempotent: a build whose source hash matches is kept without importing torch. Without a
compiler (or ninja) it says why and exits 0: dtensor then uses its pure-Python fast path.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fast_dispatch.cpp"
BUILD_DIR = HERE / "_build"
NAME = "dtensor_native"
STAMP = BUILD_DIR / "source.sha256"


def sources() -> list[Path]:
    """The translation unit and the parts it includes."""
    return [SOURCE] + sorted(HERE.glob("*.h"))


def source_hash() -> str:
    digest = hashlib.sha256()
    for path in sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


def built_library() -> Path:
    return BUILD_DIR / f"{NAME}.so"


def up_to_date() -> bool:
    return (built_library().exists() and STAMP.exists()
            and STAMP.read_text().strip() == source_hash())


def build(verbose: bool = False) -> Path:
    """Compile the extension into ``_build`` (raises what the compiler raised)."""
    from torch.utils import cpp_extension

    BUILD_DIR.mkdir(exist_ok=True)
    digest = source_hash()
    cpp_extension.load(name=NAME, sources=[str(SOURCE)], build_directory=str(BUILD_DIR),
                       extra_cflags=["-O2", f"-DDTENSOR_NATIVE_SOURCE_HASH={digest}"],
                       verbose=verbose)
    STAMP.write_text(digest + "\n")
    return built_library()


def main() -> int:
    if up_to_date():
        print(f"dtensor native dispatch: up to date ({built_library()})")
        return 0
    start = time.perf_counter()
    try:
        path = build(verbose="-v" in sys.argv)
    except Exception as e:  # no compiler, no ninja, no headers: the Python path serves
        print(f"dtensor native dispatch: not built ({type(e).__name__}: {e}); the pure-Python "
              "fast path will be used", file=sys.stderr)
        return 0
    print(f"dtensor native dispatch: built {path} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
