"""The path -> document id rule, which files a sync sees, and sidecar metadata."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sync_kit import A_ID, B_ID, write_pdf, write_sidecar

from ragspine.catalog.libraries import check_doc_id
from ragspine.sync.files import doc_id_for, find_pdfs, meta_sha, scan


def h12(rel: str) -> str:
    return hashlib.sha256(rel.encode()).hexdigest()[:12]


@pytest.mark.parametrize(("rel", "want"), [
    ("report.pdf", "report.pdf"),                      # a valid id already: kept
    ("Report.PDF", "Report.PDF"),
    ("a/report.pdf", f"a_report-{h12('a/report.pdf')}.pdf"),
    ("b/report.pdf", f"b_report-{h12('b/report.pdf')}.pdf"),
    ("2023/Annual Report.pdf", f"2023_Annual-Report-{h12('2023/Annual Report.pdf')}.pdf"),
    ("年报/2023.pdf", f"2023-{h12('年报/2023.pdf')}.pdf"),   # leading non-ASCII run dropped
    ("年报.pdf", f"doc-{h12('年报.pdf')}.pdf"),            # nothing readable left
    ("..a.pdf", f"a-{h12('..a.pdf')}.pdf"),
    # A kept name never looks like a hashed id, so the two forms cannot meet.
    ("x-0123456789ab.pdf", f"x-0123456789ab-{h12('x-0123456789ab.pdf')}.pdf"),
])
def test_doc_id_rule(rel: str, want: str) -> None:
    assert doc_id_for(rel) == want
    assert check_doc_id(want) == want


def test_fixture_ids_are_the_rule() -> None:
    assert (doc_id_for("a/report.pdf"), doc_id_for("b/report.pdf")) == (A_ID, B_ID)


def test_long_paths_stay_within_128_characters() -> None:
    rel = "/".join(["deep" * 10] * 5) + ".pdf"
    got = doc_id_for(rel)
    assert len(got) == 128 and got.endswith(f"-{h12(rel)}.pdf") and check_doc_id(got) == got
    assert doc_id_for("a" * 124 + ".pdf") == "a" * 124 + ".pdf"  # 128: kept
    assert doc_id_for("a" * 125 + ".pdf") == "a" * 111 + f"-{h12('a' * 125 + '.pdf')}.pdf"


def test_find_pdfs_skips_hidden_and_other_files(tmp_path: Path) -> None:
    for rel in ("x.pdf", "Y.PDF", "sub/z.pdf", ".hidden.pdf", ".cache/w.pdf", "notes.txt", "x.pdf.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"%PDF-1.7")
    (tmp_path / "dangling.pdf").symlink_to(tmp_path / "nowhere.pdf")
    assert find_pdfs(tmp_path) == ["Y.PDF", "sub/z.pdf", "x.pdf"]


def test_sidecar_wins_field_by_field_and_bad_sidecars_fail_their_file_alone(tmp_path: Path) -> None:
    good = write_pdf(tmp_path / "good.pdf", "x")
    write_sidecar(good, {"title": "Good", "period": 2023})
    write_pdf(tmp_path / "plain.pdf", "y")
    for name, side in [("badjson.pdf", "{not json"), ("list.pdf", "[1, 2]"), ("docid.pdf", {"doc_id": "mine"}),
                       ("badfield.pdf", {"bad-name": 1}), ("badpages.pdf", {"page_sensitivity": {"0": "RESTRICTED"}})]:
        write_sidecar(write_pdf(tmp_path / name, "z"), side)
    files = {f.rel: f for f in scan(tmp_path, {"entity": "acme", "period": 2022})}
    assert files["good.pdf"].meta == {"entity": "acme", "period": 2023, "title": "Good"}
    assert files["good.pdf"].meta_sha == meta_sha({"entity": "acme", "period": 2023, "title": "Good"})
    assert files["plain.pdf"].meta == {"entity": "acme", "period": 2022} and files["plain.pdf"].error is None
    errors = {rel: f.error for rel, f in files.items() if f.error}
    assert sorted(errors) == ["badfield.pdf", "badjson.pdf", "badpages.pdf", "docid.pdf", "list.pdf"]
    assert errors["badjson.pdf"].startswith("sidecar badjson.pdf.json is not valid JSON: ")
    assert errors["list.pdf"] == "sidecar list.pdf.json must hold a JSON object of metadata fields, got list"
    assert errors["docid.pdf"] == "sidecar docid.pdf.json: doc_id is set by the file's path in a sync; remove it"
    assert errors["badfield.pdf"].startswith("sidecar badfield.pdf.json: metadata field name 'bad-name' is not allowed")
    assert errors["badpages.pdf"].startswith("sidecar badpages.pdf.json: metadata field 'page_sensitivity")


def test_two_paths_with_one_id_both_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_pdf(tmp_path / "a.pdf", "x")
    write_pdf(tmp_path / "b.pdf", "y")
    write_pdf(tmp_path / "c.pdf", "z")
    import ragspine.sync.files as files_mod

    monkeypatch.setattr(files_mod, "doc_id_for", lambda rel: "same.pdf" if rel in ("a.pdf", "b.pdf") else rel)
    got = {f.rel: f.error for f in scan(tmp_path)}
    assert got == {"a.pdf": "document id same.pdf is also that of b.pdf; rename one of them",
                   "b.pdf": "document id same.pdf is also that of a.pdf; rename one of them", "c.pdf": None}
