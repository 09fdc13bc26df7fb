"""A server with no model configured never imports torch (with the GPU extra installed it maps
~400 MB of libraries): not at start, not for an ingest, not for a search."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_a_text_only_server_never_imports_torch(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        import pdfs
        from fastapi.testclient import TestClient
        from ragspine.config import Settings
        from ragspine.serving.app import create_app
        settings = Settings(data_dir={str(tmp_path / "data")!r}, dense_model="none", ocr="off",
                            exact_device="auto")
        with TestClient(create_app(settings)) as c:
            assert c.post("/v1/libraries", json={{"name": "t"}}).status_code == 201
            r = c.post("/v1/libraries/t/documents", params={{"wait": "true"}},
                       files={{"file": ("a.pdf", pdfs.make_pdf(["revenue grew"]), "application/pdf")}})
            assert r.status_code == 201, r.text
            assert c.post("/v1/search", json={{"query": "revenue", "libraries": ["t"]}}).json()["hits"]
        print("torch" in sys.modules, "transformers" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]
