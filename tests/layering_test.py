"""The layers of the tree, every arrow pointing down (docs/architecture.md):
checks every #include of every C++ file in every folder against the parts
its folder may reach.

  core base (core/, core/os/)   the base only
  core/format/                  base, format
  core/device/                  base, device
  core/resize/                  base, format, device, resize
  core/store/                   everything in core/
  common/                       the core's base, common
  tools/                        core, common, tools
  server/                       core, common, server
  client/                       common, client, and of core only its pure
                                helpers: the budget grammar, artifact names,
                                text
  bench/                        core, common, tools, bench

Nothing in core/ or common/ includes gRPC; nothing but the server includes
the server, and nothing but the client the client. Unit tests (*_test.cc),
the test helpers in core/testing/ and tests/ sit above all of it and may use
any part. A folder holding C++ that is none of these fails the test: add it
here and to docs/architecture.md.
Run by ctest with the source directory as its argument.
"""

import os
import re
import sys
import unittest

ROOT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..")

CORE = {"base", "format", "device", "resize", "store"}
# The parts each part may include.
ALLOWED = {
    "base": {"base"},
    "format": {"base", "format"},
    "device": {"base", "device"},
    "resize": {"base", "format", "device", "resize"},
    "store": CORE,
    "common": {"base", "common"},
    "tools": CORE | {"common", "tools"},
    "server": CORE | {"common", "server"},
    "client": {"common", "client"},
    "bench": CORE | {"common", "tools", "bench"},
}
# Of core, the client includes only these pure helpers (DESIGN §10).
CLIENT_CORE = {"core/budget.h", "core/text.h", "core/store/artifact_name.h"}
# Folders whose files may include anything: tests and their helpers.
ABOVE_ALL = ("tests", "core/testing")
# Folders with no C++ of ours to check.
SKIPPED = (".git", "build", "deploy", "docs", "codecs", "cmake", "proto")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
GRPC = re.compile(r"^(grpc|grpcpp)/")


def part_of(rel):
    """The part of a path relative to the root ("core/format/x.h" ->
    "format", "core/os/env.h" -> "base", "server/x.h" -> "server"), or None
    for a path outside the project's parts."""
    parts = rel.split("/")
    if parts[0] == "core":
        if len(parts) == 2 or parts[1] == "os":
            return "base"
        return parts[1]
    if len(parts) > 1 and parts[0] in ALLOWED:
        return parts[0]
    return None


def may_include(mine, target):
    """Whether a file of part `mine` may include `target`."""
    theirs = part_of(target)
    if theirs is None or theirs == mine:  # absl, generated protos, itself
        return True
    if mine == "client" and target in CLIENT_CORE:
        return True
    return theirs in ALLOWED[mine]


class LayeringTest(unittest.TestCase):
    def test_every_include_points_down(self):
        checked = 0
        wrong = []
        unknown = set()
        for dirpath, dirnames, files in os.walk(ROOT):
            rel_dir = os.path.relpath(dirpath, ROOT)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames
                               if not d.startswith(SKIPPED)]
                continue
            if rel_dir.startswith(ABOVE_ALL):
                continue
            for name in files:
                if not name.endswith((".h", ".cc")) or name.endswith(
                        "_test.cc"):
                    continue
                rel = os.path.join(rel_dir, name)
                mine = part_of(rel)
                if mine not in ALLOWED:
                    unknown.add(rel_dir)
                    continue
                with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    checked += 1
                    if GRPC.match(target) and mine in CORE | {"common"}:
                        wrong.append(f"{rel} includes {target}")
                    elif not may_include(mine, target):
                        wrong.append(f"{rel} ({mine}) includes {target} "
                                     f"({part_of(target)})")
        self.assertEqual(sorted(unknown), [],
                         "folders that are no part: add them to "
                         "docs/architecture.md and to this test")
        self.assertGreater(checked, 300, "found too few includes to check")
        self.assertEqual(wrong, [], "includes that point up or out:\n" +
                         "\n".join(wrong))

    def test_the_rules_refuse_what_they_should(self):
        # The checker itself: a few includes that must be refused.
        for mine, target in (("base", "core/format/artifact.h"),
                             ("format", "core/device/dram.h"),
                             ("common", "core/store/store.h"),
                             ("client", "core/format/artifact.h"),
                             ("client", "server/auth.h"),
                             ("server", "client/flags.h"),
                             ("tools", "server/auth.h"),
                             ("format", "core/store/artifact_name.h")):
            self.assertFalse(may_include(mine, target),
                             f"{mine} may include {target}")
        for mine, target in (("client", "core/budget.h"),
                             ("server", "core/budget.h"),
                             ("base", "core/os/env.h"),
                             ("server", "common/version.h")):
            self.assertTrue(may_include(mine, target),
                            f"{mine} may not include {target}")


if __name__ == "__main__":
    unittest.main()
