"""Hostile input for diagnose's "settings the text names" (fuzzZ Z-1): a log of many short words, no cause in it.
Every word of a line holding '_' or '--' took a Python step (20,000 lines of 4,096 characters: 2.6 s before the
section, 104 s with it); the regex engine now passes over the words that cannot be a setting, and the section reads
at most MAX_CHARS characters, as many as standard input keeps. The time bound is generous (a slow, shared machine):
before the fix its first log took about 15 s and both about 40 s here."""

from __future__ import annotations

import time

from mbridge_overlap.diagnose import settings


def test_a_long_log_of_short_words_is_scanned_in_bounded_time(tmp_path):
    line = ("step_log " + "a " * 2100)[:4096]
    path = tmp_path / "words.log"
    path.write_text("overlap_grad_reduce=True made it hang\n" + (line + "\n") * 2500, encoding="utf-8")
    start = time.perf_counter()
    section = settings.named([str(path)], None)
    took = time.perf_counter() - start
    assert took < 10.0, took
    assert [e["keys"][0] for e in section["settings"]] == ["comm_overlap.overlap_grad_reduce"]
    assert section["lines_cut"] and section["lines_read"] <= settings.MAX_CHARS // settings.MAX_TEXT + 1


def test_lines_of_words_with_dots_or_underscores_stay_bounded(tmp_path):
    # (each word here passes the first test, a '_' or a '.' in it; none is a name of the vocabulary)
    shapes = ("a_ " * 1400, "we ddp.bucket_siSe=[" + "[x" * 2040, "x_y " + "a." * 2046)
    path = tmp_path / "shapes.log"
    path.write_text("".join((s[:4096] + "\n") * 400 for s in shapes), encoding="utf-8")
    start = time.perf_counter()
    section = settings.named([str(path)], None)
    assert time.perf_counter() - start < 10.0
    assert section is None
