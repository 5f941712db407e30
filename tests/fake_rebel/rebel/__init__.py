"""A test double for rebel-compiler's Python API (the `rebel` package).

rebel-compiler cannot be installed on the machines that test this project,
and its file format is not public. This package offers the part of its API
that optimum-rbln calls to size the KV cache, over a file format of its own:

    line 1   b"RBLN-FAKE-REBEL 1\\n"
    line 2   one JSON object, then b"\\n":
             {"npu": "RBLN-CA12", "num_nodes": N, "chiplets_per_node": C,
              "alloc": {"<key>": [[bytes per chiplet] per node], ...},
              "dram_tensors": {"<name>": [[bytes per chiplet] per node], ...}}
    rest     opaque payload bytes, to the end of the file

`alloc` holds the memory that is not KV cache ("weights", "program", ...);
`dram_tensors` the KV-cache tensors at the file's current block count. The
file never starts with this project's container magic, so the daemon's
built-in codec never mistakes one for its own.

The environment variable FAKE_REBEL_API, read when the module is imported,
picks the API generation of the compiler being faked:
    per_chiplet  (default) every method below;
    per_node     no get_alloc_per_chiplet_by_key (an older compiler);
    no_rescale   no exp_rescale_buffer_size (an "older rebel-compiler").
A method that a generation lacks is absent from the class (hasattr is
False), as it is in that compiler. FAKE_REBEL_CHATTER=1 makes the module
print to stdout on import and on every load, from Python and at the file
descriptor, as native libraries do, to test that a codec keeps its
protocol stream clean.
"""

import copy
import json
import os
import shutil
import sys

__version__ = "0.0.0+fake"

MAGIC = b"RBLN-FAKE-REBEL 1\n"
API_GENERATIONS = ("per_chiplet", "per_node", "no_rescale")
API = os.environ.get("FAKE_REBEL_API", "per_chiplet")
if API not in API_GENERATIONS:
    raise ImportError(f"FAKE_REBEL_API={API!r} is not one of "
                      f"{', '.join(API_GENERATIONS)}")

# The compiler allocates every DRAM tensor in 2 MiB units.
DRAM_ALIGNMENT = 2 * 1024 * 1024
# The JSON line is a few KiB for a real model; a longer line is not a file
# of this format.
MAX_HEADER_BYTES = 16 * 1024 * 1024
# Payloads can be gigabytes: they are copied in chunks of this size.
COPY_CHUNK_BYTES = 1024 * 1024

_CHATTER = os.environ.get("FAKE_REBEL_CHATTER") == "1"


def _chatter(text):
    if _CHATTER:
        print(f"rebel(fake): {text}")
        sys.stdout.flush()
        os.write(1, f"rebel(fake) native: {text}\n".encode())


_chatter("imported")


def _align(size):
    return -(-size // DRAM_ALIGNMENT) * DRAM_ALIGNMENT


def write_fake_model(path, header, payload):
    """Writes a file of this format: header (the JSON object) and the bytes
    read from the binary file object payload to its end, in chunks. Not
    rebel's API: the fake's own, for tests/fake_rebel/make_fake_artifact.py."""
    with open(os.fspath(path), "wb") as out:
        out.write(MAGIC)
        out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        shutil.copyfileobj(payload, out, COPY_CHUNK_BYTES)


def _check_grid(where, grid, num_nodes, chiplets):
    """A [[bytes per chiplet] per node] list of the declared shape."""
    if (not isinstance(grid, list) or len(grid) != num_nodes or any(
            not isinstance(node, list) or len(node) != chiplets or any(
                type(size) is not int or size < 0 for size in node)
            for node in grid)):
        raise RuntimeError(
            f"{where} is not {num_nodes} lists of {chiplets} byte counts")


def _read_header(path):
    """The JSON object of a fake file and the offset of its payload."""
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise RuntimeError(
                f"{path}: not a compiled model (no RBLN-FAKE-REBEL 1 line)")
        line = f.readline(MAX_HEADER_BYTES + 1)
        if not line.endswith(b"\n"):
            raise RuntimeError(f"{path}: the model description line is cut "
                               "or longer than 16 MiB")
        try:
            header = json.loads(line)
        except ValueError as e:
            raise RuntimeError(f"{path}: bad model description: {e}") from e
        return header, f.tell()


def _check_header(path, header):
    if not isinstance(header, dict):
        raise RuntimeError(f"{path}: the model description is not an object")
    for key, kind in (("npu", str), ("num_nodes", int),
                      ("chiplets_per_node", int), ("alloc", dict),
                      ("dram_tensors", dict)):
        if type(header.get(key)) is not kind:
            raise RuntimeError(f"{path}: {key} is missing or not a "
                               f"{kind.__name__}")
    num_nodes, chiplets = header["num_nodes"], header["chiplets_per_node"]
    if num_nodes < 1 or chiplets < 1:
        raise RuntimeError(f"{path}: num_nodes and chiplets_per_node must "
                           "be at least 1")
    for section in ("alloc", "dram_tensors"):
        for name, grid in header[section].items():
            _check_grid(f"{path}: {section}[{name!r}]", grid, num_nodes,
                        chiplets)


class _CompiledModel:
    """What every API generation has."""

    def __init__(self, path):
        path = os.fspath(path)
        header, self._payload_offset = _read_header(path)
        _check_header(path, header)
        self._path = path
        self._header = header
        # Held open so that save() reads the payload that was loaded, even
        # when the file is then replaced or written over by name.
        self._source = open(path, "rb")
        _chatter(f"loaded {path}")

    def _alloc_per_chiplet(self):
        alloc = copy.deepcopy(self._header["alloc"])
        tensors = self._header["dram_tensors"].values()
        alloc["DramTensor"] = [[
            sum(_align(tensor[node][chiplet]) for tensor in tensors)
            for chiplet in range(self._header["chiplets_per_node"])
        ] for node in range(self._header["num_nodes"])]
        return alloc

    def get_alloc_per_node_by_key(self):
        """{key: [bytes per node]}: get_alloc_per_chiplet_by_key's numbers
        summed over each node's chiplets."""
        return {key: [sum(node) for node in grid]
                for key, grid in self._alloc_per_chiplet().items()}

    def exp_get_dram_tensor_sizes(self):
        """{tensor name: [[bytes per chiplet] per node]}, unaligned."""
        return copy.deepcopy(self._header["dram_tensors"])

    def save(self, path):
        """Writes the model, with its current tensor sizes, to path."""
        self._source.seek(self._payload_offset)
        write_fake_model(path, self._header, self._source)

    def __del__(self):
        source = getattr(self, "_source", None)
        if source is not None:
            source.close()


def _get_alloc_per_chiplet_by_key(self):
    """{key: [[bytes per chiplet] per node]}: the file's "alloc", and
    "DramTensor", per chiplet the KV tensors each aligned to 2 MiB."""
    return self._alloc_per_chiplet()


def _exp_rescale_buffer_size(self, factors):
    """Resizes the named tensors: every (node, chiplet) size becomes
    size * target / current, which must be a whole number. factors:
    {tensor name: (target, current)}. Changes nothing when it raises."""
    tensors = self._header["dram_tensors"]
    resized = {}
    for name, (target, current) in factors.items():
        if name not in tensors:
            raise KeyError(f"{name!r} is not a DRAM tensor of this model "
                           f"(it has {sorted(tensors)})")
        if type(target) is not int or type(current) is not int:
            raise TypeError(f"{name}: target and current must be integers, "
                            f"not {target!r} and {current!r}")
        if target < 1 or current < 1:
            raise ValueError(f"{name}: target {target} and current {current} "
                             "must be at least 1")
        grid = []
        for node in tensors[name]:
            row = []
            for size in node:
                if size * target % current:
                    raise ValueError(
                        f"{name}: {size} bytes * {target} / {current} is not "
                        "a whole number of bytes")
                row.append(size * target // current)
            grid.append(row)
        resized[name] = grid
    tensors.update(resized)


def _compiled_model_class(api):
    methods = {"__doc__": "rebel.RBLNCompiledModel, API generation " + api}
    if api != "per_node":
        methods["get_alloc_per_chiplet_by_key"] = _get_alloc_per_chiplet_by_key
    if api != "no_rescale":
        methods["exp_rescale_buffer_size"] = _exp_rescale_buffer_size
    return type("RBLNCompiledModel", (_CompiledModel,), methods)


RBLNCompiledModel = _compiled_model_class(API)
