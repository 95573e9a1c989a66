"""Experiment families: the code that runs one point of an experiment definition.

One module per family, named after it: ``e1_fattree.py`` holds family ``e1-fattree``
(the ``experiment.family`` of a definition), a subclass of :class:`testbed.family.Family`
(the contract). :func:`names` lists them without importing any; :func:`load` imports
the one asked for, so ``testbed run`` and ``testbed report`` load only the family they
need (a module whose name starts with ``_`` is a helper, not a family). Adding a family
is adding its module here (plus its topology, analysis and definition files); nothing
else names it.
"""

from __future__ import annotations

import importlib
import pkgutil

from testbed.errors import DefinitionError, TestbedError
from testbed.family import Family


class FamilyError(TestbedError):
    """A family module breaks the contract (no or several Family classes, wrong name)."""


def names() -> list[str]:
    """Every family's name, from the module names of this package (nothing imported)."""
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(__path__)
                  if not m.ispkg and not m.name.startswith("_"))


def module_name(family: str) -> str:
    """``e1-fattree`` -> ``testbed.families.e1_fattree``."""
    return f"{__name__}.{family.replace('-', '_')}"


def load(name: object, key: str = "experiment.family", source: str = "") -> type[Family]:
    """The family class called ``name``. Raises DefinitionError (naming ``key`` and the
    known families) for an unknown name, FamilyError for a module that defines no
    Family subclass, several, or one whose ``name`` is not ``name``."""
    known = names()
    if not isinstance(name, str) or name not in known:
        raise DefinitionError(key, name, "one of " + ", ".join(known), source)
    module = importlib.import_module(module_name(name))
    found = [obj for obj in vars(module).values()
             if isinstance(obj, type) and issubclass(obj, Family) and obj.__module__ == module.__name__]
    if len(found) != 1:
        raise FamilyError(f"{module.__name__} defines {len(found)} Family subclasses "
                          f"({', '.join(c.__name__ for c in found) or 'none'}); it must define one")
    family = found[0]
    if getattr(family, "name", None) != name:
        raise FamilyError(f"{module.__name__}.{family.__name__}.name is {getattr(family, 'name', None)!r}; "
                          f"the module's name makes it {name!r}")
    return family
