"""Reference resolution core: ObjectRef parsing, scoped lookup, selectors and overrides.

Failures raise `RefFailure` (a code, a message, a suggestion); `bundles.validate` turns them
into diagnostics with the file and line of the reference, and `bundles.refs` into a
`BundleError` for the runtime. Lookup scopes, in order: the referring resource's own package,
the user's bundle, then any package (an ambiguous short ref is an error naming them all).
When the bundle's packages were found installed, a resource reaches only the packages its
bundle or package declares (`bundles.packages.requirements.reachable`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from bundles.diagnostics import FieldPath, closest
from bundles.kinds import SPEC_TYPES, Kind, Metadata, ObjectRef, RefItem, RefLike, Selector
from bundles.model import Bundle, Resource
from bundles.packages.installed import installed
from bundles.packages.requirements import compatible_range, reachable
from protocol.errors import ErrorCode

_OVERRIDABLE = {"spec", "metadata"}
_OVERRIDABLE_METADATA = {"labels", "annotations"}


class RefFailure(Exception):
    def __init__(
        self,
        code: ErrorCode,
        message: str,
        suggestion: str | None = None,
        at: FieldPath = (),
        target: tuple[Kind, str] | None = None,
        *,
        reported: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.suggestion = suggestion
        self.at = at
        """Where inside the reference the problem is (e.g. ("overrides", "spec"))."""
        self.target = target
        """For a missing resource: its kind and name."""
        self.reported = reported
        """Already said elsewhere (a declared package that is not installed is reported at its
        dependency): validation does not repeat it at every reference."""


def _kind(text: str, expected: Kind | None) -> Kind:
    try:
        kind = Kind(text)
    except ValueError:
        near = closest(text, [k.value for k in Kind])
        raise RefFailure(
            ErrorCode.E_CONFIG_INVALID_REF,
            f"unknown kind {text!r} in reference",
            f"did you mean {near[0]}?" if near else "kinds: " + ", ".join(k.value for k in Kind),
        ) from None
    if expected is not None and kind is not expected:
        raise RefFailure(
            ErrorCode.E_CONFIG_INVALID_REF,
            f"expected a reference to a {expected}, got {kind}",
            f"reference a {expected} here (e.g. {expected}/<name>)",
        )
    return kind


def parse_ref(value: str | ObjectRef, *, expected: Kind | None = None) -> ObjectRef:
    """`Kind/name` or `{kind, name, package}` -> ObjectRef with a known kind.

    Where the field fixes the kind (`expected`), a bare `name` is read as `<expected>/name`.
    """
    if isinstance(value, ObjectRef):
        if not value.name:
            raise RefFailure(ErrorCode.E_CONFIG_INVALID_REF, "reference has an empty name")
        _kind(value.kind, expected)
        return value
    parts = value.split("/")
    if len(parts) == 1 and expected is not None and value:
        return ObjectRef(kind=expected.value, name=value)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        example = f"{expected}/<name>" if expected else "Kind/name"
        raise RefFailure(
            ErrorCode.E_CONFIG_INVALID_REF,
            f"malformed reference {value!r}: the string form is exactly `Kind/name`",
            f"write it as {example}, or as {{kind, name, package}}",
        )
    _kind(parts[0], expected)
    return ObjectRef(kind=parts[0], name=parts[1])


def _label(res: Resource[Any]) -> str:
    return f"{res.package}:{res.kind}/{res.name}" if res.package else f"{res.kind}/{res.name}"


def _user_package(bundle: Bundle) -> str | None:
    pkg = bundle.package()
    return pkg.name if pkg is not None else None


def visible(bundle: Bundle, kind: Kind, from_package: str | None) -> list[Resource[Any]]:
    """Resources of `kind` a short reference can reach: own package, user, then packages.

    A name defined earlier in that order shadows the same name later (user resources win
    over package ones)."""
    order: list[Resource[Any]] = []
    scopes: list[str | None] = [from_package, None] if from_package else [None]
    pool = _within(bundle, kind, from_package)
    for scope in scopes:
        order += [r for r in pool if r.package == scope]
    order += [r for r in pool if r.package not in scopes]
    seen: set[str] = set()
    out = []
    for res in order:
        if res.name in seen and res.package not in scopes:
            continue
        if res.package in scopes:
            seen.add(res.name)
        out.append(res)
    return out


def _within(bundle: Bundle, kind: Kind, scope: str | None) -> list[Resource[Any]]:
    """The resources of `kind` that resources of `scope` may reach."""
    allowed = reachable(bundle, scope)
    return [
        r
        for r in bundle.resources
        if r.kind is kind and (allowed is None or r.package is None or r.package in allowed)
    ]


def _check_package(bundle: Bundle, package: str, scope: str | None) -> None:
    """A package named by a reference must be one its scope declares, and loaded."""
    allowed = reachable(bundle, scope)
    if allowed is None or package == _user_package(bundle):
        return
    if package not in allowed:
        owner = f"package {scope}" if scope else "this bundle"
        raise RefFailure(
            ErrorCode.E_PACKAGE_NOT_DECLARED,
            f"package {package} is not a dependency of {owner}",
            _declare_hint(bundle, package, scope),
        )
    if bundle.packages is not None and package not in bundle.packages:
        raise RefFailure(
            ErrorCode.E_PACKAGE_NOT_INSTALLED, f"package {package} is not loaded", reported=True
        )


def _declare_hint(bundle: Bundle, package: str, scope: str | None) -> str:
    found = installed().get(package)
    wanted = compatible_range(found.version) if found is not None else ">=1.0"
    entry = f'"{package}": "{wanted}"'
    if scope is not None:
        return f"package {scope} must list {entry} in its spec.dependencies"
    if bundle.package() is None:
        return f"start goondan.yaml with a Package document whose spec.dependencies has {{{entry}}}"
    return f"add {entry} to spec.dependencies of the Package document"


def lookup(bundle: Bundle, ref: ObjectRef, *, from_package: str | None = None) -> Resource[Any]:
    kind = Kind(ref.kind)
    package = None if ref.package and ref.package == _user_package(bundle) else ref.package
    if package is not None:
        _check_package(bundle, package, from_package)
    pool = _within(bundle, kind, from_package)
    same = [r for r in pool if r.name == ref.name]
    if ref.package is not None:
        found = [r for r in same if r.package == package]
        if found:
            return found[0]
        raise _not_found(pool, kind, ref.name, ref.package)
    scopes: list[str | None] = [from_package, None] if from_package else [None]
    for scope in scopes:
        found = [r for r in same if r.package == scope]
        if found:
            return found[0]
    by_package = {str(r.package): r for r in reversed(same)}
    if len(by_package) == 1:
        return next(iter(by_package.values()))
    if len(by_package) > 1:
        raise RefFailure(
            ErrorCode.E_CONFIG_INVALID_REF,
            f"{kind}/{ref.name} is ambiguous: defined by "
            + " and ".join(_label(by_package[p]) for p in sorted(by_package)),
            "add `package:` to the reference to choose one",
        )
    raise _not_found(pool, kind, ref.name, None)


def _not_found(pool: list[Resource[Any]], kind: Kind, name: str, package: str | None) -> RefFailure:
    if package is not None:
        pool = [r for r in pool if r.package == package] or pool
    names: dict[str, str] = {}
    for r in sorted(pool, key=lambda r: r.package is not None):  # user resources first
        names.setdefault(r.name, _label(r))
    near = [names[n] for n in closest(name, names)]
    where = f" in package {package}" if package else ""
    if near:
        hint = "closest existing: " + ", ".join(near)
    elif names:
        hint = "existing: " + ", ".join(sorted(names.values())[:8])
    else:
        hint = f"define a {kind} named {name!r} (no {kind} exists yet)"
    return RefFailure(
        ErrorCode.E_CONFIG_REF_NOT_FOUND,
        f"{kind}/{name} not found{where}",
        hint,
        target=(kind, name),
    )


def select(
    bundle: Bundle, selector: Selector, expected: Kind, *, from_package: str | None
) -> list[Resource[Any]]:
    """Resources of `expected` kind matching the selector's name and every label."""
    if selector.kind is not None:
        try:
            _kind(selector.kind, expected)
        except RefFailure as failure:
            failure.at = ("selector", "kind")
            raise
    if selector.package is not None:
        try:
            _check_package(bundle, selector.package, from_package)
        except RefFailure as failure:
            failure.at = ("selector", "package")
            raise
        pool = [r for r in bundle.resources if r.kind is expected and r.package == selector.package]
    else:
        pool = visible(bundle, expected, from_package)
    chosen = [
        r
        for r in pool
        if (selector.name is None or r.name == selector.name)
        and all(r.metadata.labels.get(k) == v for k, v in selector.match_labels.items())
    ]
    if not chosen:
        labels = ", ".join(f"{k}={v}" for k, v in selector.match_labels.items()) or "any"
        raise RefFailure(
            ErrorCode.E_CONFIG_REF_NOT_FOUND,
            f"selector matches no {expected} (name={selector.name or 'any'}, labels {labels})",
            "check the labels in metadata.labels of the resources you meant to select",
            ("selector",),
        )
    return chosen


def deep_merge(base: Any, overrides: Any) -> Any:
    """Objects merge recursively, scalars and lists are replaced, `null` removes the key."""
    if not isinstance(overrides, dict):
        return overrides
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = deep_merge(out.get(key), value)
    return out


def apply_overrides(res: Resource[Any], overrides: dict[str, Any]) -> Resource[Any]:
    """The effective resource: `overrides` deep-merged into the document, re-checked."""
    for key in overrides:
        if key not in _OVERRIDABLE:
            raise RefFailure(
                ErrorCode.E_CONFIG_SCHEMA_INVALID,
                f"overrides may only change spec and metadata labels/annotations, not {key!r}",
                "put the changes under overrides.spec",
                ("overrides", str(key)),
            )
    meta = overrides.get("metadata")
    if isinstance(meta, dict) and not set(meta) <= _OVERRIDABLE_METADATA:
        raise RefFailure(
            ErrorCode.E_CONFIG_SCHEMA_INVALID,
            "overrides.metadata may only change labels and annotations",
            "remove the other metadata fields from overrides",
            ("overrides", "metadata"),
        )
    merged = deep_merge(res.raw, overrides)
    try:
        spec = msgspec.convert(merged.get("spec") or {}, SPEC_TYPES[res.kind])
        metadata = msgspec.convert(merged.get("metadata"), Metadata)
    except msgspec.ValidationError as exc:
        raise RefFailure(
            ErrorCode.E_CONFIG_SCHEMA_INVALID,
            f"{_label(res)} with these overrides is invalid: {exc}",
            "fix the overrides so the merged resource matches its schema",
            ("overrides",),
        ) from None
    return dataclasses.replace(res, metadata=metadata, spec=spec, raw=merged)


def _item_form(item: RefItem) -> str:
    forms = [
        name
        for name, present in (
            ("ref", item.ref is not None),
            ("selector", item.selector is not None),
            ("inline", item.kind is not None or item.name is not None),
        )
        if present
    ]
    if len(forms) != 1:
        raise RefFailure(
            ErrorCode.E_CONFIG_INVALID_REF,
            "a reference item needs exactly one of `ref`, `selector`, or `kind` + `name`",
            "write `- ref: Tool/name`, `- selector: {matchLabels: ...}` or `- Tool/name`",
        )
    return forms[0]


def resolve_item(
    bundle: Bundle, item: RefLike, expected: Kind, *, from_package: str | None = None
) -> list[Resource[Any]]:
    """The resources one list entry stands for (a selector may stand for several)."""
    if isinstance(item, str):
        return [lookup(bundle, parse_ref(item, expected=expected), from_package=from_package)]
    form = _item_form(item)
    if form == "selector":
        assert item.selector is not None
        chosen = select(bundle, item.selector, expected, from_package=from_package)
    else:
        ref = _item_ref(item, form, expected)
        try:
            chosen = [lookup(bundle, ref, from_package=from_package)]
        except RefFailure as failure:
            failure.at = ("ref",) if form == "ref" else ()
            raise
    if item.overrides:
        chosen = [apply_overrides(r, item.overrides) for r in chosen]
    return chosen


def _item_ref(item: RefItem, form: str, expected: Kind) -> ObjectRef:
    at: FieldPath = ("ref",) if form == "ref" else ()
    try:
        if form == "ref":
            assert item.ref is not None
            ref = parse_ref(item.ref, expected=expected)
        else:
            if not item.kind or not item.name:
                raise RefFailure(
                    ErrorCode.E_CONFIG_INVALID_REF,
                    "an inline reference needs both `kind` and `name`",
                    f"write `{{kind: {expected}, name: <name>}}`",
                )
            ref = parse_ref(ObjectRef(kind=item.kind, name=item.name), expected=expected)
    except RefFailure as failure:
        failure.at = at + failure.at
        raise
    if item.package is not None and ref.package is None:
        ref = ObjectRef(kind=ref.kind, name=ref.name, package=item.package)
    return ref


def resolve_list(
    bundle: Bundle, items: list[RefLike], expected: Kind, *, from_package: str | None = None
) -> list[Resource[Any]]:
    """Every entry resolved, in order, without repeating a resource selected twice."""
    out: list[Resource[Any]] = []
    seen: set[str] = set()
    for item in items:
        for res in resolve_item(bundle, item, expected, from_package=from_package):
            if res.key not in seen:
                seen.add(res.key)
                out.append(res)
    return out
