"""The rebel adapter (codecs/rebel/rbln_codec_rebel.py) over the fake rebel
(tests/fake_rebel/rebel), and the fake and its artifact writer themselves.

The adapter runs as the daemon runs it: /usr/bin/python3 on the file, with
PYTHONPATH naming the fake, fd 0 and fd 1 one end of a real socketpair, and
the files handed over as SCM_RIGHTS descriptors. Run by ctest through
/usr/bin/python3, as root or not: the test that runs the adapter as `nobody`
needs root and is skipped otherwise.
"""

import array
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.join(os.path.dirname(HERE), "codecs", "rebel",
                       "rbln_codec_rebel.py")
FAKE_REBEL = os.path.join(HERE, "fake_rebel")
MAKE_FAKE_ARTIFACT = os.path.join(FAKE_REBEL, "make_fake_artifact.py")
PYTHON = "/usr/bin/python3"
# Guards against a hung adapter; no test measures time.
REPLY_TIMEOUT_S = 60
CONTAINER_MAGIC = b"\x89RBL\r\n\x1a\n"
MiB = 1024 * 1024

os.environ.pop("FAKE_REBEL_API", None)
os.environ.pop("FAKE_REBEL_CHATTER", None)
sys.path.insert(0, FAKE_REBEL)
import make_fake_artifact  # noqa: E402
from reachable import copy_for_other_users  # noqa: E402
import rebel  # noqa: E402  (the fake, per_chiplet)

# Two nodes of two chiplets; every bucket differs, so that a swapped node or
# chiplet shows. The KV tensors are at 32 blocks; "cache_v" is not a
# multiple of 2 MiB. "PortRecur" is other memory, as optimum-rbln's fit
# counts it: only "DramTensor" is the KV cache.
PREFILL = {
    "npu": "RBLN-CA12", "num_nodes": 2, "chiplets_per_node": 2,
    "alloc": {"weights": [[1000 * MiB, 1001 * MiB], [1002 * MiB, 1003 * MiB]],
              "program": [[3 * MiB, 4 * MiB], [5 * MiB, 6 * MiB]],
              "PortRecur": [[MiB, 2 * MiB], [3 * MiB, 4 * MiB]]},
    "dram_tensors": {
        "cache_k": [[32 * 131072, 32 * 131072], [32 * 65536, 32 * 65536]],
        "cache_v": [[32 * 100000, 32 * 100001], [32 * 99999, 32 * 3]]},
}
DECODER = dict(PREFILL, alloc={"weights": [[MiB] * 2] * 2})
RBLN_CONFIG = {
    "cls_name": "RBLNLlamaForCausalLMConfig",
    "npu": "RBLN-CA12",
    "tensor_parallel_size": 4,
    "optimum_rbln_version": "0.9.3",
    "_compile_cfgs": [{"compiled_model_name": "prefill"},
                      {"compiled_model_name": "decoder_batch_1"}],
    "kvcache_num_blocks": 32,
    "kvcache_block_size": 4096,
    "kvcache_metas": [{"name": "cache_k", "is_auto": True},
                      {"name": "cache_v", "is_auto": True}],
    "tokenizer_note": "caf\u00e9 /path",
}
SPEC = {"rbln_config": RBLN_CONFIG,
        "models": {"prefill": PREFILL, "decoder_batch_1": DECODER},
        "payload_bytes": 200000,
        "companions": {"config.json": '{"model_type": "llama"}\n'},
        "submodule": None}


def align_2mib(size):
    return -(-size // (2 * MiB)) * (2 * MiB)


def payload_of(path):
    """The bytes of a fake .rbln after its two header lines."""
    with open(path, "rb") as f:
        data = f.read()
    return data[data.index(b"\n", data.index(b"\n") + 1) + 1:]


class Adapter:
    """The adapter as a subprocess on one end of a socketpair."""

    def __init__(self, api="per_chiplet", pythonpath=FAKE_REBEL,
                 adapter=ADAPTER, user=None, chatter=False):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ, PYTHONPATH=pythonpath, FAKE_REBEL_API=api)
        if chatter:
            env["FAKE_REBEL_CHATTER"] = "1"
        self.stderr = tempfile.TemporaryFile()
        identity = {}
        if user is not None:
            entry = pwd.getpwnam(user)
            identity = {"user": entry.pw_uid, "group": entry.pw_gid,
                        "extra_groups": []}
        self.process = subprocess.Popen(
            [PYTHON, adapter], stdin=theirs, stdout=theirs,
            stderr=self.stderr, env=env, cwd="/", **identity)
        theirs.close()
        ours.settimeout(REPLY_TIMEOUT_S)
        self.sock = ours
        self.buffer = b""

    def send_line(self, line, fds=()):
        ancillary = []
        if fds:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                          array.array("i", fds))]
        sent = self.sock.sendmsg([line], ancillary)
        self.sock.sendall(line[sent:])

    def reply(self):
        while b"\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError("the adapter closed the socket; stderr: "
                                     + self.stderr_text())
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, message, fds=()):
        self.send_line(json.dumps(message).encode() + b"\n", fds)
        return self.reply()

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close(self):
        """EOF on the socket; the adapter's exit status."""
        self.sock.close()
        try:
            return self.process.wait(timeout=REPLY_TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


class WorkDir(unittest.TestCase):
    """A temporary directory with one flat fake artifact in it."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="rbln-rebel-adapter-")
        self.addCleanup(shutil.rmtree, self.work, ignore_errors=True)
        self.artifact = os.path.join(self.work, "artifact")
        make_fake_artifact.write_artifact(SPEC, self.artifact)
        self.prefill = os.path.join(self.artifact, "prefill.rbln")
        self.out_dir = os.path.join(self.work, "out")
        os.mkdir(self.out_dir)

    def start(self, **kwargs):
        adapter = Adapter(**kwargs)
        self.addCleanup(adapter.stderr.close)
        self.addCleanup(self._stop, adapter)
        return adapter

    def _stop(self, adapter):
        if adapter.sock.fileno() != -1:
            adapter.close()

    def open_file(self, path):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, fd)
        return fd

    def open_dir(self, path):
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.addCleanup(os.close, fd)
        return fd

    def inspect(self, adapter, path, request_id=2):
        return adapter.request(
            {"id": request_id, "op": "inspect",
             "file": os.path.basename(path), "fds": ["source"]},
            [self.open_file(path)])

    def rescale(self, adapter, factors, out_name="prefill.rbln",
                request_id=3, source=None):
        source = source or self.prefill
        return adapter.request(
            {"id": request_id, "op": "rescale",
             "file": os.path.basename(source), "out_name": out_name,
             "factors": factors, "fds": ["source", "out_dir"]},
            [self.open_file(source), self.open_dir(self.out_dir)])

    def assert_error(self, reply, request_id, code, *words):
        self.assertEqual(reply["id"], request_id, reply)
        self.assertIs(reply["ok"], False, reply)
        self.assertEqual(reply["error"]["code"], code, reply)
        for word in words:
            self.assertIn(word, reply["error"]["message"])


class AdapterTest(WorkDir):

    def test_hello_reports_each_api_generation(self):
        for api, found, can_rescale in (("per_chiplet", "per_chiplet", True),
                                        ("per_node", "per_node", True),
                                        ("no_rescale", "per_chiplet", False)):
            with self.subTest(api=api):
                adapter = self.start(api=api)
                self.assertEqual(
                    adapter.request({"id": 1, "op": "hello", "protocol": 1}),
                    {"id": 1, "ok": True, "protocol": 1, "codec": "rebel",
                     "codec_version": "0.0.0+fake", "api": found,
                     "can_rescale": can_rescale})
                self.assertEqual(adapter.close(), 0)

    def test_hello_refuses_another_protocol(self):
        adapter = self.start()
        self.assert_error(adapter.request({"id": 1, "op": "hello",
                                           "protocol": 2}),
                          1, "BAD_REQUEST", "protocol 2", "speaks 1")

    def test_inspect_per_chiplet(self):
        adapter = self.start()
        reply = self.inspect(adapter, self.prefill)
        self.assertEqual(reply, {
            "id": 2, "ok": True, "granularity": "chiplet", "num_nodes": 2,
            "buckets_per_node": 2, "other": PREFILL["alloc"],
            "kv_tensors": PREFILL["dram_tensors"]})

    def test_inspect_per_node_sums_each_node(self):
        adapter = self.start(api="per_node")
        reply = self.inspect(adapter, self.prefill, request_id=7)
        self.assertEqual(reply["id"], 7)
        self.assertEqual(reply["granularity"], "node")
        self.assertEqual((reply["num_nodes"], reply["buckets_per_node"]),
                         (2, 1))
        self.assertEqual(reply["other"], {
            "weights": [[2001 * MiB], [2005 * MiB]],
            "program": [[7 * MiB], [11 * MiB]],
            "PortRecur": [[3 * MiB], [7 * MiB]]})
        self.assertEqual(reply["kv_tensors"], {
            "cache_k": [[64 * 131072], [64 * 65536]],
            "cache_v": [[32 * 200001], [32 * 100002]]})

    def test_rescale_writes_the_resized_copy(self):
        adapter = self.start()
        reply = self.rescale(adapter, {"cache_k": [48, 32],
                                       "cache_v": [16, 32]})
        self.assertEqual(reply, {"id": 3, "ok": True})
        self.assertEqual(os.listdir(self.out_dir), ["prefill.rbln"])
        written = os.path.join(self.out_dir, "prefill.rbln")
        model = rebel.RBLNCompiledModel(written)
        self.assertEqual(model.exp_get_dram_tensor_sizes(), {
            "cache_k": [[48 * 131072, 48 * 131072], [48 * 65536, 48 * 65536]],
            "cache_v": [[16 * 100000, 16 * 100001], [16 * 99999, 16 * 3]]})
        self.assertEqual(model.get_alloc_per_chiplet_by_key()["weights"],
                         PREFILL["alloc"]["weights"])
        self.assertEqual(payload_of(written), payload_of(self.prefill))
        self.assertEqual(
            rebel.RBLNCompiledModel(self.prefill).exp_get_dram_tensor_sizes(),
            PREFILL["dram_tensors"], "the source changed")

    def test_rescale_inexact_factor_fails_and_writes_nothing(self):
        adapter = self.start()
        self.assert_error(
            self.rescale(adapter, {"cache_v": [7, 64]}), 3, "FAILED",
            "cache_v", "3200032 bytes * 7 / 64", "whole number")
        self.assertEqual(os.listdir(self.out_dir), [])

    def test_rescale_unknown_tensor_fails(self):
        adapter = self.start()
        self.assert_error(self.rescale(adapter, {"cache_x": [16, 32]}), 3,
                          "FAILED", "cache_x")
        self.assertEqual(os.listdir(self.out_dir), [])

    def test_older_compiler_writes_nothing(self):
        adapter = self.start(api="no_rescale")
        self.assert_error(self.rescale(adapter, {"cache_k": [16, 32]}), 3,
                          "OLDER_COMPILER", "rebel-compiler 0.0.0+fake",
                          "exp_rescale_buffer_size", "upgrade rebel-compiler")
        self.assertEqual(os.listdir(self.out_dir), [])

    def test_bad_out_name_writes_nothing(self):
        before = sorted(os.listdir(self.work))
        adapter = self.start()
        for name in ("../x", "a/b", ".", "..", "", "/tmp/x"):
            with self.subTest(out_name=name):
                self.assert_error(
                    self.rescale(adapter, {"cache_k": [16, 32]},
                                 out_name=name), 3, "BAD_REQUEST", "out_name")
        self.assertEqual(os.listdir(self.out_dir), [])
        self.assertEqual(sorted(os.listdir(self.work)), before)

    def test_existing_out_name_is_not_overwritten(self):
        taken = os.path.join(self.out_dir, "prefill.rbln")
        with open(taken, "wb") as f:
            f.write(b"someone else's")
        adapter = self.start()
        self.assert_error(self.rescale(adapter, {"cache_k": [16, 32]}), 3,
                          "BAD_REQUEST", "exists")
        with open(taken, "rb") as f:
            self.assertEqual(f.read(), b"someone else's")

    def test_bad_factors(self):
        adapter = self.start()
        for factors in ({}, {"cache_k": [0, 32]}, {"cache_k": [16]},
                        {"cache_k": ["16", 32]}, [16, 32]):
            with self.subTest(factors=factors):
                self.assert_error(self.rescale(adapter, factors), 3,
                                  "BAD_REQUEST", "factors")
        self.assertEqual(os.listdir(self.out_dir), [])

    def test_garbage_and_unknown_requests_keep_it_serving(self):
        adapter = self.start()
        adapter.send_line(b"this is not json\n")
        self.assert_error(adapter.reply(), None, "BAD_REQUEST", "not a line "
                          "of JSON", "this is not json")
        adapter.send_line(b"[1, 2]\n")
        self.assert_error(adapter.reply(), None, "BAD_REQUEST",
                          "not a JSON object")
        adapter.send_line(b'{"op": "hello", "protocol": 1}\n')
        self.assert_error(adapter.reply(), None, "BAD_REQUEST", "integer id")
        self.assert_error(adapter.request({"id": 5, "op": "transmogrify"}),
                          5, "BAD_REQUEST", "unknown op transmogrify")
        adapter.send_line(b"x" * (2 * MiB) + b"\n")
        self.assert_error(adapter.reply(), None, "BAD_REQUEST",
                          "longer than")
        self.assertEqual(self.inspect(adapter, self.prefill, 6)["ok"], True)
        self.assertEqual(adapter.close(), 0)

    def test_descriptors_must_match_the_request(self):
        adapter = self.start()
        self.assert_error(
            adapter.request({"id": 4, "op": "inspect", "file": "prefill.rbln",
                             "fds": ["source"]}), 4, "BAD_REQUEST",
            "carried 0")
        self.assert_error(
            adapter.request({"id": 5, "op": "inspect", "file": "prefill.rbln",
                             "fds": ["source", "out_dir"]},
                            [self.open_file(self.prefill),
                             self.open_dir(self.out_dir)]),
            5, "BAD_REQUEST", "['source']")
        adapter.send_line(
            json.dumps({"id": 6, "op": "inspect", "file": "prefill.rbln",
                        "fds": ["source"]}).encode() + b"\n",
            [self.open_file(self.prefill)] * 3)
        self.assert_error(adapter.reply(), None, "BAD_REQUEST",
                          "more than 2 file descriptors")
        self.assertEqual(self.inspect(adapter, self.prefill, 7)["ok"], True)

    def test_a_file_rebel_cannot_load_is_unreadable(self):
        container = os.path.join(self.work, "ours.rbln")
        with open(container, "wb") as f:
            f.write(CONTAINER_MAGIC + b"\0" * 64)
        adapter = self.start()
        self.assert_error(self.inspect(adapter, container), 2, "UNREADABLE",
                          "ours.rbln", "cannot load it")
        self.assert_error(self.rescale(adapter, {"cache_k": [16, 32]},
                                       source=container),
                          3, "UNREADABLE", "ours.rbln")
        self.assertEqual(os.listdir(self.out_dir), [])

    def test_missing_rebel_fails_every_request_naming_pythonpath(self):
        empty = os.path.join(self.work, "no-rebel")
        os.mkdir(empty)
        adapter = self.start(pythonpath=empty)
        self.assert_error(adapter.request({"id": 1, "op": "hello",
                                           "protocol": 1}),
                          1, "FAILED", "cannot import rebel (rebel-compiler)",
                          "PYTHONPATH")
        self.assert_error(self.inspect(adapter, self.prefill), 2, "FAILED",
                          "PYTHONPATH")
        self.assertEqual(adapter.close(), 0)
        self.assertIn("cannot import rebel", adapter.stderr_text())

    def test_library_chatter_stays_off_the_protocol(self):
        adapter = self.start(chatter=True)
        self.assertIs(adapter.request({"id": 1, "op": "hello",
                                       "protocol": 1})["ok"], True)
        self.assertIs(self.inspect(adapter, self.prefill)["ok"], True)
        self.assertEqual(adapter.close(), 0)
        stderr = adapter.stderr_text()
        self.assertIn("rebel(fake): imported", stderr)
        self.assertIn("rebel(fake) native: loaded /proc/self/fd/", stderr)

    def test_eof_exits_zero(self):
        adapter = self.start()
        self.assertEqual(adapter.close(), 0)
        self.assertEqual(adapter.stderr_text(), "")

    def test_a_closed_daemon_end_is_eof(self):
        adapter = self.start()
        adapter.send_line(b'{"id": 1, "op": "hello", "protocol": 1}\n')
        self.assertEqual(adapter.close(), 0)
        self.assertNotIn("Traceback", adapter.stderr_text())

    def test_version_and_help(self):
        env = dict(os.environ, PYTHONPATH=FAKE_REBEL, FAKE_REBEL_API="per_node",
                   FAKE_REBEL_CHATTER="1")
        ran = subprocess.run([PYTHON, ADAPTER, "--version"], env=env,
                             capture_output=True, text=True,
                             timeout=REPLY_TIMEOUT_S)
        self.assertEqual((ran.returncode, ran.stdout), (0, (
            "rbln_codec_rebel 1.0.0 (codec protocol 1)\n"
            "rebel-compiler 0.0.0+fake, API per_node, can rescale\n")))
        env["PYTHONPATH"] = self.work
        ran = subprocess.run([PYTHON, ADAPTER, "--version"], env=env,
                             capture_output=True, text=True,
                             timeout=REPLY_TIMEOUT_S)
        self.assertEqual(ran.returncode, 1)
        self.assertIn("PYTHONPATH", ran.stderr)
        ran = subprocess.run([PYTHON, ADAPTER, "--help"], capture_output=True,
                             text=True, timeout=REPLY_TIMEOUT_S)
        self.assertEqual(ran.returncode, 0)
        self.assertIn("docs/codec-protocol.md", ran.stdout)

    def test_not_started_on_a_socket(self):
        ran = subprocess.run([PYTHON, ADAPTER], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True,
                             timeout=REPLY_TIMEOUT_S)
        self.assertEqual(ran.returncode, 2)
        self.assertIn("fd 0 is not a socket", ran.stderr)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run as nobody")
    def test_as_nobody_reads_through_the_descriptor(self):
        # The adapter and the fake from a copy that nobody may read (the
        # source tree may be in a directory that nobody cannot enter).
        programs = copy_for_other_users(ADAPTER,
                                        os.path.join(FAKE_REBEL, "rebel"))
        adapter_copy = os.path.join(programs, "rbln_codec_rebel.py")
        # The artifact in root's 0700 directory, the output directory one
        # that nobody owns, inside it too.
        os.chmod(self.work, 0o700)
        nobody = pwd.getpwnam("nobody")
        os.chown(self.out_dir, nobody.pw_uid, nobody.pw_gid)
        os.chmod(self.out_dir, 0o700)
        denied = subprocess.run(["cat", self.prefill], capture_output=True,
                                user=nobody.pw_uid, group=nobody.pw_gid,
                                extra_groups=[], timeout=REPLY_TIMEOUT_S)
        self.assertNotEqual(denied.returncode, 0,
                            "nobody can read the source by its path; the "
                            "test would prove nothing")

        adapter = self.start(pythonpath=programs, adapter=adapter_copy,
                             user="nobody")
        self.assertEqual(self.inspect(adapter, self.prefill)["kv_tensors"],
                         PREFILL["dram_tensors"])
        self.assertEqual(self.rescale(adapter, {"cache_k": [16, 32]}),
                         {"id": 3, "ok": True})
        written = os.path.join(self.out_dir, "prefill.rbln")
        self.assertEqual(os.stat(written).st_uid, nobody.pw_uid)
        self.assertEqual(payload_of(written), payload_of(self.prefill))
        self.assertEqual(adapter.close(), 0)


class FakeRebelTest(WorkDir):

    def test_alloc_and_tensor_sizes(self):
        model = rebel.RBLNCompiledModel(self.prefill)
        alloc = model.get_alloc_per_chiplet_by_key()
        self.assertEqual(set(alloc),
                         {"weights", "program", "PortRecur", "DramTensor"})
        self.assertEqual(alloc["weights"], PREFILL["alloc"]["weights"])
        tensors = PREFILL["dram_tensors"]
        expected = [[sum(align_2mib(t[n][c]) for t in tensors.values())
                     for c in range(2)] for n in range(2)]
        self.assertEqual(alloc["DramTensor"], expected)
        self.assertEqual(expected[1][1], 2 * MiB + 2 * MiB)
        self.assertEqual(model.get_alloc_per_node_by_key(), {
            key: [sum(node) for node in grid] for key, grid in alloc.items()})
        sizes = model.exp_get_dram_tensor_sizes()
        self.assertEqual(sizes, tensors)
        sizes["cache_k"][0][0] = 1
        self.assertEqual(model.exp_get_dram_tensor_sizes(), tensors)

    def test_rescale(self):
        model = rebel.RBLNCompiledModel(self.prefill)
        model.exp_rescale_buffer_size({"cache_k": (8, 32)})
        self.assertEqual(model.exp_get_dram_tensor_sizes()["cache_k"],
                         [[8 * 131072] * 2, [8 * 65536] * 2])
        before = model.exp_get_dram_tensor_sizes()
        with self.assertRaisesRegex(ValueError, r"cache_v: 3200032 bytes \* 5 "
                                    r"/ 64 is not a whole number"):
            model.exp_rescale_buffer_size({"cache_k": (16, 8),
                                           "cache_v": (5, 64)})
        with self.assertRaisesRegex(KeyError, "cache_x"):
            model.exp_rescale_buffer_size({"cache_x": (16, 32)})
        for target, current in ((0, 32), (16, 0), (-1, 32)):
            with self.assertRaises(ValueError):
                model.exp_rescale_buffer_size({"cache_k": (target, current)})
        self.assertEqual(model.exp_get_dram_tensor_sizes(), before,
                         "a failed rescale changed sizes")

    def test_save_round_trip(self):
        model = rebel.RBLNCompiledModel(self.prefill)
        model.exp_rescale_buffer_size({"cache_k": (64, 32)})
        saved = os.path.join(self.out_dir, "saved.rbln")
        model.save(saved)
        again = rebel.RBLNCompiledModel(saved)
        self.assertEqual(again.exp_get_dram_tensor_sizes()["cache_k"],
                         [[64 * 131072] * 2, [64 * 65536] * 2])
        self.assertEqual(payload_of(saved), payload_of(self.prefill))
        self.assertEqual(len(payload_of(saved)), SPEC["payload_bytes"])

    def test_bad_files_raise_runtime_error(self):
        header = dict(PREFILL, num_nodes=3)
        for name, data in (
                ("container", CONTAINER_MAGIC + b"rest"),
                ("empty", b""),
                ("json", rebel.MAGIC + b"{not json\n"),
                ("cut", rebel.MAGIC + b'{"npu": "RBLN-CA12"'),
                ("shape", rebel.MAGIC + json.dumps(header).encode() + b"\n")):
            with self.subTest(name):
                path = os.path.join(self.work, name)
                with open(path, "wb") as f:
                    f.write(data)
                with self.assertRaises(RuntimeError):
                    rebel.RBLNCompiledModel(path)

    def test_api_generations_lack_their_methods(self):
        probe = ("import rebel; m = rebel.RBLNCompiledModel; print(" +
                 "hasattr(m, 'get_alloc_per_chiplet_by_key'), " +
                 "hasattr(m, 'exp_rescale_buffer_size'), " +
                 "hasattr(m, 'get_alloc_per_node_by_key'))")
        for api, expected in (("per_chiplet", "True True True"),
                              ("per_node", "False True True"),
                              ("no_rescale", "True False True")):
            with self.subTest(api=api):
                ran = subprocess.run(
                    [PYTHON, "-c", probe], capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=FAKE_REBEL,
                             FAKE_REBEL_API=api), timeout=REPLY_TIMEOUT_S)
                self.assertEqual(ran.stdout.strip(), expected, ran.stderr)
        ran = subprocess.run([PYTHON, "-c", "import rebel"],
                             capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=FAKE_REBEL,
                                      FAKE_REBEL_API="bogus"),
                             timeout=REPLY_TIMEOUT_S)
        self.assertNotEqual(ran.returncode, 0)
        self.assertIn("per_chiplet, per_node, no_rescale", ran.stderr)


class MakeFakeArtifactTest(unittest.TestCase):

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="rbln-fake-artifact-")
        self.addCleanup(shutil.rmtree, self.work, ignore_errors=True)

    def run_tool(self, *args, stdin=None):
        return subprocess.run([PYTHON, MAKE_FAKE_ARTIFACT, *args],
                              input=stdin, capture_output=True, text=True,
                              timeout=REPLY_TIMEOUT_S)

    def files_under(self, top):
        return sorted(os.path.relpath(os.path.join(d, f), top)
                      for d, _, files in os.walk(top) for f in files)

    def check_models(self, directory, models):
        for name, header in models.items():
            path = os.path.join(directory, name + ".rbln")
            with open(path, "rb") as f:
                self.assertFalse(f.read(8) == CONTAINER_MAGIC)
            model = rebel.RBLNCompiledModel(path)
            self.assertEqual(model.exp_get_dram_tensor_sizes(),
                             header["dram_tensors"])
            self.assertEqual(payload_of(path),
                             make_fake_artifact.payload_bytes_of(
                                 name, SPEC["payload_bytes"]))

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def test_flat_layout_from_stdin(self):
        out = os.path.join(self.work, "a", "b", "llama")
        ran = self.run_tool("-", "--out", out, stdin=json.dumps(SPEC))
        self.assertEqual(ran.returncode, 0, ran.stderr)
        self.assertEqual(self.files_under(out), [
            "config.json", "decoder_batch_1.rbln", "prefill.rbln",
            "rbln_config.json"])
        self.assertEqual(self.read(os.path.join(out, "rbln_config.json")),
                         json.dumps(RBLN_CONFIG, indent=2).encode())
        self.assertEqual(self.read(os.path.join(out, "config.json")),
                         SPEC["companions"]["config.json"].encode())
        self.check_models(out, SPEC["models"])
        self.assertNotEqual(
            payload_of(os.path.join(out, "prefill.rbln")),
            payload_of(os.path.join(out, "decoder_batch_1.rbln")))

    def test_multimodal_layout(self):
        out = os.path.join(self.work, "llava")
        make_fake_artifact.write_artifact(dict(SPEC, submodule="language_model"),
                                          out)
        self.assertEqual(self.files_under(out), [
            "compiled_model.rbln", "config.json",
            "language_model/config.json",
            "language_model/decoder_batch_1.rbln",
            "language_model/prefill.rbln", "language_model/rbln_config.json",
            "rbln_config.json", "vision_tower/compiled_model.rbln",
            "vision_tower/config.json", "vision_tower/rbln_config.json"])
        parent_bytes = self.read(os.path.join(out, "rbln_config.json"))
        parent = json.loads(parent_bytes)
        self.assertEqual(parent_bytes, json.dumps(parent, indent=2).encode())
        self.assertEqual(parent["cls_name"],
                         "RBLNLlavaForConditionalGenerationConfig")
        self.assertEqual(parent["language_model"], RBLN_CONFIG)
        self.assertNotIn("kvcache_num_blocks", parent)
        self.assertNotIn("kvcache_num_blocks", parent["vision_tower"])
        self.assertEqual(
            self.read(os.path.join(out, "language_model", "rbln_config.json")),
            json.dumps(RBLN_CONFIG, indent=2).encode())
        self.assertEqual(json.loads(self.read(os.path.join(
            out, "vision_tower", "rbln_config.json"))),
            parent["vision_tower"])
        self.check_models(os.path.join(out, "language_model"), SPEC["models"])
        for small in ("compiled_model.rbln",
                      "vision_tower/compiled_model.rbln"):
            model = rebel.RBLNCompiledModel(os.path.join(out, small))
            self.assertEqual(model.exp_get_dram_tensor_sizes(), {})

    def test_refuses_a_non_empty_out_dir(self):
        out = os.path.join(self.work, "taken")
        os.mkdir(out)
        with open(os.path.join(out, "keep"), "w") as f:
            f.write("mine")
        spec = os.path.join(self.work, "spec.json")
        with open(spec, "w") as f:
            json.dump(SPEC, f)
        ran = self.run_tool(spec, "--out", out)
        self.assertEqual(ran.returncode, 1)
        self.assertIn("is not empty", ran.stderr)
        self.assertEqual(os.listdir(out), ["keep"])

    def test_bad_spec_writes_nothing(self):
        out = os.path.join(self.work, "bad")
        for spec in ({"models": {}}, dict(SPEC, extra=1),
                     dict(SPEC, models={"prefill": dict(PREFILL,
                                                        num_nodes=3)})):
            with self.subTest(spec=list(spec)):
                ran = self.run_tool("-", "--out", out, stdin=json.dumps(spec))
                self.assertEqual(ran.returncode, 2, ran.stderr)
                self.assertIn("make_fake_artifact: bad spec", ran.stderr)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
