"""Package layout only (metadata lives in pyproject.toml).

The Hydra configs are edited in the clone's top-level ``conf/`` and shipped inside the wheel as the
data-only package ``kgreason.conf`` (``package_dir`` maps it onto ``conf/``): one source of truth,
no copies. ``kgreason.paths.config_dir`` picks the clone's ``conf/`` or the packaged copy. Each
config group directory is listed as a (data-only) subpackage so setuptools ships it explicitly;
``conf/local/`` (git-ignored machine settings, possibly with endpoints) never ships.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent
conf_packages = ["kgreason.conf"] + sorted(
    "kgreason.conf." + ".".join(d.relative_to(HERE / "conf").parts)
    for d in (HERE / "conf").rglob("*")
    if d.is_dir() and "local" not in d.relative_to(HERE / "conf").parts and not d.name.startswith((".", "_"))
)

setup(
    # namespace discovery also lists the data-only folders (reasoners/prompts/*, judges/rubrics),
    # which setuptools otherwise warns it may stop shipping
    packages=find_namespace_packages(include=["kgreason", "kgreason.*"],
                                     exclude=["kgreason.conf", "kgreason.conf.*", "*.__pycache__"]) + conf_packages,
    package_dir={"kgreason.conf": "conf"},
)
