"""core/ in layers, every arrow pointing down (docs/architecture.md): checks
every #include of every file under core/ against the layer it may reach.

  base (core/*)        the base only
  core/format/         base, format
  core/device/         base, device
  core/resize/         base, format, device, resize
  core/store/          everything in core/

and nothing in core/ includes gRPC, the server, the client or the tools.
Unit tests (*_test.cc) and the test helpers in core/testing/ sit above all
of it, and may use any layer and the synth tool.
Run by ctest with the source directory as its argument.
"""

import os
import re
import sys
import unittest

ROOT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..")

ALLOWED = {
    "base": {"base"},
    "format": {"base", "format"},
    "device": {"base", "device"},
    "resize": {"base", "format", "device", "resize"},
    "store": {"base", "format", "device", "resize", "store"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
FORBIDDEN = re.compile(r"^(grpc|grpcpp|server/|client/|tools/)")


def layer_of(rel):
    """The layer of a path relative to core/ ("format/x.h" -> "format")."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else "base"


class LayeringTest(unittest.TestCase):
    def test_every_include_points_down(self):
        core = os.path.join(ROOT, "core")
        checked = 0
        wrong = []
        for dirpath, _, files in os.walk(core):
            for name in files:
                if not name.endswith((".h", ".cc")) or name.endswith(
                        "_test.cc"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, core)
                if rel.startswith("testing/"):
                    continue
                mine = layer_of(rel)
                self.assertIn(mine, ALLOWED, f"core/{rel}: a folder that is "
                              "no layer; add it to docs/architecture.md and "
                              "to this test")
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    checked += 1
                    if FORBIDDEN.match(target):
                        wrong.append(f"core/{rel} includes {target}")
                    elif target.startswith("core/"):
                        theirs = layer_of(target[len("core/"):])
                        if theirs not in ALLOWED[mine]:
                            wrong.append(f"core/{rel} ({mine}) includes "
                                         f"{target} ({theirs})")
        self.assertGreater(checked, 100, "found too few includes to check")
        self.assertEqual(wrong, [], "includes that point up or out:\n" +
                         "\n".join(wrong))


if __name__ == "__main__":
    unittest.main()
