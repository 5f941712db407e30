"""Stores of many artifacts made with hard links: one synthesized artifact's
files linked into COUNT directories, so that the disk is not the limit
(ext4 allows 65,000 links to one file: one source serves 50,000 artifacts).

Used by tests/python_client_test.py and bench/run. The artifacts are named
"teamT/mNNNNNN" (1,000 to a team folder), as a fleet's store nests them.
"""

import os
import subprocess

LINKS_PER_SOURCE = 50000
ARTIFACTS_PER_TEAM = 1000


def artifact_name(index):
    return "team%d/m%06d" % (index // ARTIFACTS_PER_TEAM, index)


def link_store(synth, store, count, preset="tiny", payload="4KiB"):
    """Fills `store` with `count` artifacts (synth: the path of
    rbln-artifact-synth); returns their names in byte order."""
    os.makedirs(store, exist_ok=True)
    sources = []
    for first in range(0, count, LINKS_PER_SOURCE):
        source = os.path.join(store, ".source-%d" % first)
        subprocess.run([synth, "--preset", preset, "--payload-bytes", payload,
                        "--out", source],
                       check=True, capture_output=True, timeout=120)
        sources.append((source, sorted(os.listdir(source))))
    names = []
    for index in range(count):
        source, files = sources[index // LINKS_PER_SOURCE]
        name = artifact_name(index)
        target = os.path.join(store, name)
        os.makedirs(target)
        for file in files:
            os.link(os.path.join(source, file), os.path.join(target, file))
        names.append(name)
    return sorted(names)


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 4:
        sys.exit("usage: link_store.py RBLN_ARTIFACT_SYNTH STORE COUNT")
    link_store(sys.argv[1], sys.argv[2], int(sys.argv[3]))
