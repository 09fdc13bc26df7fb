"""A real HTTP server (uvicorn on a free port, in a thread) over a fresh data dir: a client
speaks HTTP to it exactly as to ``ragspine serve``."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

_SERVING = str(Path(__file__).resolve().parents[1] / "serving")
if _SERVING not in sys.path:  # ``import serving_kit``
    sys.path.insert(0, _SERVING)

from serving_kit import clean_settings, free_port  # noqa: E402

#: ``key-a`` sees library ``liba`` only; ``key-star`` every library.
KEY_A, KEY_STAR = "key-aaaaaaaa", "key-bbbbbbbb"


class LiveServer:
    def __init__(self, data_dir: Path, **settings: Any) -> None:
        import uvicorn

        from ragspine.serving.app import create_app

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(clean_settings(data_dir=data_dir, **settings))
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
