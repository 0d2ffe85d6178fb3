"""Dependencies point down (DESIGN): the JAX core never imports the host bridge or the
trainer. ``setup.py`` maps the top-level ``llm_bridge/`` and ``train/`` folders to
``ecomjax.llm_bridge`` and ``ecomjax.train``, so both spellings count."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE_DIRS = (ROOT / "ecomjax",)
UPPER = ("ecomjax.llm_bridge", "ecomjax.train", "llm_bridge", "train")


def _upper(name: str) -> bool:
    return any(name == u or name.startswith(u + ".") for u in UPPER)


def _core_files() -> list[Path]:
    out = []
    for d in CORE_DIRS:
        for p in d.rglob("*.py"):
            rel = p.relative_to(ROOT).parts
            if p.name.endswith("_test.py") or p.name == "conftest.py":
                continue
            if rel[:2] in (("ecomjax", "llm_bridge"), ("ecomjax", "train")):
                continue  # the mapping's links, where a checkout has them
            out.append(p)
    return out


def test_no_core_module_imports_an_upper_layer():
    """Every import statement of the core, lazy ones inside functions included."""
    files = _core_files()
    assert len(files) > 40
    bad = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            bad += [f"{p.relative_to(ROOT)}:{node.lineno} {n}" for n in names if _upper(n)]
    assert not bad, bad


def test_importing_every_core_module_loads_no_upper_layer():
    """The same at run time: import each core module, then look at sys.modules."""
    mods = []
    for p in _core_files():
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods.append(".".join(parts))
    code = (
        "import importlib, sys\n"
        f"for m in {sorted(mods)!r}:\n"
        "    importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if m.startswith({UPPER[:2]!r}))\n"
        "print(len(sys.modules), bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]


def test_no_top_level_folder_shadows_an_installed_package():
    """pytest and ``python -m`` put the checkout on ``sys.path``, where a top-level package
    hides an installed one of the same name. A top-level ``kernels/`` once hid Hugging Face's
    ``kernels`` (required by transformers >= 5.25) and broke every transformers import."""
    import importlib.metadata

    ours = sorted(
        p.stem
        for p in ROOT.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name not in ("conftest.py", "setup.py"))
    )
    assert "ecomjax" in ours
    installed = importlib.metadata.packages_distributions()
    clashes = {n: installed[n] for n in ours if set(installed.get(n, [])) - {"ecomjax"}}
    assert not clashes, clashes
