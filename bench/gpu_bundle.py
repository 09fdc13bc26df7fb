"""What a device lease needs beside the repository, in one ignored folder: ``.gpu/``.

A device machine (docs/measured.md, "GPU anchors") has torch, transformers and most of the
scientific stack, but not ragspine's server packages (pydantic, PyMuPDF, Qdrant Edge, FastAPI,
the MCP SDK, colpali-engine...), cannot reach a package index, and sees the checkout only: not
``../shared/data``. Everything travels in one call, 64 MiB at most, with the working tree. So,
here, before the lease::

    .venv/bin/python bench/gpu_bundle.py            # wheels and a page sample into .gpu/
    .venv/bin/python bench/gpu_bundle.py --ocr --limit-mib 50   # also the OCR packages, and room
                                                                # for an OCR record (below)

1. ``.gpu/wheels/``: CPython 3.12 manylinux wheels of the packages ``ragspine[server]`` and
   colpali-engine need, at the versions installed here (the ones the tests pass with), less
   those the device image already has (``bench/gpu_image_packages.txt``). OpenVINO never
   travels (its wheel alone is most of the limit; OCR there runs on torch or onnxruntime), nor
   ``opencv-python`` (the image's ``opencv-python-headless`` is the same ``cv2``).
2. ``.gpu/data/``: ``documents/`` holds the first ``--pages-per-doc`` pages of each dataset PDF,
   in name order, while they fit what is left of the limit, and ``queries.jsonl`` the dataset's
   questions. ``bench/encode.py`` cycles the pages it renders, so a sample of 120 pages still
   times 256. The room left is measured on the working tree as it is now: build the bundle just
   before the lease.

For OCR on the GPU, ``bench/ocr_device.py record .gpu/ocr`` afterwards writes the images OCR
reads into the room ``--limit-mib`` left, and ``bench/gpu_checks.sh $OUT .gpu/data .gpu/ocr``
reads them. Then one call does it all: ``bash bench/gpu_checks.sh $OUT`` with ``.gpu`` carried; the script
installs the wheels the device lacks (``python3 bench/gpu_bundle.py missing .gpu/wheels``, which
needs the standard library alone) and reads ``.gpu/data``. The folder is git-ignored: the
dataset's pages never enter the project.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
IMAGE_LIST = Path(__file__).with_name("gpu_image_packages.txt")
#: What one device call carries: the working tree and the carried paths together.
TRAVEL_LIMIT_MIB = 64.0
#: Packages only OCR needs: left behind unless ``--ocr`` (the GPU table runs with OCR off).
#: wordninja is not among them: its word list also corrects misspelt query words.
OCR_ONLY = frozenset({"rapidocr-onnxruntime", "pyclipper", "shapely", "onnx2torch"})
#: Never carried. openvino: ~40 MB, the OCR engines fall back to onnxruntime or torch without it
#: (and its telemetry package with it); opencv-python: the image's headless build provides cv2.
NEVER = frozenset({"openvino", "openvino-telemetry", "opencv-python", "ragspine"})
#: The device's interpreter (KINDS.md: Python 3.12.3, x86-64).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


def canonical(name: str) -> str:
    """PEP 503's normalised project name: ``Pydantic_Core`` and ``pydantic-core`` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_project(path: Path) -> str:
    """The project a wheel file installs, from its name (``pydantic_core-2.50.5-cp312-...``)."""
    return canonical(path.name.split("-", 1)[0])


def missing(wheel_dir: Path) -> list[Path]:
    """The wheels in ``wheel_dir`` whose project this interpreter does not have installed: what
    the device must install. A project the image already has keeps the image's version (torch's
    neighbours are built against it). Standard library only: it runs before any wheel is in."""
    out = []
    for whl in sorted(wheel_dir.glob("*.whl")):
        try:
            md.distribution(wheel_project(whl))
        except md.PackageNotFoundError:
            out.append(whl)
    return out


def image_packages(path: Path = IMAGE_LIST) -> frozenset[str]:
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text(encoding="utf-8").splitlines())
    return frozenset(canonical(ln) for ln in lines if ln)


def closure(roots: list[tuple[str, tuple[str, ...]]], python: str = "3.12") -> dict[str, str]:
    """Every project the ``roots`` (project, extras) need on Linux x86-64 under ``python``,
    transitively, with the version installed here: ``{canonical name: version}``. Read from the
    installed distributions' metadata (what the tests ran with), so no resolver and no index."""
    from packaging.requirements import Requirement

    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    found: dict[str, str] = {}
    done: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(canonical(n), tuple(sorted(e))) for n, e in roots]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(f"{name} is needed but not installed here: run `make setup-dev` first")
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            wanted = req.marker is None or any(
                req.marker.evaluate({**env, "extra": e}) for e in ("", *extras))
            if wanted:
                todo.append((canonical(req.name), tuple(sorted(req.extras))))
    return found


def to_carry(found: dict[str, str], on_image: frozenset[str], ocr: bool) -> dict[str, str]:
    """What of ``found`` must travel: not on the image, never the excluded, OCR's only with ``ocr``."""
    return {n: v for n, v in sorted(found.items())
            if n not in on_image and n not in NEVER and (ocr or n not in OCR_ONLY)}


def download(pins: dict[str, str], dest: Path, python: str) -> list[str]:
    """The wheels of ``pins`` for the device into ``dest``. A project published as a source
    archive alone (wordninja) is built into a wheel here, once it is known to be pure Python (a
    ``py3-none-any`` wheel installs on any CPython 3). Returns the projects built."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    todo, built = dict(pins), []
    while todo:
        r = subprocess.run(cmd + [f"{n}=={v}" for n, v in todo.items()], capture_output=True, text=True)
        if not r.returncode:
            return built
        nowheel = re.search(r"No matching distribution found for ([A-Za-z0-9_.-]+)==", r.stderr)
        if nowheel is None or canonical(nowheel.group(1)) not in todo:
            raise SystemExit(f"pip download failed: {r.stderr.strip().splitlines()[-1:]}")
        name = canonical(nowheel.group(1))
        w = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest),
                            f"{name}=={todo[name]}"], capture_output=True, text=True)
        made = [p for p in dest.glob("*.whl") if wheel_project(p) == name]
        if w.returncode or not made or not made[0].name.endswith("-py3-none-any.whl"):
            for p in made:
                p.unlink()
            raise SystemExit(f"{name}=={todo[name]} has no wheel for CPython {python} on Linux x86-64 "
                             "and does not build as pure Python here")
        built.append(name)
        del todo[name]
    return built


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree a device call sends: tracked and untracked-not-ignored files."""
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=root, capture_output=True, check=True)
    return sum((root / p).stat().st_size for p in r.stdout.decode().split("\0")
               if p and (root / p).is_file())


def sample_pdfs(src: Path, dest: Path, pages_per_doc: int, budget: int) -> tuple[int, int, list[str]]:
    """The first ``pages_per_doc`` pages of each PDF under ``src`` (name order), saved compactly
    to ``dest`` while the total stays within ``budget`` bytes. Returns (files, pages, skipped):
    a file that does not open (corrupt, encrypted) or would pass the budget is skipped, named."""
    import pymupdf

    dest.mkdir(parents=True, exist_ok=True)
    used = files = pages = 0
    skipped = []
    for pdf in sorted(src.glob("*.pdf")):
        try:
            with pymupdf.open(pdf) as doc:
                if doc.needs_pass:
                    raise ValueError("encrypted")
                part = pymupdf.open()
                part.insert_pdf(doc, from_page=0, to_page=min(pages_per_doc, doc.page_count) - 1)
                data = part.tobytes(garbage=4, deflate=True)
                n = part.page_count
        except Exception as exc:  # a sample, not an ingest: say which file and go on
            skipped.append(f"{pdf.name} ({type(exc).__name__}: {exc})")
            continue
        if used + len(data) > budget:
            skipped.append(f"{pdf.name} (over the budget)")
            continue
        (dest / pdf.name).write_bytes(data)
        used += len(data)
        files += 1
        pages += n
    return files, pages, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    m = sub.add_parser("missing", help="print the wheels in DIR whose project is not installed")
    m.add_argument("dir", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="documents/*.pdf and queries.jsonl")
    ap.add_argument("--pages-per-doc", type=int, default=8)
    ap.add_argument("--ocr", action="store_true", help="also the packages OCR needs")
    ap.add_argument("--python", default="3.12", help="the device's Python (default 3.12)")
    ap.add_argument("--limit-mib", type=float, default=TRAVEL_LIMIT_MIB)
    ap.add_argument("--margin-mib", type=float, default=1.0, help="left free under the limit")
    args = ap.parse_args(argv)
    if args.cmd == "missing":
        print(" ".join(str(p) for p in missing(args.dir)))
        return 0

    found = closure([("ragspine", ("server",)), ("colpali-engine", ())], args.python)
    pins = to_carry(found, image_packages(), args.ocr)
    final, args.out = args.out, args.out.with_name(args.out.name + ".new")  # the old one stays until done
    if args.out.exists():
        shutil.rmtree(args.out)
    wheels = args.out / "wheels"
    built = download(pins, wheels, args.python)
    wheel_bytes = sum(p.stat().st_size for p in wheels.iterdir())
    limit = int(args.limit_mib * 2**20)
    left = limit - int(args.margin_mib * 2**20) - tree_bytes() - wheel_bytes
    queries = args.data / "queries.jsonl"
    data = args.out / "data"
    data.mkdir(parents=True)
    if queries.is_file():
        shutil.copyfile(queries, data / "queries.jsonl")
        left -= queries.stat().st_size
    if left <= 0:
        raise SystemExit(f"the wheels and the working tree already pass {args.limit_mib} MiB: "
                         f"{wheel_bytes / 2**20:.1f} MiB of wheels ({len(pins)} projects)")
    src = args.data / "documents" if (args.data / "documents").is_dir() else args.data
    if not any(src.glob("*.pdf")):
        raise SystemExit(f"no PDF under {src}: --data names a folder of PDFs (or one with documents/)")
    files, pages, skipped = sample_pdfs(src, data / "documents", args.pages_per_doc, left)
    if not files:
        raise SystemExit(f"no PDF page fits the {left / 2**20:.1f} MiB left under the limit (from {src})")
    if final.exists():
        shutil.rmtree(final)
    args.out = args.out.rename(final)
    total = tree_bytes() + sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"{len(pins)} wheels, {wheel_bytes / 2**20:.1f} MiB: {', '.join(pins)}"
          + (f" ({', '.join(built)} built here from source)" if built else ""))
    print(f"{pages} pages from {files} PDFs (first {args.pages_per_doc} of each); "
          f"{len(skipped)} left out" + (f": {'; '.join(skipped[:5])}" if skipped else ""))
    print(f"travels: {total / 2**20:.1f} MiB of {args.limit_mib:g} (working tree and {args.out.name}/)")
    print(f"device run: command 'bash bench/gpu_checks.sh $OUT', carry ['{args.out.name}'], "
          "timeout_s 600 (BUDGET_S=560 inside it, the default)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
