"""What optimum-rbln-cli answers to --set-kvcache-num-blocks N and
--set-memory-budget BUDGET on an artifact of this project's container format:
an independent reference for tests/parity_test.py.

Written only from upstream's Python source (RBLN-SW/optimum-rbln, the merged
pull requests #637, #638, #639 and #648), never from this project's C++:

  src/optimum/rbln/cli.py
      _handle_kvcache_num_blocks, parse_value, parse_single_value
  src/optimum/rbln/transformers/modeling_attention_utils.py
      _resolve_memory_budget, estimate_num_kvcache_blocks,
      _collect_chiplet_kvcache_inputs, _search_num_kvcache_blocks,
      _kvcache_bytes_per_chiplet, rescale_kvcache_num_blocks, align_2MB
  src/optimum/rbln/utils/runtime_utils.py
      _dram_spec, get_available_dram_per_chiplet, _BYTE_UNITS,
      parse_byte_size
  src/optimum/rbln/transformers/models/decoderonly/configuration_decoderonly.py
      batch_size or 1, num_full_blocks, num_min_blocks (#648)
  src/optimum/rbln/transformers/cache_utils.py
      CacheMeta.from_serialized, can_resize

Upstream asks rebel-compiler's RBLNCompiledModel for two tables per graph;
this module builds them from the graph's container header
(docs/rbln-container.md):

  get_alloc_per_chiplet_by_key()  {key: [node][chiplet] bytes}: one key per
      Allocation, its placements summed per bucket, plus "DramTensor" for the
      graph's KV tensors (rebel files the KV cache under that key).
  exp_get_dram_tensor_sizes()     {tensor name: [node][chiplet] bytes}: each
      KvTensor, its placements summed per bucket.

Both are dense over the header's num_nodes x chiplets_per_node, as rebel
reports every chiplet of every device a graph spans (a chiplet a tensor does
not use holds 0 bytes, which 2 MiB alignment leaves at 0).

Where upstream's code alone does not decide, this reference follows issue
41: a cache meta without `layer_type` (older configs) is a full-attention one
(upstream raises); the NPU is the config's top-level `npu`, else the first
`_compile_cfgs[i].npu`, else the containers' headers (upstream asks the
host's device, which a test host does not have); the deprecated key
`kvcache_metas` is read as `cache_metas`, as upstream's deprecate_kwarg does.
fits_device and max_fitting_num_blocks are not upstream's (it writes a count
"without a device-fit check"): they are its own fit rule at 100% of the
device, which is what the daemon's device check must agree with.

Run as a program it prints what optimum-rbln-cli would print:
  upstream_reference.py DIR --set-memory-budget 0.8
  upstream_reference.py DIR --set-kvcache-num-blocks 12
"""

import argparse
import json
import math
import os
import re
import struct
import sys
from dataclasses import dataclass, field

from rbln.artifact.v1 import container_pb2

# The container's preamble (docs/rbln-container.md, section 3).
_MAGIC = b"\x89RBL\r\n\x1a\n"
_PREAMBLE_BYTES = 128
# A reference reads what the synthesizer writes; a header this big is not one.
_MAX_HEADER_BYTES = 64 << 20

# rebel's allocation key for the KV-cache tensors (modeling_attention_utils.py
# skips it when summing the memory that is not KV cache).
DRAM_TENSOR_KEY = "DramTensor"

# runtime_utils.py: the units parse_byte_size knows, all binary.
_BYTE_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}

# cache_utils.py: the concrete CacheMeta subclasses by their layer_type tag.
_LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")


class UpstreamError(Exception):
    """optimum-rbln-cli would exit 1 with this message ("Error: ...")."""

    refusal = "artifact"


class BudgetError(UpstreamError):
    """The budget does not parse, or is out of range."""

    refusal = "budget"


class BelowMinimumError(UpstreamError):
    """rescale_kvcache_num_blocks' guard: the count is below num_min_blocks."""

    refusal = "below-min"


@dataclass
class Outcome:
    """What optimum-rbln-cli does for one request.

    target: the count it writes, or None when it refuses: error is then its
    message and refusal the kind ("budget", "below-min", "artifact").
    warnings: what it logs on the way. budget_bytes: a budget as it resolved
    it. nothing_fit: the budget search found no count that fits and fell
    back to 1 block (the count may still be refused as below the minimum)."""

    target: int = None
    error: str = None
    refusal: str = None
    warnings: list = field(default_factory=list)
    budget_bytes: int = None
    nothing_fit: bool = False


# Reading this project's containers.


def read_header(path):
    """The ContainerHeader of a .rbln file. Checks the magic and the version
    only: the daemon validates checksums and bounds, the reference just reads
    what a valid file says."""
    with open(path, "rb") as f:
        preamble = f.read(_PREAMBLE_BYTES)
        if len(preamble) != _PREAMBLE_BYTES or preamble[:8] != _MAGIC:
            raise UpstreamError("%s is not an .rbln container" % path)
        major, = struct.unpack_from("<H", preamble, 8)
        if major != 1:
            raise UpstreamError("%s: container version %d" % (path, major))
        header_offset, header_length = struct.unpack_from("<QQ", preamble, 16)
        if header_length > _MAX_HEADER_BYTES:
            raise UpstreamError("%s: header of %d bytes" %
                                (path, header_length))
        f.seek(header_offset)
        data = f.read(header_length)
    if len(data) != header_length:
        raise UpstreamError("%s: truncated header" % path)
    return container_pb2.ContainerHeader.FromString(data)


def _zeros(header):
    """A [node][chiplet] table over the whole header, all 0."""
    return [[0] * header.chiplets_per_node for _ in range(header.num_nodes)]


def _sum_into(table, placements):
    for p in placements:
        table[p.node][p.chiplet] += p.bytes


class CompiledGraph:
    """The two tables upstream reads from rebel.RBLNCompiledModel, from one
    .rbln file of this project's format."""

    def __init__(self, path):
        self.header = read_header(path)

    @property
    def npu(self):
        return self.header.npu

    def alloc_per_chiplet_by_key(self):
        tables = {}
        entries = ([(a.key, a.placements) for a in self.header.allocations] +
                   [(DRAM_TENSOR_KEY, t.placements)
                    for t in self.header.kv_tensors])
        for key, placements in entries:
            _sum_into(tables.setdefault(key, _zeros(self.header)), placements)
        return tables

    def dram_tensor_sizes(self):
        sizes = {}
        for tensor in self.header.kv_tensors:
            if tensor.name in sizes:
                raise UpstreamError("two KV tensors named %r" % tensor.name)
            sizes[tensor.name] = _zeros(self.header)
            _sum_into(sizes[tensor.name], tensor.placements)
        return sizes


# Upstream's rules.


def parse_value(text):
    """How cli.py turns the budget text into a value: JSON first (so "1" is
    the int 1 and "0.8" a float); failing that a boolean word, a list when
    it holds a comma, an int when it is digits (a leading "-" allowed), a
    float when Python's float() takes it, or else the text itself."""
    try:
        return json.loads(text)
    except ValueError:  # json.JSONDecodeError is a ValueError
        pass
    if "," in text and text.lower() not in ("true", "false"):
        return [_scalar(piece.strip()) for piece in text.split(",")]
    return _scalar(text)


def _scalar(text):
    word = text.lower()
    if word in ("true", "false"):
        return word == "true"
    unsigned = text[1:] if text.startswith("-") else text
    if unsigned.isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


# Digits, then letters, with white space around either.
_SIZE = re.compile(r"(\d+)\s*([A-Za-z]*)")


def parse_byte_size(value):
    """Bytes of a budget that is no fraction: an int as it is; a text of
    digits, optionally followed by one of _BYTE_UNITS in any case; never a
    bool, never zero or less."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BudgetError(f"not a byte size: {value!r}")
    if isinstance(value, int):
        nbytes = value
    else:
        found = _SIZE.fullmatch(value.strip())
        unit = found.group(2).upper() if found else None
        if unit is None or (unit and unit not in _BYTE_UNITS):
            raise BudgetError(f"not a whole number of bytes with a unit of "
                              f"{sorted(_BYTE_UNITS)}: {value!r}")
        nbytes = int(found.group(1)) * _BYTE_UNITS.get(unit, 1)
    if nbytes <= 0:
        raise BudgetError(f"a byte size of {nbytes}, not positive")
    return nbytes


def resolve_memory_budget(budget, available_total):
    """The bytes a parsed budget grants over the whole device: None all of
    it; a float, or a text ending in "%", that fraction of it (in (0, 1],
    rounded down by int() after a double-precision product); anything else
    bytes. More than the device is refused."""
    fraction = None
    if budget is None:
        return available_total
    if isinstance(budget, float):
        fraction = budget
    elif isinstance(budget, str) and budget.strip().endswith("%"):
        try:
            fraction = float(budget.strip()[:-1]) / 100
        except ValueError:  # upstream lets float() raise
            raise BudgetError(f"not a percentage: {budget!r}")
    if fraction is None:
        nbytes = parse_byte_size(budget)
    elif 0.0 < fraction <= 1.0:
        nbytes = int(available_total * fraction)
    else:
        raise BudgetError(f"a fraction outside (0, 1]: {budget!r}")
    if nbytes > available_total:
        raise BudgetError(f"{nbytes} bytes, more than the {available_total} "
                          "the device has")
    return nbytes


def dram_spec(npu):
    """runtime_utils.py's _dram_spec: (device DRAM, system reserve per
    chiplet) for an NPU family."""
    if npu.startswith("RBLN-CR"):
        return 144 * 2**30, 1 * 2**30
    if npu.startswith("RBLN-CA"):
        return 16 * 2**30, 288 * 2**20
    raise UpstreamError("Unknown npu name: %s" % npu)


def available_dram_per_chiplet(num_chiplets, npu):
    dram, reserved = dram_spec(npu)
    return dram // num_chiplets - reserved


def align_2mb(nbytes):
    return int(math.ceil(nbytes / 2**21) * 2**21)


# One artifact as upstream sees it.


class Artifact:
    """An artifact directory: rbln_config.json and its *.rbln graphs."""

    def __init__(self, directory):
        self.directory = directory
        with open(os.path.join(directory, "rbln_config.json")) as f:
            self.config = json.load(f)
        config = self.config
        if not ("max_seq_len" in config and "kvcache_block_size" in config):
            raise UpstreamError(
                "The model at '%s' does not expose a top-level resizable "
                "kv-cache. Only decoder-only causal LM artifacts are "
                "supported." % directory)
        self.batch_size = config.get("batch_size") or 1
        self.max_seq_len = config["max_seq_len"]
        self.block_size = config["kvcache_block_size"]
        self.attn_impl = config.get("attn_impl")
        self.kvcache_num_blocks = config.get("kvcache_num_blocks")
        if self.kvcache_num_blocks is None:
            self.kvcache_num_blocks = 0
        self.phases = config.get("phases") or ["prefill", "decode"]
        self.can_resize = self._read_cache_metas(config)
        self.graphs = {}
        for name in sorted(os.listdir(directory)):
            if name.endswith(".rbln"):
                self.graphs[name[:-len(".rbln")]] = CompiledGraph(
                    os.path.join(directory, name))
        if not self.graphs:
            raise UpstreamError(
                "No .rbln compiled models found in '%s'." % directory)

    @staticmethod
    def _read_cache_metas(config):
        """{tensor name: can_resize}, as cache_utils.py's metas say."""
        metas = config.get("cache_metas")
        if metas is None:
            metas = config.get("kvcache_metas") or []
        can_resize = {}
        for meta in metas:
            # Older configs have no layer_type (issue 41: full attention).
            layer_type = meta.get("layer_type") or "full_attention"
            if layer_type not in _LAYER_TYPES:
                raise UpstreamError(f"a cache meta of layer_type "
                                    f"{layer_type!r}, none of "
                                    f"{sorted(_LAYER_TYPES)}")
            if layer_type == "full_attention":
                if "is_auto" not in meta:
                    raise UpstreamError(f"a full-attention meta without "
                                        f"is_auto: {meta.get('name')!r}")
                can_resize[meta["name"]] = bool(meta["is_auto"])
            else:
                can_resize[meta["name"]] = False
        return can_resize

    @property
    def has_resizable_tensor(self):
        return any(self.can_resize.values())

    @property
    def num_full_blocks(self):
        return (self.max_seq_len // self.block_size) * self.batch_size

    @property
    def num_min_blocks(self):
        if self.attn_impl == "flash_attn":
            in_use = max(self.max_seq_len // self.block_size, self.batch_size)
            return min(in_use + 1, self.num_full_blocks)
        return self.batch_size

    @property
    def npu(self):
        if self.config.get("npu"):
            return self.config["npu"]
        for compile_cfg in self.config.get("_compile_cfgs") or []:
            if isinstance(compile_cfg, dict) and compile_cfg.get("npu"):
                return compile_cfg["npu"]
        names = sorted(self.graphs, key=lambda n: (n != "prefill", n))
        for name in names:
            if self.graphs[name].npu:
                return self.graphs[name].npu
        raise UpstreamError("No NPU is available to get available DRAM size.")

    def _prefill(self):
        if "prefill" not in self.graphs:
            raise UpstreamError("'prefill'")  # upstream: KeyError('prefill')
        return self.graphs["prefill"]

    def memory_plan(self):
        """What _collect_chiplet_kvcache_inputs gathers, before the budget:
        other bytes per bucket, KV tensor sizes, the buckets, num_chiplets."""
        other = {}
        buckets = set()
        for graph in self.graphs.values():
            for key, table in graph.alloc_per_chiplet_by_key().items():
                if key == DRAM_TENSOR_KEY:
                    continue
                for node, row in enumerate(table):
                    for chiplet, size in enumerate(row):
                        other[(node, chiplet)] = other.get((node, chiplet),
                                                           0) + size
                        buckets.add((node, chiplet))
        kv_sizes = self._prefill().dram_tensor_sizes()
        for table in kv_sizes.values():
            for node, row in enumerate(table):
                for chiplet in range(len(row)):
                    buckets.add((node, chiplet))
        num_chiplets = max((c for _, c in buckets), default=0) + 1
        return other, kv_sizes, buckets, num_chiplets

    def available_total(self, num_chiplets):
        per_chiplet = available_dram_per_chiplet(num_chiplets, self.npu)
        return per_chiplet * num_chiplets

    def kv_bytes_per_bucket(self, kv_sizes, num_blocks):
        """_kvcache_bytes_per_chiplet: each tensor rescaled from the current
        count, then 2 MiB aligned, per bucket."""
        current = self.kvcache_num_blocks or 1
        per_bucket = {}
        for name, table in kv_sizes.items():
            if name not in self.can_resize:
                raise UpstreamError(repr(name))  # upstream: KeyError(name)
            resizable = self.can_resize[name]
            for node, row in enumerate(table):
                for chiplet, size in enumerate(row):
                    scaled = (size // current * num_blocks if resizable
                              else size)
                    per_bucket[(node, chiplet)] = (
                        per_bucket.get((node, chiplet), 0) + align_2mb(scaled))
        return per_bucket

    def fits(self, num_blocks, per_chiplet, plan=None):
        """check_memory_fits: every bucket holds its other bytes and its KV
        cache at num_blocks within per_chiplet bytes."""
        other, kv_sizes, buckets, _ = plan or self.memory_plan()
        kv = self.kv_bytes_per_bucket(kv_sizes, num_blocks)
        return all(per_chiplet - other.get(b, 0) >= kv.get(b, 0)
                   for b in buckets)

    def search(self, per_chiplet, plan):
        """_search_num_kvcache_blocks: (count, whether any count fit)."""
        full = self.num_full_blocks
        if self.fits(full, per_chiplet, plan):
            return full, True
        left, right, found = 1, full - 1, None
        while left <= right:
            middle = (left + right) // 2
            if self.fits(middle, per_chiplet, plan):
                found, left = middle, middle + 1
            else:
                right = middle - 1
        return (found, True) if found is not None else (1, False)

    # What the CLI does.

    def _rescale(self, target, outcome):
        """rescale_kvcache_num_blocks' guards and warnings."""
        current = self.kvcache_num_blocks
        if current <= 0:
            raise UpstreamError(
                "Cannot rescale kv-cache: the artifact's current "
                "kvcache_num_blocks (%d) is not a resolved positive block "
                "count." % current)
        if target < self.num_min_blocks:
            raise BelowMinimumError(
                "kvcache_num_blocks=%d is below the minimum required for the "
                "full sequence length (num_min_blocks=%d)." %
                (target, self.num_min_blocks))
        if target > current:
            outcome.warnings.append(
                "Requested kvcache_num_blocks=%d exceeds the artifact's "
                "current block count (%d), which was sized to fit device "
                "DRAM; the model may fail to allocate at runtime. Proceeding "
                "without a device-fit check." % (target, current))
        if target > self.num_full_blocks:
            outcome.warnings.append(
                "Requested kvcache_num_blocks=%d exceeds num_full_blocks "
                "(%d), the blocks needed to cover the full batch at "
                "max_seq_len; the excess blocks are never used." %
                (target, self.num_full_blocks))
        outcome.target = target

    def set_kvcache_num_blocks(self, target):
        outcome = Outcome()
        try:
            self._rescale(target, outcome)
        except UpstreamError as error:
            outcome.error, outcome.refusal = str(error), error.refusal
        return outcome

    def set_memory_budget(self, budget_text):
        outcome = Outcome()
        try:
            budget = parse_value(budget_text)
            if "prefill" not in self.phases:
                outcome.warnings.append(
                    "Not estimating number of KV cache blocks since `prefill` "
                    "phase is not in the `phases` list.")
                target = 1
            else:
                plan = self.memory_plan()
                num_chiplets = plan[3]
                outcome.budget_bytes = resolve_memory_budget(
                    budget, self.available_total(num_chiplets))
                target, fit = self.search(
                    outcome.budget_bytes // num_chiplets, plan)
                outcome.nothing_fit = not fit
            self._rescale(target, outcome)
        except UpstreamError as error:
            outcome.error, outcome.refusal = str(error), error.refusal
        return outcome

    # The same memory model at the whole device, for the daemon's device-fit
    # check (issue 41, item 7): upstream itself never checks a count it sets.

    def fits_device(self, num_blocks):
        plan = self.memory_plan()
        return self.fits(num_blocks, self.available_total(plan[3]) // plan[3],
                         plan)

    def max_fitting_num_blocks(self, cap_at_full=True, limit=2**31 - 1):
        """The largest count that fits the whole device, 0 when none does.

        With cap_at_full, upstream's own search at 100% of the device (what
        compiling with memory_budget unset picks), which stops at
        num_full_blocks: more blocks are never used. Without it, the largest
        count the memory holds, however many; None when no tensor resizes
        (every count then costs the same)."""
        plan = self.memory_plan()
        per_chiplet = self.available_total(plan[3]) // plan[3]
        if cap_at_full:
            count, fit = self.search(per_chiplet, plan)
            return count if fit else 0
        if not self.has_resizable_tensor:
            return None
        if not self.fits(1, per_chiplet, plan):
            return 0
        low, high = 1, 2
        while high < limit and self.fits(high, per_chiplet, plan):
            low, high = high, min(2 * high, limit)
        if self.fits(high, per_chiplet, plan):
            return high
        while high - low > 1:  # fits(low), not fits(high)
            middle = (low + high) // 2
            if self.fits(middle, per_chiplet, plan):
                low = middle
            else:
                high = middle
        return low


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--set-kvcache-num-blocks", type=int, metavar="N")
    group.add_argument("--set-memory-budget", metavar="BUDGET")
    args = parser.parse_args(argv)
    try:
        artifact = Artifact(args.artifact)
    except UpstreamError as error:
        print("Error: %s" % error, file=sys.stderr)
        return 1
    if args.set_memory_budget is not None:
        outcome = artifact.set_memory_budget(args.set_memory_budget)
    else:
        outcome = artifact.set_kvcache_num_blocks(args.set_kvcache_num_blocks)
    for warning in outcome.warnings:
        print("warning: %s" % warning, file=sys.stderr)
    if outcome.error is not None:
        print("Error: %s" % outcome.error, file=sys.stderr)
        return 1
    if args.set_memory_budget is not None:
        print("memory_budget %s fits kvcache_num_blocks=%d" %
              (args.set_memory_budget, outcome.target))
    print("Set kvcache_num_blocks to %d for artifact at %s" %
          (outcome.target, os.path.abspath(args.artifact)))
    print("(a reference: nothing was written)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
