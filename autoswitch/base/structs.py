"""msgspec Structs built from caller data: lists and sets become the canonical tuple.

A request may be built from lists or sets (the servicer's protobuf repeated fields, a test's
literal); its canonical form, and the form its encoding decodes back to, holds tuples. msgspec
runs a Struct's ``__post_init__`` on every build and every decode, so only the fields whose type
admits a collection are looked at (found once per class): a list in any other field is refused
by the strict decode as its tuple would be.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import msgspec.inspect as mi
from msgspec.structs import force_setattr

_COLLECTIONS = (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType, mi.TupleType, mi.AnyType)


def _may_hold_collection(t: mi.Type) -> bool:
    if isinstance(t, mi.UnionType):
        return any(_may_hold_collection(x) for x in t.types)
    if isinstance(t, mi.Metadata):
        return _may_hold_collection(t.type)
    return isinstance(t, _COLLECTIONS)


@functools.cache
def collection_fields(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    """The fields of ``cls`` whose type admits a list, set or tuple."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return tuple(f.name for f in info.fields if _may_hold_collection(f.type))


def tuples_for_collections(obj: Any) -> None:
    """Each list of ``obj`` becomes a tuple, each set a sorted tuple (left as is if unsortable:
    the strict decode refuses mixed types)."""
    for name in collection_fields(type(obj)):
        v = getattr(obj, name)
        if isinstance(v, list):
            force_setattr(obj, name, tuple(v))
        elif isinstance(v, set | frozenset):
            try:
                force_setattr(obj, name, tuple(sorted(v)))
            except TypeError:
                pass
