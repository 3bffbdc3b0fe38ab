"""What people read (pages, reports, cards) is written from jinja2 templates kept beside the module that
fills them (`<package>/templates/NAME.EXT.j2`); the module builds the context, the template the text.
HTML and XML templates autoescape."""

from __future__ import annotations

from functools import cache

import jinja2


@cache
def _environment(package: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=jinja2.select_autoescape(["html", "xml", "html.j2", "xml.j2"]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(package: str, name: str, **context: object) -> str:
    """`package/templates/name` filled with `context`; a name the template uses and the context lacks is an error."""
    return _environment(package).get_template(name).render(**context)
