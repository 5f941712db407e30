#!/usr/bin/python3
"""README.md stays short, and its typed examples run as written, twice.

README.md is for users first: it must stay under 250 lines, with its CLI
section ("## The CLI") starting before line 100; the long material lives in
docs/. That is checked first, on every build.

Every ```sh block of README.md is a command meant to be typed, on a fresh
clone after the quick start, from the repository's root: this test runs them
all, in order, in one bash session (so a `cd`, an `export` or a daemon
started in the background carries over to the next block), each block twice
in a row (a block cleans up what an earlier run of it made, or makes new
names, so that a reader can run it again), and fails on the first command
that fails. Blocks under another fence (```shell, ```console, ```json, ...)
are illustrations, long-running daemons or deployment lines, and are not
run. The quick start itself (deploy/demo.sh, deploy/test.sh) is under such a
fence: this test runs inside the second command.

The examples keep their files under build/example/, which this test empties
first. It needs the normal build in build/ (as the quick start makes it):
another build directory skips the examples (exit 77), saying why.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
FENCE = re.compile(r"^```(\S*)\s*$")
MAX_LINES = 250  # README.md has fewer lines than this
CLI_HEADING = "## The CLI"
MAX_CLI_LINE = 100  # and its CLI section starts before this line
RUNS = 2  # each ```sh block runs this many times in a row


def blocks(readme):
    """(language, first line number, text) of every fenced block."""
    found = []
    lang, start, lines = None, 0, []
    with open(readme, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            match = FENCE.match(line.rstrip("\n"))
            if lang is None and match:
                lang, start, lines = match.group(1), number + 1, []
            elif lang is not None and line.rstrip("\n") == "```":
                found.append((lang, start, "".join(lines)))
                lang = None
            elif lang is not None:
                lines.append(line)
    if lang is not None:
        raise SystemExit(f"README.md: the block at line {start} is not closed")
    return found


def commands(text):
    """The non-empty, non-comment lines of a block."""
    return [line for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def length_problems(readme):
    """What makes README.md too long for a reader to reach the CLI soon."""
    with open(readme, encoding="utf-8") as f:
        lines = f.read().splitlines()
    problems = []
    if len(lines) >= MAX_LINES:
        problems.append(
            f"README.md has {len(lines)} lines; keep it under {MAX_LINES} "
            "(move reference material to docs/ and link it)")
    cli = [n for n, line in enumerate(lines, 1) if line == CLI_HEADING]
    if not cli:
        problems.append(f"README.md has no line '{CLI_HEADING}'")
    elif cli[0] >= MAX_CLI_LINE:
        problems.append(
            f"README.md's '{CLI_HEADING}' is at line {cli[0]}; it must start "
            f"before line {MAX_CLI_LINE} (shorten what comes before it)")
    return problems


def main():
    source = os.environ.get(
        "RBLN_SOURCE_DIR",
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    readme = os.path.join(source, "README.md")
    problems = length_problems(readme)
    if problems:
        print("\n".join(problems))
        return 1
    all_blocks = blocks(readme)

    # The quick start: exactly two commands, the main job and the tests.
    first = blocks_after(all_blocks, readme, "## Quick start")[:1]
    if not first or [c.split()[0] for c in commands(first[0][2])] != [
            "deploy/demo.sh", "deploy/test.sh"]:
        print("README.md's quick start must be exactly two commands, "
              "deploy/demo.sh and deploy/test.sh; it is:\n" +
              (first[0][2] if first else "(no block)"))
        return 1

    typed = [(start, text) for lang, start, text in all_blocks if lang == "sh"]
    if len(typed) < 3:
        print(f"README.md has only {len(typed)} ```sh blocks: the examples "
              "meant to be typed are no longer marked as such")
        return 1
    bin_dir = os.environ.get("RBLN_BIN_DIR")
    expected = os.path.join(source, "build", "bin")
    if bin_dir and os.path.realpath(bin_dir) != os.path.realpath(expected):
        print(f"skipped: README.md's examples use build/bin/, and this build "
              f"is in {bin_dir}")
        return SKIP
    if not os.path.exists(os.path.join(expected, "rbln-artifactd")):
        print("skipped: build/bin/rbln-artifactd is missing (build in build/ "
              "first, as the quick start does)")
        return SKIP

    shutil.rmtree(os.path.join(source, "build", "example"), ignore_errors=True)
    script = [
        "set -euo pipefail",
        # Background daemons the examples started end with the session.
        "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT",
    ]
    for start, text in typed:
        for run in range(1, RUNS + 1):
            script.append(
                f"echo '>>> README.md line {start}, run {run}' >&2")
            script.append(text)
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write("\n".join(script) + "\n")
        path = f.name
    env = dict(os.environ)
    for name in ("RBLN_ARTIFACTD_SOCKET", "RBLN_ARTIFACTD_ADDRESS",
                 "RBLN_ARTIFACTD_STORE"):
        env.pop(name, None)
    try:
        result = subprocess.run(["bash", "-x", path], cwd=source, env=env,
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=600,
                                check=False)
    finally:
        os.unlink(path)
    output = result.stdout.decode("utf-8", "replace")
    print(output)
    if result.returncode != 0:
        print(f"FAILED: a README.md command exited {result.returncode} (the "
              "last '>>> README.md line N, run R' above names its block and "
              "whether it failed the first time or when run again)")
        return 1
    print(f"ok: {len(typed)} README.md blocks ran as written, each "
          f"{RUNS} times in a row")
    return 0


def blocks_after(all_blocks, readme, heading):
    """The blocks that start after the line `heading`."""
    with open(readme, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.rstrip("\n") == heading:
                return [b for b in all_blocks if b[1] > number]
    return []


if __name__ == "__main__":
    sys.exit(main())
