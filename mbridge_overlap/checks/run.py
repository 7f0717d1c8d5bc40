"""Rules for what happens once the job launches: setup, the first step, steady state (issue 17)."""

from __future__ import annotations
