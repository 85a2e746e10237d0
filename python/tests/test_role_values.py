"""The roles' two sides agree: every role the package defines has its test values, and the
op side's typical value (``Role.example``) is one the test side calls valid."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
import torch

from my_ops.ops import _roles
from op_table import SPECS, by_op
from role_values import ChoiceValues, FlagValues, registered_roles, values_of
from testing_utils import run_this_file

# Bases that no SPEC names: their subclasses are the roles.
_BASES = {_roles.Role, _roles.FollowsPrimary}
ROLE_CLASSES = sorted(
    (
        cls
        for _, cls in inspect.getmembers(_roles, inspect.isclass)
        if issubclass(cls, _roles.Role) and cls not in _BASES
    ),
    key=lambda cls: cls.__name__,
)


def test_the_package_defines_roles():
    # A guard on the discovery above: an empty list would pass the test below vacuously.
    names = {cls.__name__ for cls in ROLE_CLASSES}
    assert {"Primary", "LikePrimary", "LastDimVector", "NonNegativeFloat", "Choice"} <= names


@pytest.mark.parametrize("role_class", ROLE_CLASSES, ids=lambda cls: cls.__name__)
def test_every_role_has_its_own_test_values(role_class):
    # Its own class, not a base's: a new role inherits no tests it was not written for.
    assert role_class in registered_roles(), f"{role_class.__name__}: no values class"


def test_a_role_gets_its_nearest_values_class():
    assert type(values_of(_roles.Flag())) is FlagValues
    assert type(values_of(_roles.Choice(("a", "b")))) is ChoiceValues


def test_a_role_without_values_is_named():
    @dataclass(frozen=True)
    class Unlisted(_roles.Role):
        pass

    with pytest.raises(LookupError, match="Unlisted"):
        values_of(Unlisted())


@by_op()
def test_the_example_args_pass_the_checks_and_use_the_first_valid_scalars(spec):
    args = spec.example_args((3, 8), torch.float32, "cpu")
    spec.check_args(args)  # raises on an argument its role refuses
    for (name, role), value in zip(spec.arguments.items(), args, strict=True):
        if not role.is_tensor:
            assert value == values_of(role).valid_values()[0], name


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_argument_of_every_op_has_test_values(spec):
    for name, role in spec.arguments.items():
        assert values_of(role).role is role, name


if __name__ == "__main__":
    run_this_file(__file__)
