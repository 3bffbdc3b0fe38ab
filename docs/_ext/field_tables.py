"""The `field-table` directive: a file format's field table, written from its model's JSON schema so the
docs cannot drift from the code that reads and writes the file.

    ```{field-table} builder.core.manifest:InfoRecord
    ```
"""

from __future__ import annotations

import importlib
import json

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective


def _type_of(schema: dict, definitions: dict) -> str:
    if "$ref" in schema:
        return f"object ({schema['$ref'].rsplit('/', 1)[-1]})"
    if "anyOf" in schema:
        return " or ".join(_type_of(part, definitions) for part in schema["anyOf"])
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in values)
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(schema.get('items', {}), definitions)}"
    bounds = [f"{word} {schema[key]}" for key, word in (("minimum", "≥"), ("maximum", "≤")) if key in schema]
    bounds += [f"{word} {schema[key]}" for key, word in (("exclusiveMinimum", ">"), ("exclusiveMaximum", "<"))
               if key in schema]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def field_rows(model: type) -> list[tuple[str, str, str, str]]:
    """(field, type, required or default, description) for each field of `model` and of the models it nests."""
    schema = model.model_json_schema()
    definitions = schema.get("$defs", {})
    rows: list[tuple[str, str, str, str]] = []

    def walk(part: dict, prefix: str) -> None:
        required = set(part.get("required", []))
        for name, field in part.get("properties", {}).items():
            dotted = f"{prefix}{name}"
            needed = "required" if name in required else f"default `{json.dumps(field.get('default'))}`"
            rows.append((dotted, _type_of(field, definitions), needed, field.get("description", "")))
            nested = field.get("$ref") or field.get("items", {}).get("$ref")
            if nested:
                walk(definitions[nested.rsplit("/", 1)[-1]], f"{dotted}{'[]' if 'items' in field else ''}.")

    walk(schema, "")
    return rows


class FieldTable(SphinxDirective):
    required_arguments = 1

    def run(self):
        module, _, name = self.arguments[0].partition(":")
        model = getattr(importlib.import_module(module), name)
        lines = ["| field | type | required | meaning |", "|---|---|---|---|"]
        lines += [
            "| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in row) + " |"
            for row in field_rows(model)
        ]
        holder = nodes.container()
        self.state.nested_parse(StringList(lines), self.content_offset, holder)
        return holder.children


def setup(app):
    app.add_directive("field-table", FieldTable)
    return {"parallel_read_safe": True}
