"""A group written part way and then killed (issue 46, item 3): the daemon,
started with RBLN_ARTIFACTD_TEST_CRASH_AFTER_GROUP_COMMITS=k, ends as if
killed right after the k-th member's commit of a FitTogether. After a
restart every member is at its old count or at its planned one (never
torn: each reads whole, with every payload checksum verified), exactly k
of them at the planned one, shrinks first; and a retry completes the group,
the members already written reported as already_at_target.

Run by ctest with PYTHONPATH=<build>/python and RBLN_BIN_DIR=<build>/bin.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True

import grpc  # noqa: E402

from rbln.artifact.v1 import artifact_service_pb2 as pb  # noqa: E402
from rbln.artifact.v1 import artifact_service_pb2_grpc as pb_grpc  # noqa: E402

from python_client_test import BIN_DIR, Daemon  # noqa: E402

NAMES = ["a", "b", "c"]
BUDGET = "90%"


class GroupCrashTest(unittest.TestCase):

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="rbln-group-crash-")
        self.store = os.path.join(self.root, "store")
        for name, layers in zip(NAMES, (6, 4, 5)):
            subprocess.run(
                [os.path.join(BIN_DIR, "rbln-artifact-synth"), "--preset",
                 "llama3-8b-ca12-tp4", "--layers", str(layers),
                 "--payload-bytes", "64KiB", "--out",
                 os.path.join(self.store, name)],
                check=True, capture_output=True)

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def start(self, crash_after=None):
        env = dict(os.environ)
        if crash_after is not None:
            env["RBLN_ARTIFACTD_TEST_CRASH_AFTER_GROUP_COMMITS"] = \
                str(crash_after)
        daemon = Daemon(self.store, os.path.join(self.root, "d.sock"),
                        env=env)
        stub = pb_grpc.ArtifactServiceStub(
            grpc.insecure_channel(daemon.address))
        return daemon, stub

    def request(self, dry_run=False):
        return pb.FitTogetherRequest(
            members=[pb.Member(artifact=name) for name in NAMES],
            budget=BUDGET, options=pb.WriteOptions(dry_run=dry_run))

    def counts(self, stub):
        """Each member's count, read whole with its checksums verified."""
        counts = []
        for name in NAMES:
            reply = stub.DescribeArtifact(pb.DescribeArtifactRequest(
                artifact=name, verify_payload=True), timeout=60)
            counts.append(reply.kvcache_num_blocks)
        return counts

    def test_a_kill_after_each_commit_leaves_no_member_torn(self):
        daemon, stub = self.start()
        try:
            # b at its minimum, so that the group grows it and shrinks the
            # others.
            b = stub.GetKvcacheNumBlocks(pb.GetKvcacheNumBlocksRequest(
                artifact="b"), timeout=60)
            stub.SetKvcacheNumBlocks(pb.SetKvcacheNumBlocksRequest(
                artifact="b", num_blocks=b.num_min_blocks), timeout=60)
            old = self.counts(stub)
            plan = stub.FitTogether(self.request(dry_run=True), timeout=60)
        finally:
            daemon.stop()
        new = [m.new_num_blocks for m in plan.members]
        changed = [i for i in range(len(NAMES)) if new[i] != old[i]]
        self.assertGreaterEqual(len(changed), 2, (old, new))
        self.assertTrue(any(new[i] > old[i] for i in changed), (old, new))
        self.assertTrue(any(new[i] < old[i] for i in changed), (old, new))
        # Shrinks first: the order the commits are made in.
        order = sorted(changed, key=lambda i: new[i] > old[i])
        for k in range(1, len(changed)):
            with self.subTest(killed_after=k):
                # Back to the old counts.
                daemon, stub = self.start()
                try:
                    for i, count in enumerate(old):
                        stub.SetKvcacheNumBlocks(pb.SetKvcacheNumBlocksRequest(
                            artifact=NAMES[i], num_blocks=count,
                            options=pb.WriteOptions(force=True)), timeout=60)
                finally:
                    daemon.stop()
                daemon, stub = self.start(crash_after=k)
                with self.assertRaises(grpc.RpcError):
                    stub.FitTogether(self.request(), timeout=60)
                daemon.process.wait(timeout=60)
                self.assertEqual(daemon.process.returncode, 137,
                                 daemon.stderr())
                daemon.err.close()
                daemon, stub = self.start()
                try:
                    now = self.counts(stub)
                    for i in range(len(NAMES)):
                        self.assertIn(now[i], (old[i], new[i]))
                    self.assertEqual(
                        [i for i in changed if now[i] == new[i]],
                        sorted(order[:k]))
                    retry = stub.FitTogether(self.request(), timeout=60)
                    self.assertEqual([m.new_num_blocks
                                      for m in retry.members], new)
                    for i in order[:k]:
                        self.assertTrue(retry.members[i].already_at_target)
                    self.assertEqual(self.counts(stub), new)
                finally:
                    daemon.stop()


if __name__ == "__main__":
    unittest.main()
