"""Maps the design card's top-level folders into the single ``ecomjax`` namespace.

The device kernels live inside the core (``ecomjax/kernels/``), not at the top level: a
top-level ``kernels/`` shadows Hugging Face's ``kernels`` package (a dependency of
transformers >= 5.25) whenever the checkout is on ``sys.path`` (pytest, ``python -m``), and
transformers then fails to import (docs/design.md, "Where this differs from DESIGN.md")."""

from setuptools import find_packages, setup

ROOTS = {
    "ecomjax": "ecomjax",
    "ecomjax.llm_bridge": "llm_bridge",
    "ecomjax.train": "train",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for name, folder in ROOTS.items():
    package_dir[name] = folder
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
