"""An import-linter contract type (`make lint` runs it): no module imports another module's private
name (`from evaluation.model_formats.models import timm_preprocessing`). A leading underscore says "this module's
own business"; a name another module needs is made public where it lives, or moved where both can
reach it. import-linter's own contracts see modules, not names, so this one reads each module's
`from ... import` statements itself."""

from __future__ import annotations

import ast
from pathlib import Path

from importlinter import Contract, ContractCheck, fields, output


def module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_module(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_imports(root: Path, module: str, containers: list[str]) -> list[str]:
    """`module`'s imports of another of our modules' private names, as `line N: from X import _y`."""
    path = module_file(root, module)
    if path is None:
        return []
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = imported_module(module, path.name == "__init__.py", node)
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            own_submodule = module.startswith(source + ".") and module_file(root, f"{source}.{alias.name}")
            if private and source != module and source.split(".")[0] in containers and not own_submodule:
                found.append(f"line {node.lineno}: from {source} import {alias.name}")
    return found


class PrivateNamesContract(Contract):
    type_name = "private_names"
    containers = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        root = Path.cwd()
        containers = list(self.containers)  # type: ignore[call-overload]
        broken = {}
        for module in sorted(graph.modules):
            if module.split(".")[0] in containers:
                found = private_imports(root, module, containers)
                if found:
                    broken[module] = found
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, found in check.metadata["broken"].items():
            for line in found:
                output.print_error(f"{module} {line}", bold=False)
        output.new_line()
