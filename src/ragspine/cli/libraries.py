"""``ragspine libraries``: list, create (with a layout), delete, optimize and upgrade libraries,
list a library's documents, or give it dense vectors.

Only argparse at import time; the engine is imported when the command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from ragspine.cli.common import EXIT_USAGE, _fail, _positive_int, _settings


def add_libraries_command(sub: Any) -> None:
    s = sub.add_parser("libraries", help="list, create, delete, optimize libraries, or add dense vectors")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--create", metavar="NAME")
    g.add_argument("--delete", metavar="NAME")
    g.add_argument("--optimize", metavar="NAME",
                   help="build the library's search indexes after a bulk ingest (blocks searches while it runs)")
    g.add_argument("--upgrade", metavar="NAME",
                   help="bring a library written by an older ragspine to this one's format (atomic; "
                        "run it again if it was interrupted)")
    g.add_argument("--add-dense", metavar="NAME",
                   help="give a library built without dense vectors those of RAGSPINE_DENSE_MODEL, from its "
                        "stored passage text (no PDF is parsed again; ingests into it wait meanwhile)")
    g.add_argument("--documents", metavar="NAME",
                   help="list a library's documents: id, pages, title, issuer, period and kind (from each "
                        "document's profile)")
    lay = s.add_argument_group("the layout of a library made with --create (default: RAGSPINE_SHARD_NUMBER and "
                               "the others, else the store's; on a Qdrant server page_full goes on disk)")
    lay.add_argument("--shards", type=_positive_int, metavar="N", help="shards (Qdrant server only)")
    lay.add_argument("--replicas", type=_positive_int, metavar="N", help="copies of each shard (Qdrant server only)")
    lay.add_argument("--write-consistency", type=_positive_int, metavar="N",
                     help="copies a write waits for, at most --replicas (Qdrant server only)")
    lay.add_argument("--on-disk", metavar="FIELDS", help="vector fields whose originals stay on disk, comma-separated "
                     "(page_full, page_pooled, page_fde, dense_chunk)")
    lay.add_argument("--in-ram", metavar="FIELDS", help="vector fields kept in RAM, comma-separated (e.g. page_full "
                     "on a server with RAM to spare)")
    s.set_defaults(func=cmd_libraries)


def cmd_libraries(args: argparse.Namespace) -> int:
    from ragspine.catalog.formats import LibraryUnavailableError
    from ragspine.engine import Engine
    from ragspine.errors import RagspineError

    if args.create is None and any(v is not None for v in (args.shards, args.replicas, args.write_consistency,
                                                            args.on_disk, args.in_ram)):
        _fail("--shards, --replicas, --write-consistency, --on-disk and --in-ram go with --create NAME", EXIT_USAGE)
    engine = Engine(_settings(args))
    try:
        if args.create:
            rec = engine.create_library(args.create, shard_number=args.shards, replication_factor=args.replicas,
                                        write_consistency_factor=args.write_consistency,
                                        on_disk=_on_disk(args.on_disk, args.in_ram))
            print(f"created library '{args.create}'{_layout_words(rec.layout)}")
        elif args.delete:
            engine.delete_library(args.delete)
            print(f"deleted library '{args.delete}'")
        elif args.optimize:
            seconds = engine.optimize_library(args.optimize)
            print(f"optimized library '{args.optimize}' in {seconds:.1f} s")
        elif args.upgrade:
            up = engine.upgrade_library(args.upgrade)
            print(f"library '{up.library}' is in format {up.target}" if not up.steps else
                  f"library '{up.library}': format {up.source} -> {up.target} ({'; '.join(up.steps)})")
        elif args.documents:
            docs = engine.documents(args.documents)
            if not docs:
                print(f"library '{args.documents}' has no documents")
            for line in document_lines(docs):
                print(line)
        elif args.add_dense:
            from tqdm import tqdm

            bars: list[Any] = []  # made at the first progress: an error before it prints one line

            def progress(done: int, total: int) -> None:
                if not bars:
                    bars.append(tqdm(total=total, desc="dense vectors", unit="passage", leave=False))
                bars[0].update(done - bars[0].n)

            try:
                r = engine.add_dense(args.add_dense, progress)
            finally:
                for bar in bars:
                    bar.close()
            owed = f"; {r.passages} passages its dense phases still owed encoded" if r.passages else ""
            print(f"library '{r.library}' already has dense vectors of {r.model}{owed}" if r.already else
                  f"library '{r.library}': {r.passages} passages encoded with {r.model} in {r.seconds:.1f} s; "
                  "its searches now use the dense channel")
        else:
            names = engine.list_libraries()
            if not names:
                print("no libraries (create one with: ragspine libraries --create NAME)")
            for name in names:
                try:
                    docs = engine.documents(name)
                except LibraryUnavailableError as exc:
                    print(f"{name}\t{exc.detail}")
                    continue
                pages = sum(d["pages_indexed"] or 0 for d in docs)
                owed = {s: sum(1 for d in docs if d["ocr"] == s) for s in ("pending", "failed")}
                ocr = "".join(f"\tOCR {s}: {n} documents" for s, n in owed.items() if n)
                dense = sum(1 for d in docs if d["dense"] == "pending")
                ocr += f"\tdense vectors pending: {dense} documents (--add-dense finishes them)" if dense else ""
                print(f"{name}\t{len(docs)} documents\t{pages} pages{ocr}")
    except RagspineError as exc:
        _fail(exc.detail)
    finally:
        engine.close()
    return 0


def document_lines(docs: list[dict[str, Any]]) -> list[str]:
    """One tab-separated line per document: id, pages indexed, title, issuer, period, kind (from
    its profile; ``-`` where it has none, as a document indexed before profiles existed)."""
    out = []
    for d in docs:
        p = d.get("profile") or {}
        cells = [d["doc_id"], f"{d.get('pages_indexed') or 0} pages", p.get("title") or d.get("title"),
                 p.get("issuer"), p.get("period"), p.get("doc_type")]
        out.append("\t".join(str(c) if c not in (None, "") else "-" for c in cells))
    return out


def _on_disk(on: str | None, ram: str | None) -> dict[str, bool] | None:
    """``--on-disk a,b --in-ram c`` as the layout's ``on_disk`` map (None: the defaults)."""
    if on is None and ram is None:
        return None
    out: dict[str, bool] = {}
    for names, value in ((on, True), (ram, False)):
        for n in (x.strip() for x in (names or "").split(",")):
            if n:
                if n in out and out[n] != value:
                    _fail(f"vector field '{n}' is given both --on-disk and --in-ram", EXIT_USAGE)
                out[n] = value
    return out


def _layout_words(layout: dict[str, Any]) -> str:
    parts = [f"{k.replace('_', ' ')} {v}" for k in ("shard_number", "replication_factor", "write_consistency_factor")
             if (v := layout.get(k)) is not None]
    disk = sorted(f for f, v in (layout.get("on_disk") or {}).items() if v)
    if disk:
        parts.append(f"on disk: {', '.join(disk)}")
    return f" ({'; '.join(parts)})" if parts else ""
