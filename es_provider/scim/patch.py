"""Pure: a SCIM PATCH made explicit before scim2-models applies it (docs/identities.md, "Group members"), so that
a removal either removes what the identity provider named or is refused, and the provider learns which:

- a group member is matched by its `value` alone: `{"op": "remove", "path": "members", "value": [{"value": id,
  "display": …, "$ref": …, "type": …}]}` removes member `id` whatever else the object carries (scim2-models would
  match every key, and a `display` that differs from the stored one would remove nothing);
- a remove whose path filter, or whose value list, matches nothing is 400 `noTarget` (RFC 7644 §3.5.2.2 and
  §3.12): a value list must name current members only, a filter must select at least one value;
- on a group, an add or replace whose path filter matches no member (`members[value eq "X"].display`) is 400
  `noTarget`: scim2-models' `unmatched_path_filter = create` (kept for Entra ID's `emails[type eq "work"].value`
  on users) would otherwise add member X.

Each operation is checked against the resource as the operations before it left it (RFC 7644 §3.5.2). A member
removal is rewritten as the members that remain (one write, where scim2-models evaluates its filter entry by
entry); every other operation is passed on as it came.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scim2_models import InvalidValueException, NoTargetException, PatchOp, PatchOperation, Resource
from scim2_models.path import AttrPath, CompareOperator, Comparison, FilterNode, LogicalExpr, LogicalOperator, Path

GROUP_MEMBERS = "urn:ietf:params:scim:schemas:core:2.0:Group:members"
_ANY = ("*", "*")  # the key of an operation that may write any attribute


def _key(operation: PatchOperation[Any]) -> tuple[Any, str]:
    """The attribute an operation writes, as (model, field); _ANY without a path or for a whole extension."""
    path = operation.path
    if path is None or not str(path) or path.model is not None:
        return _ANY
    binding = path.resolve()
    return _ANY if binding is None else (binding.model, binding.field_name)


def _head(path: Path[Any]) -> Path[Any]:
    """The attribute a path operates on, its filter and sub-attribute left out: `members` of
    `members[value eq "x"].display`."""
    prefix = f"{path.schema}:" if path.schema else ""
    return type(path)(f"{prefix}{path.parts[0]}")


def _on_members(path: Path[Any]) -> bool:
    """Whether a path (with a filter and a sub-attribute or not) operates on a group's members."""
    binding = _head(path).resolve()
    return binding is not None and binding.urn == GROUP_MEMBERS


def _selection(path: Path[Any]) -> Path[Any]:
    """The entries a filtered path selects, its sub-attribute left out: `members[value eq "x"]` of
    `members[value eq "x"].display`."""
    return type(path)(f"{_head(path)}[{path.value_filter}]")


def _eq_values(node: FilterNode | None) -> set[str] | None:
    """The values of a filter that is `value eq "…"`, or an `or` of such; None for any other filter."""
    if isinstance(node, Comparison):
        attr = node.attr_path
        plain = attr.attr.lower() == "value" and attr.sub_attr is None and attr.uri is None
        return {node.value} if plain and node.op == CompareOperator.eq and isinstance(node.value, str) else None
    if isinstance(node, LogicalExpr) and node.op == LogicalOperator.or_:
        values: set[str] = set()
        for term in node.terms:
            found = _eq_values(term)
            if found is None:
                return None
            values |= found
        return values
    return None


def _selected(resource: Resource[Any], path: Path[Any]) -> list[Any]:
    """The entries of `resource` a filtered path selects (compared as scim2-models compares them)."""
    values = _eq_values(path.value_filter)
    if values is not None and _on_members(path):  # the common case, without scim2-models' per-entry evaluation
        return [member for member in getattr(resource, "members", None) or [] if member.value in values]
    found = _selection(path).get(resource, strict=False)
    if found is None:
        return []
    return list(found) if isinstance(found, list) else [found]


def _named_members(value: Any) -> list[str]:
    """The member values a remove's value list names (each object by its `value`, whatever else it carries)."""
    named: list[str] = []
    for entry in value if isinstance(value, list) else [value]:
        found = [item for key, item in entry.items() if key.lower() == "value"] if isinstance(entry, dict) else []
        if len(found) != 1 or not isinstance(found[0], str):
            raise InvalidValueException(detail="a member to remove is named by its value (a string)")
        named.append(found[0])
    return named


def _refuse(detail: str) -> NoTargetException:
    return NoTargetException(detail=detail[:200])


def _member_removal(resource: Resource[Any], operation: PatchOperation[Any]) -> list[Any]:
    """The members left by a removal of members (by value list or by filter); noTarget when it matches none."""
    members = list(getattr(resource, "members", None) or [])
    path = operation.path
    assert path is not None
    if operation.value is not None:
        named = _named_members(operation.value)
        present = {member.value for member in members}
        missing = [value for value in named if value not in present]
        if missing:  # every member named must be one: the provider must learn that a removal did not happen
            raise _refuse(f"no member has the value {missing[0][:80]!r}: nothing was removed")
        leaving = set(named)
        return [member for member in members if member.value not in leaving]
    selected = {id(member) for member in _selected(resource, path)}
    if not selected:
        raise _refuse(f"no member matches {str(path.value_filter)[:120]!r}: nothing was removed")
    return [member for member in members if id(member) not in selected]


def _checked(operation: PatchOperation[Any]) -> bool:
    """Whether the operation must select something (noTarget otherwise): a remove with a filter or a value list;
    on a group, any operation with a filter on its members."""
    path = operation.path
    if path is None or not str(path) or path.model is not None:
        return False
    if operation.op == PatchOperation.Op.remove:
        return path.value_filter is not None or operation.value is not None
    return path.value_filter is not None and _on_members(path)


def _value_selection(path: Path[Any], value: Any) -> Path[Any]:
    """The filter a remove's value list stands for (as scim2-models reads it: every key of an object compared)."""
    terms: list[FilterNode] = []
    for entry in value if isinstance(value, list) else [value]:
        if not isinstance(entry, dict) or not entry:
            raise InvalidValueException(detail="the value of a remove must be non-empty objects")
        comparisons = [Comparison(attr_path=AttrPath(attr=key), op=CompareOperator.eq, value=item)
                       for key, item in entry.items()]
        terms.append(comparisons[0] if len(comparisons) == 1 else
                     LogicalExpr(op=LogicalOperator.and_, terms=tuple(comparisons)))
    node = terms[0] if len(terms) == 1 else LogicalExpr(op=LogicalOperator.or_, terms=tuple(terms))
    return type(path)(f"{path}[{node}]")


@dataclass
class _Members:
    """A member removal rewritten: the members it leaves, dumped once, when the operations are final."""

    kept: list[Any]
    like: PatchOperation[Any]

    def operation(self) -> PatchOperation[Any]:
        if not self.kept:
            return type(self.like)(op="remove", path=GROUP_MEMBERS)
        return type(self.like)(op="replace", path=GROUP_MEMBERS, value=[member.model_dump() for member in self.kept])


def normalised(operations: Sequence[PatchOperation[Any]], resource: Resource[Any]) -> list[PatchOperation[Any]]:
    """The operations to apply to `resource` in place of `operations` (which they are, but for member removals,
    rewritten as the members they leave); raises NoTargetException for one that would select nothing.
    `resource` is not changed: the operations are applied to a copy as far as a later check needs them."""
    work, shared = resource, True  # the resource as the operations so far leave it; `shared`: not yet copied
    pending: list[PatchOperation[Any]] = []  # operations not yet reflected in `work`
    result: list[PatchOperation[Any] | _Members] = []
    for operation in operations:
        if not _checked(operation):
            pending.append(operation)
            result.append(operation)
            continue
        key = _key(operation)
        if any(_key(done) in (key, _ANY) for done in pending):  # an earlier operation changed what is checked
            if shared:
                work, shared = work.model_copy(deep=True), False
            PatchOp.__class_getitem__(type(work))(operations=pending).patch(work)
            pending = []
        path = operation.path
        assert path is not None
        if operation.op == PatchOperation.Op.remove and _on_members(path) and len(path.parts) == 1:
            kept = _member_removal(work, operation)
            work = work.model_copy(update={"members": kept or None})
            last = result[-1] if result else None
            if isinstance(last, _Members):
                last.kept = kept  # removals in a row: one write of what they all leave
            else:
                result.append(_Members(kept, operation))
            continue
        by_value = operation.op == PatchOperation.Op.remove and operation.value is not None
        selection = _value_selection(path, operation.value) if by_value else path
        if not _selected(work, selection):
            raise _refuse(f"no value of {path.parts[0]!r} matches the path filter: nothing was changed")
        pending.append(operation)
        result.append(operation)
    return [step.operation() if isinstance(step, _Members) else step for step in result]
