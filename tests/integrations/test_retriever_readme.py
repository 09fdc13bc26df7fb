"""The README's LangChain and LlamaIndex examples run as printed, against a live server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from retriever_kit import KEY_STAR, UNIQUE, UNIQUE_PAGE, LiveServer

README = Path(__file__).resolve().parents[2] / "README.md"


def examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use it from LangChain / LlamaIndex"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_shows_both_frameworks() -> None:
    found = examples()
    assert [("ragspine.integrations.langchain" in b, "ragspine.integrations.llamaindex" in b) for b in found] == \
        [(True, False), (False, True)]


@pytest.mark.parametrize("n", [0, 1], ids=["langchain", "llamaindex"])
def test_a_readme_example_runs(n: int, live: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = examples()[n]
    assert "http://127.0.0.1:8000" in code and '"key-for-analysts"' in code
    code = (code.replace("http://127.0.0.1:8000", live.url).replace('"key-for-analysts"', repr(KEY_STAR))
            .replace("operating margin 2023", f"operating margin {UNIQUE}"))
    exec(compile(code, f"README example {n}", "exec"), {})
    first = capsys.readouterr().out.splitlines()[0]
    assert f"Acme 2023 annual report, p. {UNIQUE_PAGE} [" in first
