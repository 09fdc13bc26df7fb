"""Stand-in OCR engines for worker processes (``import ocr_engines``): module-level factories, so
a spawned worker can unpickle them (spawned children get the parent's ``sys.path``).

They read nothing: each answers one line whose text names the image's size, so a test can
tell which page it came from. They are driven through files in the folder named by the
``OCR_TEST_DIR`` environment variable (inherited by the workers at spawn):

* ``started-<pid>-<n>-<w>``: written when a worker starts reading its n-th image, ``w`` pixels
  wide;
* ``hold``: while it exists, a worker that started reading waits (up to 60 s);
* ``hold-<w>``: the same, for images ``w`` pixels wide only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ragspine.ocr import OcrLine

_DIR = "OCR_TEST_DIR"


class FileDrivenEngine:
    name = "test:file-driven"

    def __init__(self, die: bool = False) -> None:
        self.die = die
        self.calls = 0

    def recognize(self, image: np.ndarray) -> list[OcrLine]:
        folder = Path(os.environ[_DIR])
        self.calls += 1
        (folder / f"started-{os.getpid()}-{self.calls}-{image.shape[1]}").touch()
        if self.die:
            os._exit(3)  # a worker that crashes on every page (a native library's segfault)
        deadline = time.monotonic() + 60
        holds = (folder / "hold", folder / f"hold-{image.shape[1]}")
        while any(h.exists() for h in holds) and time.monotonic() < deadline:
            time.sleep(0.01)
        h, w = image.shape[:2]
        return [OcrLine(text=f"harbour {w}x{h}", box=(1.0, 1.0, w - 1.0, min(h - 1.0, 40.0)), score=0.99)]


def file_driven(backend: str) -> FileDrivenEngine:
    return FileDrivenEngine()


def dying(backend: str) -> FileDrivenEngine:
    return FileDrivenEngine(die=True)


def env_recording(backend: str) -> FileDrivenEngine:
    """Writes ``env-<pid>``: the oneDNN cache setting the engine finds when it loads."""
    value = os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "<unset>")
    (Path(os.environ[_DIR]) / f"env-{os.getpid()}").write_text(value)
    return FileDrivenEngine()


def unloadable(backend: str) -> FileDrivenEngine:
    raise RuntimeError("this engine cannot load in a worker")  # the pool's probe fails
