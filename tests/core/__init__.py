"""Tests of cuflow.core, one file per module (a package: basenames repeat in tests/memory/)."""
