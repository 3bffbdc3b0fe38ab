"""The private-name contract finds what it is meant to and nothing else."""

from __future__ import annotations

from tests.contracts.private_names import private_imports


def test_private_names_of_other_modules_are_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from ._own import _fine\n")
    (package / "sub" / "_own.py").write_text("_fine = 1\n")
    (package / "sub" / "user.py").write_text(
        "from pkg.other import _secret, public\nfrom . import _own\nfrom .user import _self\n"
        "from json import _private_of_a_library\nfrom pkg.other import (\n    ok,\n    _hidden,\n)\nimport pkg.other\n"
    )
    found = private_imports(tmp_path, "pkg.sub.user", ["pkg"])
    assert found == [
        "line 1: from pkg.other import _secret",
        "line 5: from pkg.other import _hidden",
    ]
    # a private submodule is its package's own: `from . import _own` inside pkg.sub is fine
    # a package's own __init__ importing its private submodule's private name is a private import too
    assert private_imports(tmp_path, "pkg.sub", ["pkg"]) == ["line 1: from pkg.sub._own import _fine"]
