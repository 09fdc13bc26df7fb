"""The README's settings table stays true: every setting in ragspine.config is documented there."""

from pathlib import Path

from ragspine.config import Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_setting_is_in_the_readme_table() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [f"RAGSPINE_{name.upper()}" for name in Settings.model_fields
               if f"| `RAGSPINE_{name.upper()}` |" not in text]
    assert missing == []


def test_the_readme_names_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text


def test_the_readme_names_every_layer_of_the_import_contract() -> None:
    import tomllib

    text = README.read_text(encoding="utf-8")
    conf = tomllib.loads((README.parent / "pyproject.toml").read_text())
    layers = conf["tool"]["importlinter"]["contracts"][0]["layers"]
    packages = [p.strip() for layer in layers for p in layer.split("|")]
    assert len(packages) >= 14
    missing = [p for p in packages
               if f"`{p.split('.')[1]}/`" not in text and f"`{p.split('.')[1]}.py`" not in text]
    assert missing == []
