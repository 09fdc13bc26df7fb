"""``ragspine`` CLI smoke tests: ingest, search (text and ``--json``), libraries, and bad
arguments that end as ONE line on stderr with a non-zero exit.

Most run ``ragspine.cli.main([...])`` in process (fast); a few run the installed script in a
subprocess to check the real entry point.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pdfs
import pytest
from ragspine.cli import main
from serving_kit import ragspine_command


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main(argv)`` → (exit code, stdout, stderr); SystemExit counts as an exit."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def pdf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pdfs")
    (d / "acme.pdf").write_bytes(pdfs.make_pdf(
        ["Acme revenue grew strongly in 2023, led by cloud.", "Operating margin table by segment."],
        title="Acme annual report"))
    (d / "globex.pdf").write_bytes(pdfs.make_pdf(["Globex revenue fell in 2022."]))
    (d / "zh.pdf").write_bytes(pdfs.make_pdf(["阿克米能源 营业收入 同比增长"]))
    (d / "corrupt.pdf").write_bytes(pdfs.GARBAGE_AFTER_MAGIC)
    (d / "marked.pdf").write_bytes(pdfs.make_pdf(["open page", pdfs.Page(["secret page"], header="RESTRICTED")]))
    return d


@pytest.fixture(scope="module")
def cli_data(tmp_path_factory: pytest.TempPathFactory, pdf_dir: Path) -> Path:
    """A data dir with library ``lib`` holding acme (2023), globex (2022) and zh."""
    data = tmp_path_factory.mktemp("cli-data")
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if k.startswith("RAGSPINE_"):
                mp.delenv(k)
        mp.setenv("RAGSPINE_DENSE_MODEL", "none")  # BM25 only, as every test here expects
        assert main(["--data-dir", str(data), "ingest", str(pdf_dir / "acme.pdf"), "--library", "lib", "-q",
                     "--meta", "entity=acme", "--meta", "period=2023"]) == 0
        assert main(["--data-dir", str(data), "ingest", str(pdf_dir / "globex.pdf"), "--library", "lib", "-q",
                     "--meta", "entity=globex", "--meta", "period=2022"]) == 0
        assert main(["--data-dir", str(data), "ingest", str(pdf_dir / "zh.pdf"), "--library", "lib", "-q",
                     "--meta", "period=2022", "--meta", "language=zh"]) == 0
    return data


def test_ingest_quiet_prints_one_line_per_file_and_no_progress(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pdf_dir: Path
) -> None:
    code, out, err = run(capsys, "--data-dir", str(tmp_path), "ingest", str(pdf_dir / "acme.pdf"),
                         str(pdf_dir / "marked.pdf"), "--library", "fresh", "-q")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert "indexed acme v1: 2 pages" in lines[0]
    assert "indexed marked v1: 1 pages" in lines[1] and "dropped by policy: pages [2]" in lines[1]
    assert err.strip().splitlines() == [  # and no progress bar
        "created library 'fresh'", "building the search indexes of 'fresh' (3 pages)...",
        err.strip().splitlines()[-1]]
    assert err.strip().splitlines()[-1].startswith("search indexes of 'fresh' built in ")
    # The same files again: unchanged.
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "ingest", str(pdf_dir / "acme.pdf"),
                       "--library", "fresh", "-q")
    assert code == 0 and "unchanged (acme v1)" in out


def test_ingest_a_folder_reports_a_bad_file_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pdf_dir: Path
) -> None:
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "ingest", str(pdf_dir), "--library", "all", "-q")
    assert code == 1
    assert "corrupt.pdf: error:" in out and "corrupt" in out.split("corrupt.pdf: error:")[1]
    assert out.count("indexed") == 4  # the other four still went in
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "libraries")
    assert code == 0 and out.strip() == "all\t4 documents\t5 pages"


def test_ingest_jobs_writes_documents_in_parallel_with_the_same_outcome(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pdf_dir: Path
) -> None:
    """--jobs 3 over the folder: the same documents, pages and failure as one at a time (the
    order of the lines is the order the files finished in)."""
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "ingest", str(pdf_dir), "--library", "all", "-q",
                       "--jobs", "3")
    assert code == 1
    lines = sorted(out.strip().splitlines())
    assert sum("indexed" in ln for ln in lines) == 4 and sum("corrupt.pdf: error:" in ln for ln in lines) == 1
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "libraries")
    assert code == 0 and out.strip() == "all\t4 documents\t5 pages"
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "search", "Globex", "--library", "all", "--json")
    assert code == 0 and json.loads(out)["hits"]


def test_ingest_restricted_document(capsys: pytest.CaptureFixture[str], tmp_path: Path, pdf_dir: Path) -> None:
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "ingest", str(pdf_dir / "globex.pdf"),
                       "--library", "lib", "-q", "--sensitivity", "restricted")
    assert code == 0 and "dropped by policy" in out
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "search", "Globex", "--library", "lib", "--json")
    assert code == 0 and json.loads(out)["hits"] == []


def test_search_json_shape(capsys: pytest.CaptureFixture[str], cli_data: Path) -> None:
    code, out, err = run(capsys, "--data-dir", str(cli_data), "search", "revenue", "--library", "lib", "--json")
    assert code == 0, err
    body = json.loads(out)
    assert set(body) >= {"hits", "mode", "degraded", "degraded_reasons", "filters_relaxed"}
    assert {h["doc_id"] for h in body["hits"]} == {"acme", "globex"}
    for h in body["hits"]:
        assert set(h) >= {"library_id", "doc_id", "title", "page", "bbox", "chunk_id", "text", "scores"}
        assert set(h["scores"]) >= {"bm25", "dense", "visual", "fused", "rerank"}
        assert h["library_id"] == "lib" and h["page"] == 1 and len(h["bbox"]) == 4
    acme = next(h for h in body["hits"] if h["doc_id"] == "acme")
    assert acme["title"] == "Acme annual report" and acme["metadata"]["period"] == 2023


def test_search_with_filters_top_k_and_chinese(capsys: pytest.CaptureFixture[str], cli_data: Path) -> None:
    base = ("--data-dir", str(cli_data), "search")
    code, out, _ = run(capsys, *base, "revenue", "--library", "lib", "--json", "--filter", "period eq 2023")
    assert code == 0 and [h["doc_id"] for h in json.loads(out)["hits"]] == ["acme"]
    code, out, _ = run(capsys, *base, "revenue", "--library", "lib", "--json",
                       "--filter", "period between 2020,2022", "--filter", "entity in globex,initech")
    assert code == 0 and [h["doc_id"] for h in json.loads(out)["hits"]] == ["globex"]
    code, out, _ = run(capsys, *base, "revenue", "--library", "lib", "--json", "--top-k", "1")
    assert code == 0 and len(json.loads(out)["hits"]) == 1
    code, out, _ = run(capsys, *base, "营业收入", "--library", "lib", "--json")
    assert code == 0 and [h["doc_id"] for h in json.loads(out)["hits"]] == ["zh"]
    code, out, _ = run(capsys, *base, "revenue", "--library", "lib", "--json", "--mode", "hybrid")
    assert code == 0 and json.loads(out)["degraded"] is True
    code, out, _ = run(capsys, *base, "revenue", "--library", "lib", "--json",
                       "--filter", "period eq 1999", "--allow-unfiltered-fallback")
    assert code == 0 and json.loads(out)["filters_relaxed"] is True


def test_search_text_output_says_what_a_page_prints(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # the cover prints no number, so the 3rd page prints "2": "page two" names both
    (tmp_path / "r.pdf").write_bytes(pdfs.make_pdf([pdfs.Page([f"Part {n}. The revenue chart."],
                                                              footer=str(n - 1) if n > 1 else None)
                                                    for n in range(1, 6)]))
    data = str(tmp_path / "data")
    assert run(capsys, "--data-dir", data, "ingest", str(tmp_path / "r.pdf"), "--library", "lib", "-q")[0] == 0
    code, out, _ = run(capsys, "--data-dir", data, "search", "the revenue chart on page two", "--library", "lib")
    assert code == 0
    assert "— p.3 (printed 2) (r, r/p3/c0)" in out and "— p.2 (printed 1) (r, r/p2/c0)" in out


def test_search_text_output(capsys: pytest.CaptureFixture[str], cli_data: Path) -> None:
    code, out, _ = run(capsys, "--data-dir", str(cli_data), "search", "revenue", "--library", "lib")
    assert code == 0
    assert out.splitlines()[0].lstrip().startswith("1. [lib]") and "p.1" in out and "fused=" in out
    code, out, _ = run(capsys, "--data-dir", str(cli_data), "search", "nonexistentword", "--library", "lib")
    assert code == 0 and out.strip() == "no hits"


def test_libraries_list_create_delete(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = ("--data-dir", str(tmp_path))
    code, out, _ = run(capsys, *d, "libraries")
    assert code == 0 and out.startswith("no libraries")
    assert run(capsys, *d, "libraries", "--create", "one")[0] == 0
    code, out, _ = run(capsys, *d, "libraries")
    assert code == 0 and out.strip() == "one\t0 documents\t0 pages"
    code, _, err = run(capsys, *d, "libraries", "--create", "one")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "already exists" in err
    assert run(capsys, *d, "libraries", "--delete", "one")[0] == 0
    assert run(capsys, *d, "libraries")[1].startswith("no libraries")


def test_ingest_builds_search_indexes_after_a_bulk_load_only(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    """A CLI ingest that wrote at least a tenth of the library's pages optimizes it at the end;
    one that added a page to a big library says how to do it instead; --no-optimize does neither."""
    d = ("--data-dir", str(tmp_path))
    big, one, two = tmp_path / "big.pdf", tmp_path / "one.pdf", tmp_path / "two.pdf"
    big.write_bytes(pdfs.make_pdf([f"Page {i} of the annual report on revenue." for i in range(12)]))
    one.write_bytes(pdfs.make_pdf(["A one-page note on margins."]))
    two.write_bytes(pdfs.make_pdf(["Another note, on cash flow."]))
    code, _, err = run(capsys, *d, "ingest", str(big), "--library", "lib", "-q")
    assert code == 0 and "search indexes of 'lib' built in" in err and "(12 pages)" in err
    code, _, err = run(capsys, *d, "ingest", str(one), "--library", "lib", "-q")  # 1 of 13 pages: < 10%
    assert code == 0 and "built in" not in err
    assert "1 of its 13 pages are new" in err and "ragspine libraries --optimize lib" in err
    code, _, err = run(capsys, *d, "ingest", str(two), "--library", "lib", "-q", "--no-optimize")
    assert code == 0 and "search indexes" not in err
    code, out, _ = run(capsys, *d, "libraries", "--optimize", "lib")
    assert code == 0 and out.startswith("optimized library 'lib' in ")
    code, _, err = run(capsys, *d, "libraries", "--optimize", "nolib")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "nolib" in err


BAD_ARGS: list[tuple[str, list[str], str]] = [
    ("no-command", [], "command"),
    ("unknown-command", ["frobnicate"], "frobnicate"),
    ("search-without-library", ["search", "revenue"], "--library"),
    ("search-bad-filter", ["search", "revenue", "--library", "lib", "--filter", "bogus"], "FIELD OP VALUE"),
    ("search-bad-filter-op", ["search", "revenue", "--library", "lib", "--filter", "period like 2023"], "like"),
    ("search-unknown-filter-field", ["search", "revenue", "--library", "lib", "--filter", "colour eq red"],
     "colour"),
    ("search-unknown-library", ["search", "revenue", "--library", "nolib"], "nolib"),
    ("search-top-k-0", ["search", "revenue", "--library", "lib", "--top-k", "0"], "top_k"),
    ("search-top-k-not-int", ["search", "revenue", "--library", "lib", "--top-k", "ten"], "top-k"),
    ("search-bad-mode", ["search", "revenue", "--library", "lib", "--mode", "nope"], "mode"),
    ("search-vector-mode", ["search", "revenue", "--library", "lib", "--mode", "vector"], "vector"),
    ("search-empty-query", ["search", "", "--library", "lib"], "empty"),
    ("search-control-chars", ["search", "rev\x01enue", "--library", "lib"], "control"),
    ("ingest-missing-file", ["ingest", "no-such.pdf", "--library", "lib"], "no-such.pdf"),
    ("ingest-without-library", ["ingest", "x.pdf"], "--library"),
    ("ingest-bad-library-name", ["ingest", "{pdf}", "--library", "Bad Name"], "Bad Name"),
    ("ingest-bad-meta", ["ingest", "{pdf}", "--library", "lib", "--meta", "nokey"], "KEY=VALUE"),
    ("ingest-zero-jobs", ["ingest", "{pdf}", "--library", "lib", "--jobs", "0"], "at least 1"),
    ("ingest-jobs-not-int", ["ingest", "{pdf}", "--library", "lib", "--jobs", "two"], "whole number"),
    ("libraries-delete-unknown", ["libraries", "--delete", "nolib"], "nolib"),
    ("libraries-create-and-delete", ["libraries", "--create", "a", "--delete", "b"], "not allowed"),
]


@pytest.mark.parametrize(("name", "argv", "needle"), BAD_ARGS, ids=[b[0] for b in BAD_ARGS])
def test_bad_arguments_give_one_line(capsys: pytest.CaptureFixture[str], cli_data: Path, pdf_dir: Path,
                                     name: str, argv: list[str], needle: str) -> None:
    argv = [a.replace("{pdf}", str(pdf_dir / "acme.pdf")) for a in argv]
    code, out, err = run(capsys, "--data-dir", str(cli_data), *argv)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ragspine"), lines[0]
    assert "error" in lines[0] and needle in lines[0], lines[0]
    assert "Traceback" not in err and "Traceback" not in out


def test_bad_setting_in_the_environment_is_one_line(capsys: pytest.CaptureFixture[str], cli_data: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSPINE_MAX_TOP_K", "lots")
    code, _, err = run(capsys, "--data-dir", str(cli_data), "search", "revenue", "--library", "lib")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "RAGSPINE_MAX_TOP_K" in err


@pytest.mark.parametrize("both", [("RAGSPINE_CONVEX_PASSAGE_WEIGHT", "RAGSPINE_CONVEX_PAGE_WEIGHT"),
                                  ("RAGSPINE_BM25_CHUNK_WEIGHT", "RAGSPINE_BM25_PAGE_WEIGHT")])
def test_a_rule_over_two_settings_is_one_line_naming_both(capsys: pytest.CaptureFixture[str], cli_data: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          both: tuple[str, str]) -> None:
    # a model-level rule has no single field to name (it once crashed the CLI with a traceback)
    for name in both:
        monkeypatch.setenv(name, "0")
    code, _, err = run(capsys, "--data-dir", str(cli_data), "search", "revenue", "--library", "lib")
    line = err.strip()
    assert code != 0 and len(line.splitlines()) == 1 and "Traceback" not in err
    assert line.startswith("ragspine: error: bad settings:") and "cannot both be 0" in line
    assert all(name.removeprefix("RAGSPINE_").lower() in line for name in both), line


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}, "RAGSPINE_DENSE_MODEL": "none"}


@pytest.mark.integration
def test_installed_entry_point(cli_data: Path, tmp_path: Path, pdf_dir: Path) -> None:
    """The real script: --version, an ingest with RAGSPINE_DATA_DIR, a JSON search, a bad call."""
    cmd = ragspine_command()
    r = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0 and r.stdout.startswith("ragspine ")
    env = {**_env(), "RAGSPINE_DATA_DIR": str(tmp_path / "d")}
    r = subprocess.run([*cmd, "ingest", str(pdf_dir / "acme.pdf"), "--library", "sub", "-q"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*cmd, "search", "cloud", "--library", "sub", "--json"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert [h["doc_id"] for h in json.loads(r.stdout)["hits"]] == ["acme"]
    r = subprocess.run([*cmd, "search", "cloud"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "--library" in r.stderr
