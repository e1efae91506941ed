"""Pure: the configuration reference (docs/configuration.md) from the settings models (Settings in
config/settings.py, the sections in cluster.py, serving.py, knowledge.py, identity.py and audit.py there) — every
section and field with its type, default, constraints and description (the field's docstring), and the rules checked
across fields (the models' validators' messages). Nothing here is written by hand twice: change a model, then run

    make config-reference        # or: python -m es_provider.offline.reference > docs/configuration.md

tests/unit/offline/test_reference.py fails while docs/configuration.md differs from what this prints.
"""

from __future__ import annotations

import ast
import enum
import inspect
import re
import sys
import textwrap
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from es_provider.config.settings import Settings

INTRO = """\
One TOML file (`es-provider serve --config FILE`; an example: [examples/config.toml](../examples/config.toml), an
annotated one in [operations.md](operations.md#configuration-file)), validated at start: a bad file stops the
service with the key named (`knowledge.0.top_k: Input should be less than or equal to 10`). Every table refuses
keys it does not know, and values are strict: no `"5"` for 5, no `true` for 1 (an integer is accepted where a
number is asked). Secrets are never in the file: each `secret_ref` / `key_ref` / `token_ref` names an environment
variable (or `NAME_FILE`, a file holding it); a missing one stops the service. `OPENSEARCH_URL` (or
`OPENSEARCH_URL_FILE`), when set, overrides `[opensearch] url`."""


def _flat(text: str | None) -> str:
    return " ".join((text or "").split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _text(text: str) -> str:
    """Prose for Markdown: outside `code`, a <word> would be taken for an HTML tag and a * for emphasis."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace("*", "\\*")
    return "`".join(parts)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)


def _toml(value: Any) -> str:
    """A default as it would be written in the file."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + "}"
    if isinstance(value, BaseModel):
        return _toml(value.model_dump())
    raise TypeError(f"no TOML form for {value!r}")  # pragma: no cover


def _constraints(metadata: list[Any], *, kind: str = "") -> list[str]:
    """annotated-types and pydantic metadata → short phrases."""
    found: list[str] = []
    low = high = None
    for item in metadata:
        if isinstance(item, FieldInfo):
            found += _constraints(item.metadata, kind=kind)
        elif isinstance(item, annotated_types.Gt):
            found.append(f"> {_number(item.gt)}")  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Ge):
            found.append(f"≥ {_number(item.ge)}")  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Lt):
            found.append(f"< {_number(item.lt)}")  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Le):
            found.append(f"≤ {_number(item.le)}")  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.MinLen):
            low = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            high = item.max_length
        elif getattr(item, "pattern", None) is not None:
            found.append(f"matches `{item.pattern}`")
    unit = "items" if kind == "list" else "characters"
    if low is not None and high is not None:
        found.insert(0, f"{low}–{high} {unit}")
    elif low is not None:
        found.insert(0, f"at least {low} {unit[:-1] if low == 1 else unit}")
    elif high is not None:
        found.insert(0, f"at most {high} {unit}")
    return found


_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type(annotation: Any) -> tuple[str, list[str]]:
    """A type in the file's words, and the constraints carried inside it (an item's length, a pattern)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metadata = get_args(annotation)
        name, inner = _type(base)
        return name, _constraints(metadata, kind="list" if get_origin(base) is list else "") + inner
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        rendered = [_type(arg) for arg in members]
        optional = len(members) < len(get_args(annotation))
        return (" or ".join(name for name, _ in rendered) + (" (optional)" if optional else ""),
                [c for _, group in rendered for c in group])
    if origin is Literal:
        return " \\| ".join(f"`{_toml(arg)}`" for arg in get_args(annotation)), []
    if origin is list:
        (item,) = get_args(annotation)
        name, inner = _type(item)
        return f"list of {name}", [f"each {c}" for c in inner]
    if origin is dict:
        key, item = get_args(annotation)
        name, inner = _type(item)
        keys = _type(key)[1]
        return f"table of {name}", [f"keys {c}" for c in keys] + [f"each {c}" for c in inner]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{_toml(member)}`" for member in annotation), []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table", []
    return _NAMES.get(annotation, getattr(annotation, "__name__", str(annotation))), []


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if value is None:
        return "unset"
    return f"`{_toml(value)}`"


def _row(name: str, field: FieldInfo, default: str) -> str:
    kind = "list" if get_origin(field.annotation) is list else ""
    type_name, inner = _type(field.annotation)
    limits = _constraints(field.metadata, kind=kind) + inner
    cells = [f"`{name}`", type_name, default, ", ".join(limits) or "—", _text(_flat(field.description))]
    return "| " + " | ".join(_cell(cell) if i in (0, 3, 4) else cell for i, cell in enumerate(cells)) + " |"


def _message(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) if isinstance(part, ast.Constant) else "…" for part in node.values)
    return None


def _rules(model: type[BaseModel]) -> list[str]:
    """What the model's validators refuse, in their own words."""
    found: list[str] = []
    for decorator in model.__pydantic_decorators__.model_validators.values():
        tree = ast.parse(textwrap.dedent(inspect.getsource(decorator.func)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                parts = node.exc.args[0]
                # "a" "b" concatenations are one Constant already; f-strings may be joined with implicit concatenation
                message = _message(parts)
                if message is not None:
                    found.append(message)
    return found


class _Doc:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.contents: list[tuple[int, str]] = []
        self.shown: set[type[BaseModel]] = set()

    def heading(self, level: int, title: str) -> None:
        self.contents.append((level, title))
        self.lines += ["#" * level + " " + title, ""]

    def paragraph(self, text: str) -> None:
        self.lines += [_text(text), ""]

    def table(self, model: type[BaseModel], instance: BaseModel | None = None) -> None:
        self.lines += [
            "| key | type | default | constraints | description |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, field in model.model_fields.items():
            default = f"`{_toml(getattr(instance, name))}`" if instance is not None else _default(field)
            if instance is not None and getattr(instance, name) is None:
                default = "unset"
            self.lines.append(_row(field.alias or name, field, default))
        self.lines.append("")
        rules = _rules(model)
        if rules:
            self.lines += ["Also refused:", ""] + [f"- {_text(rule)}" for rule in rules] + [""]


def _section(doc: _Doc, title: str, model: type[BaseModel], description: str | None, *, level: int = 2,
             instance: BaseModel | None = None, both: bool = False) -> None:
    """One table's section. The field's own docstring (`description`) is shown after the model's where it says more:
    which of a shared model's uses this is (a nested table), or how the tables repeat (`both`)."""
    doc.heading(level, f"`{title}`")
    texts = [_flat(model.__doc__)] if model.__doc__ else []
    if both or level > 2 or not texts:
        texts.append(_flat(description))
    for text in texts:
        if text:
            doc.paragraph(text)
    doc.table(model, instance)
    doc.shown.add(model)
    for name, field in model.model_fields.items():
        nested = _model_of(field.annotation)
        if nested is None:  # an optional table; one already shown ([opensearch] as [access_log.engine]) is not repeated
            nested = next((m for m in map(_model_of, get_args(field.annotation)) if m not in (None, *doc.shown)), None)
        if nested is not None:
            inner = getattr(instance, name) if instance is not None else field.default
            _section(doc, f"[{title.strip('[]')}.{name}]", nested, field.description, level=level + 1,
                     instance=inner if isinstance(inner, BaseModel) else None)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def reference(settings: type[BaseModel] = Settings) -> str:
    """The whole page, Markdown."""
    doc = _Doc()
    for name, field in settings.model_fields.items():
        annotation = field.annotation
        origin = get_origin(annotation)
        model = _model_of(annotation)
        if model is not None:
            _section(doc, f"[{name}]", model, field.description)
        elif origin is list and (model := _model_of(get_args(annotation)[0])) is not None:
            _section(doc, f"[[{name}]]", model, field.description, both=True)
        elif origin is dict and (model := _model_of(get_args(annotation)[1])) is not None:
            names = _type(get_args(annotation)[0])[1]
            _section(doc, f"[{name}.<name>]", model,
                     _flat(field.description) + (f" Names: {', '.join(names)}." if names else ""), both=True)
        else:
            doc.heading(2, f"`[{name}]`")
            type_name, inner = _type(annotation)
            doc.paragraph(f"{_flat(field.description)} Type: {type_name}"
                          + (f" ({', '.join(inner)})" if inner else "") + f"; default {_default(field)}.")
    rules = _rules(settings)
    if rules:
        doc.heading(2, "Across sections")
        doc.lines += ["Also refused:", ""] + [f"- {_text(rule)}" for rule in rules] + [""]
    head = ["# Configuration reference", "",
            "<!-- Generated from the models in es_provider/config/ by `make config-reference`"
            " (es_provider/offline/reference.py); do not edit by hand. -->", "", INTRO, ""]
    head += [f"{'  ' * (level - 2)}- [{title}](#{_slug(title)})" for level, title in doc.contents]
    return "\n".join([*head, "", *doc.lines]).rstrip("\n") + "\n"


def main() -> None:
    sys.stdout.write(reference())


if __name__ == "__main__":
    main()
