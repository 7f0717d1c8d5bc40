"""The JSON contract's version, carried as `schema_version` by every payload (references/schemas/ describes each).

Bumped when a key changes meaning or goes away; adding a key does not bump it."""

SCHEMA_VERSION = 2
