"""Only what pyproject.toml cannot say: the repository's examples/ folder is installed as the
package data folder tkjit/examples (`tkjit demo` runs them from a regular install; a source
checkout and an editable install read examples/ itself). Everything else is in pyproject.toml."""
from setuptools import find_namespace_packages, setup

# namespace packages: tkjit.ir and others have no __init__.py
setup(packages=[*find_namespace_packages(include=["tkjit", "tkjit.*"]), "tkjit.examples"],
      package_dir={"tkjit.examples": "examples"})
