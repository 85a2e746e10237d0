"""The deploy tests' shared fixtures and helpers (deploy/testing/fixtures.py), for this folder."""

from deploy.testing.fixtures import *  # noqa: F403
