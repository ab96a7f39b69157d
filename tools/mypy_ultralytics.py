"""mypy plugin: `getattr(obj, "name", ...)` and `hasattr(obj, "name")` on an Ultralytics object are
checked against rig.yolo.contract like `obj.name` is.

rig's code sees Ultralytics' objects only as the contract's Protocols, so mypy fails on an attribute
the contract does not list; a literal name handed to getattr or hasattr would slip past that check.
Here it does not: the name must be a member of the object's Protocol (pyproject.toml's [tool.mypy]
loads this file).
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.nodes import StrExpr
from mypy.plugin import FunctionContext, Plugin
from mypy.types import Instance, Type, UnionType, get_proper_type

CONTRACT = "rig.yolo.contract."
CHECKED = frozenset({"builtins.getattr", "builtins.hasattr"})


def _instances(typ: Type) -> list[Instance]:
    proper = get_proper_type(typ)
    if isinstance(proper, UnionType):
        return [i for item in proper.items for i in _instances(item)]
    return [proper] if isinstance(proper, Instance) else []


def _check(ctx: FunctionContext) -> Type:
    if len(ctx.args) >= 2 and ctx.args[0] and ctx.args[1]:
        name_expr = ctx.args[1][0]
        if isinstance(name_expr, StrExpr):
            name = name_expr.value
            for inst in _instances(ctx.arg_types[0][0]):
                info = inst.type
                if not info.fullname.startswith(CONTRACT) or not info.is_protocol:
                    continue
                if not any(name in base.names for base in info.mro):
                    ctx.api.fail(
                        f'"{name}" is not in rig.yolo.contract.{info.name}: list it there (with the feature '
                        "that needs it) before reaching it",
                        ctx.context,
                    )
    return ctx.default_return_type


class UltralyticsContract(Plugin):
    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        return _check if fullname in CHECKED else None


def plugin(_version: str) -> type[Plugin]:
    return UltralyticsContract
