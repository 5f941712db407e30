"""Copies of programs that every user can reach.

As root the daemon runs its codec as another user (nobody), and some tests
run programs as other users; none of them can enter a source or build tree
cloned into a 0700 directory such as /root. copy_for_other_users puts copies
where they can.
"""

import atexit
import os
import shutil
import tempfile


def copy_for_other_users(*sources):
    """A new directory under /tmp (removed when the process exits) holding a
    copy of each file or directory in `sources` under its own name, every
    directory and file in it readable and searchable by all users."""
    copies = tempfile.mkdtemp(prefix="rbln-shared-", dir="/tmp")
    atexit.register(shutil.rmtree, copies, ignore_errors=True)
    for source in sources:
        to = os.path.join(copies, os.path.basename(source.rstrip("/")))
        if os.path.isdir(source):
            shutil.copytree(source, to,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, to)
    for parent, _, files in os.walk(copies):  # whatever the umask was
        os.chmod(parent, 0o755)
        for name in files:
            os.chmod(os.path.join(parent, name), 0o755)
    return copies
