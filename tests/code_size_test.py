"""Sizes a reader can take in (issue 42; docs/architecture.md): outside the
tests, no C++ file over 800 physical lines, no function over 100 lines and
no `main` over 80, as clang-tidy's readability-function-size counts them
(lines including white space and comments, flag definitions too).

Runs clang-tidy on every translation unit of the build's
compile_commands.json that lies in the source tree and outside the tests,
with its header functions, in parallel. Run by ctest with the source and
build directories as its arguments.
"""

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import unittest

SOURCE, BUILD = (sys.argv.pop(1), sys.argv.pop(1)) if len(sys.argv) > 2 \
    else (os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
          "build")
SOURCE = os.path.realpath(SOURCE)

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
MAX_MAIN_LINES = 80
# The folders of C++ that is not a test.
CHECKED = ("core", "common", "server", "client", "tools", "bench", "proto")

WARNING = re.compile(r"^(.+):(\d+):\d+: warning: function '([^']+)' exceeds")
NOTE = re.compile(r"note: (\d+) lines including whitespace and comments")


def is_checked(path):
    """Whether `path` (absolute) is C++ of ours that is not a test."""
    rel = os.path.relpath(path, SOURCE)
    parts = rel.split(os.sep)
    return (parts[0] in CHECKED and not rel.endswith("_test.cc") and
            "testing" not in parts and not rel.startswith(".."))


def tidy(path):
    """[(file, line, function, lines)] over MAX_MAIN_LINES in `path`'s
    translation unit and the project's headers it includes."""
    done = subprocess.run(
        ["clang-tidy", "-p", BUILD, "--quiet",
         "--checks=-*,readability-function-size",
         "--header-filter=^" + re.escape(SOURCE) + "/(" + "|".join(CHECKED) +
         ")/",
         "--config={CheckOptions: [{key: readability-function-size."
         f"LineThreshold, value: {MAX_MAIN_LINES}}}]}}", path],
        capture_output=True, text=True, check=False)
    found = []
    pending = None
    for line in done.stdout.splitlines():
        warning = WARNING.match(line)
        if warning:
            pending = (warning.group(1), int(warning.group(2)),
                       warning.group(3))
            continue
        note = NOTE.search(line)
        if note and pending is not None:
            found.append(pending + (int(note.group(1)),))
            pending = None
    return found


class CodeSizeTest(unittest.TestCase):
    def test_no_file_over_800_lines(self):
        big = []
        for folder in CHECKED:
            for dirpath, _, files in os.walk(os.path.join(SOURCE, folder)):
                for name in files:
                    path = os.path.join(dirpath, name)
                    if not name.endswith((".h", ".cc")) or not is_checked(
                            path):
                        continue
                    with open(path, encoding="utf-8") as f:
                        lines = sum(1 for _ in f)
                    if lines > MAX_FILE_LINES:
                        big.append(f"{os.path.relpath(path, SOURCE)}: "
                                   f"{lines} lines")
        self.assertEqual(big, [], f"files over {MAX_FILE_LINES} lines: "
                         "split them along their seams")

    def test_no_function_over_100_lines_and_no_main_over_80(self):
        with open(os.path.join(BUILD, "compile_commands.json")) as f:
            units = sorted({os.path.realpath(entry["file"])
                            for entry in json.load(f)})
        units = [u for u in units if is_checked(u)]
        self.assertGreater(len(units), 40, "found too few sources to check")
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
            results = pool.map(tidy, units)
        over = set()
        for path, line, function, lines in (f for r in results for f in r):
            limit = MAX_MAIN_LINES if function == "main" else \
                MAX_FUNCTION_LINES
            if lines > limit:
                over.add(f"{os.path.relpath(path, SOURCE)}:{line}: "
                         f"{function}: {lines} lines (at most {limit})")
        self.assertEqual(sorted(over), [], "functions over their size: split "
                         "them along their steps")


if __name__ == "__main__":
    unittest.main()
