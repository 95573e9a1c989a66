"""Validation of names that reach the kernel or a command line.

Node names become parts of interface and namespace names, so they are short and made
of [a-z0-9] only: no shell metacharacters can ever reach a command, and the longest
root-namespace interface name (run token + node + port) stays within IFNAMSIZ (15).
"""

from __future__ import annotations

import re

from testbed.errors import DefinitionError

NODE_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,5}$")
EXPERIMENT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
IFNAMSIZ = 15


def check_node_name(name: str, key: str = "node") -> str:
    """Return ``name`` if it is a valid node name, else raise DefinitionError."""
    if not isinstance(name, str) or not NODE_NAME_RE.match(name):
        raise DefinitionError(key, name, "a node name: a lowercase letter then up to 5 of [a-z0-9]")
    return name


def check_experiment_name(name: str, key: str = "experiment.name") -> str:
    """Return ``name`` if it can be a results folder name, else raise DefinitionError."""
    if not isinstance(name, str) or not EXPERIMENT_NAME_RE.match(name):
        raise DefinitionError(key, name, "1-64 characters of [a-z0-9_.-], starting with [a-z0-9]")
    return name


def check_ifname(name: str) -> str:
    """Return ``name`` if it is a legal interface name of ours; ValueError otherwise."""
    if not re.match(r"^[a-z0-9][a-z0-9-]*$", name) or len(name) > IFNAMSIZ:
        raise ValueError(f"interface name {name!r} is not 1-{IFNAMSIZ} chars of [a-z0-9-]")
    return name
