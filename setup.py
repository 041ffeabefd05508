"""Package layout only (metadata lives in pyproject.toml).

The Hydra configs are edited in the clone's top-level ``conf/`` and shipped inside the wheel as the
data-only package ``kgreason.conf`` (``package_dir`` maps it onto ``conf/``): one source of truth,
no copies. ``kgreason.paths.config_dir`` picks the clone's ``conf/`` or the packaged copy.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["kgreason", "kgreason.*"]) + ["kgreason.conf"],
    package_dir={"kgreason.conf": "conf"},
)
