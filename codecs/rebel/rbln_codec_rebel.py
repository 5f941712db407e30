#!/usr/bin/python3
"""rbln_codec_rebel: an external codec for rbln-artifactd over rebel-compiler.

rbln-artifactd starts this program (--codec-command) to read and resize the
.rbln files that rebel-compiler writes, whose format only rebel knows. It
speaks the codec protocol of docs/codec-protocol.md on fd 0 and fd 1 (one
Unix stream socket): hello, inspect (the memory facts of one file) and
rescale (write a copy with the KV-cache tensors resized). It uses exactly
this of rebel's Python API, as optimum-rbln does:

    rebel.__version__
    rebel.RBLNCompiledModel(path)
    m.get_alloc_per_chiplet_by_key()   (newer compilers)
    m.get_alloc_per_node_by_key()      (older compilers: used when the above
                                        is absent)
    m.exp_get_dram_tensor_sizes()
    m.exp_rescale_buffer_size({name: (target, current)})
    m.save(path)

Run it as `/usr/bin/python3 rbln_codec_rebel.py` with rebel importable (from
the Python's site-packages or PYTHONPATH). Standard library only, plus rebel.
"""

import argparse
import array
import json
import os
import socket
import sys

ADAPTER_VERSION = "1.0.0"  # this file's own version, not the daemon's
PROTOCOL = 1
# Requests are a few hundred bytes; a line longer than this is refused.
MAX_LINE_BYTES = 1024 * 1024
# No request hands more than two files (source, out_dir).
MAX_FDS = 2
# What of a caller's string is repeated in a message.
MAX_ECHO_CHARS = 200
# The memory key that is the KV cache: optimum-rbln's fit
# (modeling_attention_utils.py) counts every other key, "PortRecur"
# included, as other memory.
KV_KEY = "DramTensor"
FDS_OF_OP = {"hello": [], "inspect": ["source"],
             "rescale": ["source", "out_dir"]}
IMPORT_HINT = ("install rebel-compiler in the Python that runs this adapter "
               "or set PYTHONPATH")


class CodecError(Exception):
    """A failed request: the protocol's error code and message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _echo(value):
    """A caller's value, printable and cut, for a message."""
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.encode("unicode_escape").decode("ascii")
    if len(text) > MAX_ECHO_CHARS:
        text = text[:MAX_ECHO_CHARS] + "..."
    return text


def find_compiler():
    """(Compiler, None), or (None, the message that says why rebel cannot be
    used). Whatever rebel prints while importing, from Python or native
    code, goes to stderr."""
    sys.stdout.flush()
    saved_fd, saved = os.dup(1), sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        import rebel
        return Compiler(rebel), None
    except Exception as e:  # rebel's own import errors are not ImportError
        return None, (f"cannot import rebel (rebel-compiler): "
                      f"{type(e).__name__}: {e}; {IMPORT_HINT}")
    finally:
        sys.stderr.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved


class Compiler:
    """What the installed rebel offers."""

    def __init__(self, rebel):
        self.rebel = rebel
        model = rebel.RBLNCompiledModel
        self.version = str(getattr(rebel, "__version__", "unknown"))
        self.api = ("per_chiplet" if hasattr(
            model, "get_alloc_per_chiplet_by_key") else "per_node")
        self.can_rescale = hasattr(model, "exp_rescale_buffer_size")
        self.has_tensor_sizes = hasattr(model, "exp_get_dram_tensor_sizes")

    def load(self, path, file):
        try:
            return self.rebel.RBLNCompiledModel(path)
        except Exception as e:
            raise CodecError(
                "UNREADABLE",
                f"{_echo(file)}: rebel-compiler {self.version} cannot load it "
                f"as a compiled model ({type(e).__name__}: {e}); is it a .rbln "
                "file that rebel-compiler wrote?") from e


# Transport ------------------------------------------------------------------


class Channel:
    """The protocol's socket: request lines in, each with the file
    descriptors sent with it, and reply lines out."""

    def __init__(self, sock):
        self._sock = sock
        self._partial = bytearray()
        self._partial_fds = []
        self._partial_too_long = False
        self._lines = []  # complete (line, fds, error) not yet returned

    def receive(self):
        """The next (line bytes, fds, error or None), or None at EOF."""
        while not self._lines:
            data, fds, truncated = self._recv()
            if not data:
                for fd in self._partial_fds + fds:
                    os.close(fd)
                return None
            self._split(data, fds, truncated)
        return self._lines.pop(0)

    def _recv(self):
        space = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        data, ancillary, flags, _ = self._sock.recvmsg(65536, space)
        fds = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                ints = array.array("i")
                ints.frombytes(payload[:len(payload) -
                                       len(payload) % ints.itemsize])
                fds.extend(ints)
        return data, fds, bool(flags & socket.MSG_CTRUNC)

    def _split(self, data, fds, truncated):
        # The kernel hands descriptors over with the first bytes of the
        # sendmsg that carried them, and a read ends with them: so they
        # belong to the last line that starts in this chunk.
        pieces = data.split(b"\n")
        last_start = data.rfind(b"\n", 0, len(data) - 1)
        owner = 0 if last_start < 0 else data[:last_start + 1].count(b"\n")
        for index, piece in enumerate(pieces):
            if index > 0:
                self._finish_line()
            if index == owner and (fds or truncated):
                self._partial_fds.extend(fds)
                if truncated:
                    self._partial_too_long = "fds"
            if len(self._partial) + len(piece) > MAX_LINE_BYTES:
                self._partial_too_long = self._partial_too_long or "line"
                self._partial.clear()
            elif not self._partial_too_long:
                self._partial += piece

    def _finish_line(self):
        error = None
        if self._partial_too_long == "line":
            error = f"the request line is longer than {MAX_LINE_BYTES} bytes"
        elif self._partial_too_long == "fds":
            error = (f"the request carried more than {MAX_FDS} file "
                     "descriptors")
        self._lines.append((bytes(self._partial), self._partial_fds, error))
        self._partial = bytearray()
        self._partial_fds = []
        self._partial_too_long = False

    def send(self, reply):
        line = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
        self._sock.sendall(line.encode("utf-8") + b"\n")


# Requests -------------------------------------------------------------------


def _plain_name(request, key):
    name = request.get(key)
    if (not isinstance(name, str) or not name or "/" in name or
            "\0" in name or name in (".", "..")):
        raise CodecError("BAD_REQUEST",
                         f"{key} must be a plain file name (no '/', not '.' "
                         f"or '..'), not {_echo(name)}")
    return name


def _grid(where, value, num_nodes, buckets):
    """value as [[bytes per bucket] per node], checked: num_nodes lists of
    buckets non-negative integers (buckets None: any non-empty length)."""
    if (isinstance(value, (list, tuple)) and
            (num_nodes is None or len(value) == num_nodes) and all(
                isinstance(node, (list, tuple)) and node and
                (buckets is None or len(node) == buckets) and all(
                    type(size) is int and size >= 0 for size in node)
                for node in value)):
        return [list(node) for node in value]
    raise CodecError(
        "FAILED",
        f"rebel returned {where} = {_echo(repr(value))}, not "
        f"{num_nodes or 'N'} lists of {buckets or 'K'} byte counts; this "
        "adapter does not know this rebel-compiler's API")


def _shape(values):
    """(N, K) of the first [[...] per node] in values, or (None, None)."""
    for value in values:
        if isinstance(value, (list, tuple)) and value and isinstance(
                value[0], (list, tuple)):
            return len(value), len(value[0])
    return None, None


def inspect(compiler, path, file):
    if not compiler.has_tensor_sizes:
        raise CodecError(
            "OLDER_COMPILER",
            f"rebel-compiler {compiler.version} has no "
            "exp_get_dram_tensor_sizes: this compiler is older than the "
            "KV-cache resize needs (it cannot say how large each KV tensor "
            "is); upgrade rebel-compiler")
    model = compiler.load(path, file)
    tensors = model.exp_get_dram_tensor_sizes()
    if compiler.api == "per_chiplet":
        method = "get_alloc_per_chiplet_by_key"
        alloc = model.get_alloc_per_chiplet_by_key()
    else:
        # Each node is one bucket with the whole node's memory, as in
        # optimum-rbln's legacy path.
        method = "get_alloc_per_node_by_key"
        alloc = {key: [[size] for size in sizes]
                 if isinstance(sizes, (list, tuple)) else sizes
                 for key, sizes in model.get_alloc_per_node_by_key().items()}
    num_nodes, buckets = _shape(list(alloc.values()) + list(tensors.values()))
    if num_nodes is None:
        raise CodecError("FAILED", f"{_echo(file)}: rebel reports no memory "
                         f"for it ({method} and exp_get_dram_tensor_sizes "
                         "are empty)")
    other = {key: _grid(f"{method}()[{key!r}]", grid, num_nodes,
                        buckets if compiler.api == "per_chiplet" else 1)
             for key, grid in alloc.items() if key != KV_KEY}
    if compiler.api == "per_chiplet":
        granularity = "chiplet"
        kv_tensors = {name: _grid(f"exp_get_dram_tensor_sizes()[{name!r}]",
                                  grid, num_nodes, buckets)
                      for name, grid in tensors.items()}
    else:
        granularity, buckets = "node", 1
        kv_tensors = {
            name: [[sum(node)] for node in _grid(
                f"exp_get_dram_tensor_sizes()[{name!r}]", grid, num_nodes,
                None)]
            for name, grid in tensors.items()}
    return {"granularity": granularity, "num_nodes": num_nodes,
            "buckets_per_node": buckets, "other": other,
            "kv_tensors": kv_tensors}


def _factors(request):
    factors = request.get("factors")
    if not isinstance(factors, dict) or not factors:
        raise CodecError("BAD_REQUEST", "factors must be a non-empty object "
                         "{tensor name: [target, current]}")
    checked = {}
    for name, pair in factors.items():
        if (not isinstance(pair, list) or len(pair) != 2 or
                any(type(n) is not int or n < 1 for n in pair)):
            raise CodecError("BAD_REQUEST",
                             f"factors[{_echo(name)}] must be [target, "
                             f"current], two integers of at least 1, not "
                             f"{_echo(pair)}")
        checked[name] = (pair[0], pair[1])
    return checked


def rescale(compiler, request, fds):
    out_name = _plain_name(request, "out_name")
    factors = _factors(request)
    if not compiler.can_rescale:
        raise CodecError(
            "OLDER_COMPILER",
            f"rebel-compiler {compiler.version} has no "
            "exp_rescale_buffer_size: this compiler is older than the "
            "KV-cache resize needs; upgrade rebel-compiler (or recompile the "
            "artifact with the count you want)")
    out_path = f"/proc/self/fd/{fds[1]}/{out_name}"
    if os.path.lexists(out_path):
        raise CodecError("BAD_REQUEST",
                         f"{_echo(out_name)} exists in the output directory; "
                         "the codec writes only a new file")
    model = compiler.load(f"/proc/self/fd/{fds[0]}", request["file"])
    model.exp_rescale_buffer_size(factors)
    try:
        model.save(out_path)
    except BaseException:
        # What a failed save left is not a model.
        if os.path.lexists(out_path):
            os.unlink(out_path)
        raise
    return {}


def _request(line):
    """The request object, its id, or a BAD_REQUEST with id null."""
    try:
        request = json.loads(line)
    except ValueError as e:
        raise CodecError("BAD_REQUEST", f"the request is not a line of JSON "
                         f"({e}): {_echo(line.decode('utf-8', 'replace'))}")
    if not isinstance(request, dict):
        raise CodecError("BAD_REQUEST", "the request is not a JSON object")
    if type(request.get("id")) is not int:
        raise CodecError("BAD_REQUEST", "the request has no integer id")
    return request


def handle(compiler, import_error, request, fds):
    """The reply fields of one request (raises CodecError)."""
    op = request.get("op")
    if op not in FDS_OF_OP:
        raise CodecError("BAD_REQUEST", f"unknown op {_echo(op)}; this codec "
                         f"knows {', '.join(FDS_OF_OP)}")
    names = request.get("fds", [])
    if names != FDS_OF_OP[op] or len(fds) != len(names):
        raise CodecError("BAD_REQUEST",
                         f"{op} takes the files {FDS_OF_OP[op]} as "
                         f"descriptors; the request named {_echo(names)} and "
                         f"carried {len(fds)}")
    if op == "hello" and request.get("protocol") != PROTOCOL:
        raise CodecError("BAD_REQUEST",
                         f"protocol {_echo(request.get('protocol'))} is not "
                         f"spoken here; this codec speaks {PROTOCOL}")
    if op != "hello" and not isinstance(request.get("file"), str):
        raise CodecError("BAD_REQUEST", "file must be the file's base name")
    if compiler is None:
        raise CodecError("FAILED", import_error)
    if op == "hello":
        return {"protocol": PROTOCOL, "codec": "rebel",
                "codec_version": compiler.version, "api": compiler.api,
                "can_rescale": compiler.can_rescale}
    if op == "inspect":
        return inspect(compiler, f"/proc/self/fd/{fds[0]}", request["file"])
    return rescale(compiler, request, fds)


def serve(sock, compiler, import_error):
    channel = Channel(sock)
    while True:
        received = channel.receive()
        if received is None:
            return 0
        line, fds, error = received
        request_id = None
        try:
            try:
                if error:
                    raise CodecError("BAD_REQUEST", error)
                request = _request(line)
                request_id = request["id"]
                reply = {"id": request_id, "ok": True}
                reply.update(handle(compiler, import_error, request, fds))
            finally:
                for fd in fds:
                    os.close(fd)
        except CodecError as e:
            reply = {"id": request_id, "ok": False,
                     "error": {"code": e.code, "message": e.message}}
        except Exception as e:  # rebel's errors, whatever their class
            reply = {"id": request_id, "ok": False,
                     "error": {"code": "FAILED",
                               "message": f"{type(e).__name__}: {e}"}}
        channel.send(reply)


def main(argv):
    parser = argparse.ArgumentParser(
        prog="rbln_codec_rebel.py",
        description="An external codec for rbln-artifactd over "
        "rebel-compiler's Python API: rbln-artifactd starts it with "
        "--codec-command and speaks the codec protocol "
        f"(version {PROTOCOL}, docs/codec-protocol.md) with it on fd 0 and "
        "fd 1, one Unix stream socket. Not for interactive use.")
    parser.add_argument("--version", action="store_true",
                        help="print this adapter's version, rebel's version "
                        "and the API generation found, then exit (1 when "
                        "rebel cannot be imported)")
    args = parser.parse_args(argv)
    if args.version:
        compiler, import_error = find_compiler()
        print(f"rbln_codec_rebel {ADAPTER_VERSION} (codec protocol "
              f"{PROTOCOL})")
        if compiler is None:
            print(import_error, file=sys.stderr)
            return 1
        print(f"rebel-compiler {compiler.version}, API {compiler.api}, "
              f"{'can' if compiler.can_rescale else 'cannot'} rescale")
        return 0
    try:
        sock = socket.socket(fileno=os.dup(0))
    except OSError as e:
        print(f"rbln_codec_rebel: fd 0 is not a socket ({e}); rbln-artifactd "
              "starts this codec with one Unix stream socket as fd 0 and fd 1 "
              "(docs/codec-protocol.md)", file=sys.stderr)
        return 2
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        print("rbln_codec_rebel: fd 0 is not a Unix stream socket; "
              "rbln-artifactd starts this codec with one as fd 0 and fd 1 "
              "(docs/codec-protocol.md)", file=sys.stderr)
        return 2
    # Replies go through sock; fd 1 and sys.stdout become stderr, so that
    # nothing rebel prints (from Python or native code) reaches the protocol.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    compiler, import_error = find_compiler()
    if import_error:
        print(f"rbln_codec_rebel: {import_error}", file=sys.stderr)
    try:
        return serve(sock, compiler, import_error)
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the daemon closed its end first: as EOF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
