"""GPU-free: the package's structure.  Imports run one way (no cycles, read from the source with
``ast``, function-level imports included), no module outside the kernels grows past what a reader
can hold in mind, the selection imports nothing above it, and nothing in the repository points to
files outside it."""

import ast
import gzip
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "tilegemm"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in the file)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            deps |= {d for d in found if d in mods and d not in (name, "tilegemm")}
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module that reaches itself, with one path back to it."""
    out = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    out.append(path + [start])
                    stack = []
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return out


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"], ["b", "c", "a", "b"],
                                                                         ["c", "a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_imports_run_one_way():
    graph = import_graph()
    assert len(graph) > 20, "the graph must see the package"
    assert graph["tilegemm.api"] >= {"tilegemm.plan", "tilegemm.dispatch", "tilegemm.fastpath"}
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def _above(graph, start) -> set[str]:
    """Every module ``start`` imports, directly or not."""
    seen, todo = set(), [start]
    while todo:
        for d in graph[todo.pop()]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_layers():
    graph = import_graph()
    below_selection = _above(graph, "tilegemm.selection")
    for high in ("tilegemm.autotune", "tilegemm.bench", "tilegemm.api", "tilegemm.dispatch", "tilegemm.cli",
                 "tilegemm.timing"):
        assert high not in below_selection, f"the selection must not import {high}"
    assert not any(m.startswith("tilegemm.instruments") for m in _above(graph, "tilegemm.autotune"))
    assert "tilegemm.runtime" not in _above(graph, "tilegemm.compiler")
    assert "tilegemm.api" not in _above(graph, "tilegemm.autotune")  # the tuner gets matmul handed in
    # the tables' entries are data, below the selection that reads them
    assert "tilegemm.entries" in below_selection and "tilegemm.selection" not in _above(graph, "tilegemm.entries")


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_is_too_long(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines; split it by job"


def test_the_api_fits_on_a_screen():
    assert len((PKG / "api.py").read_text().splitlines()) <= 100


def test_the_plan_needs_no_gpu():
    """plan.py reaches nothing that launches (it is tested on metadata alone), and no module imports
    CuPy or torch when it is imported (they load on first use, so the package imports without them)."""
    graph = import_graph()
    assert not _above(graph, "tilegemm.plan") & {"tilegemm.runtime", "tilegemm.launch", "tilegemm.dispatch",
                                                 "tilegemm.fastpath", "tilegemm.api"}
    for path in PKG.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:  # module level only
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] in ("cupy", "torch", "triton") for n in names), path


OUTSIDE = re.compile(r"\.\./shared|\bseeds?[ _-]?0\d\d\b|\bseed00\d|\bissues? #?\d|ANCHORS\.md|/work/", re.I)
# the GPU machine's folders: a results file records its command as it ran there, nothing else may name them
DEVICE = re.compile(r"/root/")


def _results_file(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return rel.parts[:2] == ("benchmarks", "results") and path.name.endswith((".json", ".json.gz"))


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], capture_output=True,
                         text=True)
    if out.returncode:
        pytest.skip("not a git checkout")
    return [ROOT / f for f in out.stdout.split() if (ROOT / f).is_file()]


def test_nothing_points_outside_the_repository():
    bad = []
    for path in _tracked():
        if path.suffix.lower() in (".png", ".sass", ".cubin") or path.name == "test_architecture.py":
            continue
        try:  # gzipped results files (calibrations) read as their text
            text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line) or (DEVICE.search(line) and not _results_file(path)):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not bad, "\n".join(bad[:20])


def test_the_outside_patterns_catch_what_they_name():
    for line in ("see ../shared/x", "seed 042", "issue #12", "ANCHORS.md", "/work/main", "--out /root/out"):
        assert OUTSIDE.search(line) or DEVICE.search(line), line
    assert not OUTSIDE.search("seed 399, --out OUT") and not DEVICE.search("--out $OUT")
    assert _results_file(ROOT / "benchmarks/results/experiments/x.json")
    assert _results_file(ROOT / "benchmarks/results/experiments/x.json.gz")
    assert not _results_file(ROOT / "benchmarks/results/experiments/README.md")
