"""Maps the design card's top-level folders into the single ``ecomjax`` namespace."""

from setuptools import find_packages, setup

ROOTS = {
    "ecomjax": "ecomjax",
    "ecomjax.kernels": "kernels",
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
