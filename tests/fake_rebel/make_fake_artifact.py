#!/usr/bin/python3
"""Writes an artifact directory as optimum-rbln saves one, with .rbln files
of the fake rebel (tests/fake_rebel/rebel), from a JSON spec.

    make_fake_artifact.py SPEC --out DIR      (SPEC: a file, or - for stdin)

The spec:
    {"rbln_config": {...},     the decoder's rbln_config.json object
     "models": {"prefill": {...}, "decoder_batch_1": {...}},
                               each the JSON line of a fake .rbln file
                               (rebel/__init__.py), written as NAME.rbln
     "payload_bytes": 4096,    opaque bytes after each model's JSON line
                               (optional, default 4096)
     "companions": {"config.json": "..."},
                               files written as given, beside rbln_config.json
                               (optional)
     "submodule": null}        or "language_model" (optional)

With "submodule": null (flat, a decoder-only model such as Llama), DIR holds
NAME.rbln, rbln_config.json and the companions. With "submodule":
"language_model" it is the layout of a vision-language model, here Llava's,
as optimum-rbln saves it (src/optimum/rbln/modeling.py `from_model`, and
utils/submodule.py: every submodule is saved by its own `from_model` into
DIR/<submodule>/ with its .rbln files, rbln_config.json and config.json; the
parent's rbln_config.json nests each submodule's whole config under its
name; RBLNLlavaForConditionalGeneration itself compiles the multimodal
projector into DIR/compiled_model.rbln, the default compiled model name):

    DIR/rbln_config.json        the Llava config, "language_model" = rbln_config
    DIR/compiled_model.rbln     the projector (no KV cache)
    DIR/<companions>
    DIR/language_model/{NAME.rbln..., rbln_config.json, config.json}
    DIR/vision_tower/{compiled_model.rbln, rbln_config.json, config.json}

Every rbln_config.json is written with json.dump(indent=2), as optimum-rbln's
RBLNModelConfig.save writes it (no newline at the end). DIR's parents are
created; DIR must not exist or be empty. Also importable:
write_artifact(spec, out_dir). Exit codes: 0 written, 1 not written (an
existing non-empty DIR, a write error), 2 a bad spec or usage.
"""

import argparse
import hashlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rebel  # noqa: E402  (the fake, beside this file)

SPEC_KEYS = {"rbln_config", "models", "payload_bytes", "companions",
             "submodule"}
SUBMODULES = (None, "language_model")
DEFAULT_PAYLOAD_BYTES = 4096
# The pattern a payload repeats; each repetition starts with its number, so
# that a payload copied out of order is not equal to the original.
PATTERN_BYTES = 64 * 1024


class SpecError(ValueError):
    """The spec is not one this tool can write."""


class _Payload(io.RawIOBase):
    """size bytes of a pattern derived from name, read in chunks: a payload
    of gigabytes is never held in memory."""

    def __init__(self, name, size):
        super().__init__()
        seed = hashlib.sha256(name.encode()).digest()
        self._pattern = (seed * (PATTERN_BYTES // len(seed) + 1))[:PATTERN_BYTES]
        self._size = size
        self._offset = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        count = min(len(buffer), self._size - self._offset)
        done = 0
        while done < count:
            block, within = divmod(self._offset + done, PATTERN_BYTES)
            chunk = (block.to_bytes(8, "little") +
                     self._pattern[8:])[within:within + count - done]
            buffer[done:done + len(chunk)] = chunk
            done += len(chunk)
        self._offset += count
        return count


def payload_bytes_of(name, size):
    """The payload write_artifact writes for the model name (for tests)."""
    return _Payload(name, size).read()


def _check_spec(spec):
    if not isinstance(spec, dict):
        raise SpecError("the spec is not a JSON object")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise SpecError(f"unknown spec keys {unknown}; known: "
                        f"{sorted(SPEC_KEYS)}")
    if not isinstance(spec.get("rbln_config"), dict):
        raise SpecError("rbln_config must be the rbln_config.json object")
    models = spec.get("models")
    if not isinstance(models, dict) or not models:
        raise SpecError("models must map names (prefill, decoder_batch_1, "
                        "...) to fake model descriptions")
    for name, header in models.items():
        if not name or "/" in name or name in (".", ".."):
            raise SpecError(f"model name {name!r} is not a plain file name")
        try:
            rebel._check_header(f"models[{name!r}]", header)
        except RuntimeError as e:
            raise SpecError(str(e)) from e
    size = spec.get("payload_bytes", DEFAULT_PAYLOAD_BYTES)
    if type(size) is not int or size < 0:
        raise SpecError("payload_bytes must be a non-negative integer")
    companions = spec.get("companions") or {}
    if not isinstance(companions, dict) or any(
            not isinstance(text, str) or "/" in name
            for name, text in companions.items()):
        raise SpecError("companions must map file names to their text")
    if spec.get("submodule") not in SUBMODULES:
        raise SpecError(f"submodule must be null or \"language_model\", not "
                        f"{spec.get('submodule')!r}")


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _write_rbln_config(directory, config):
    """As optimum-rbln's RBLNModelConfig.save: json.dump(indent=2)."""
    with open(os.path.join(directory, "rbln_config.json"), "w") as f:
        json.dump(config, f, indent=2)


def _write_models(directory, models, size):
    for name, header in models.items():
        rebel.write_fake_model(os.path.join(directory, name + ".rbln"), header,
                               _Payload(name, size))


def _make_out_dir(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    if os.listdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not empty; name a "
                              "new directory or empty it first")


def _small_model(npu, chiplets, weights):
    """A fake model without KV cache (a vision tower, a projector)."""
    return {"npu": npu, "num_nodes": 1, "chiplets_per_node": chiplets,
            "alloc": {"weights": [[weights] * chiplets],
                      "program": [[1 << 20] * chiplets]},
            "dram_tensors": {}}


def _write_llava(out_dir, spec, size):
    """The layout of RBLNLlavaForConditionalGeneration.save_pretrained."""
    language_config = spec["rbln_config"]
    first = next(iter(spec["models"].values()))
    npu, chiplets = first["npu"], first["chiplets_per_node"]
    version = language_config.get("optimum_rbln_version", "0.9.3")
    vision_config = {
        "cls_name": "RBLNCLIPVisionModelConfig",
        "npu": npu,
        "tensor_parallel_size": None,
        "_torch_dtype": "float32",
        "optimum_rbln_version": version,
        "_compile_cfgs": [{
            "compiled_model_name": "compiled_model",
            "input_info": [["pixel_values", [1, 3, 336, 336], "float32"]],
            "npu": npu,
            "tensor_parallel_size": 1,
        }],
        "batch_size": 1,
        "image_size": [336, 336],
        "interpolate_pos_encoding": False,
        "output_hidden_states": True,
        "output_attentions": False,
    }
    parent_config = {
        "cls_name": "RBLNLlavaForConditionalGenerationConfig",
        "npu": npu,
        "tensor_parallel_size": None,
        "_torch_dtype": "float32",
        "optimum_rbln_version": version,
        "_compile_cfgs": [{
            "compiled_model_name": "compiled_model",
            "input_info": [["image_features", [1, 576, 1024], "float32"]],
            "npu": npu,
            "tensor_parallel_size": 1,
        }],
        "batch_size": 1,
        "vision_tower": vision_config,
        "language_model": language_config,
    }
    for submodule, config, model_type in (
            ("vision_tower", vision_config, "clip_vision_model"),
            ("language_model", language_config, "llama")):
        directory = os.path.join(out_dir, submodule)
        os.mkdir(directory)
        _write_rbln_config(directory, config)
        _write_text(os.path.join(directory, "config.json"),
                    json.dumps({"model_type": model_type}, indent=2) + "\n")
    _write_models(os.path.join(out_dir, "language_model"), spec["models"],
                  size)
    _write_models(os.path.join(out_dir, "vision_tower"),
                  {"compiled_model": _small_model(npu, chiplets, 600 << 20)},
                  size)
    _write_models(out_dir,
                  {"compiled_model": _small_model(npu, chiplets, 40 << 20)},
                  size)
    _write_rbln_config(out_dir, parent_config)


def write_artifact(spec, out_dir):
    """Writes the artifact of spec (a dict, as described above) into
    out_dir. Raises SpecError for a bad spec (nothing written) and OSError
    when it cannot write."""
    _check_spec(spec)
    size = spec.get("payload_bytes", DEFAULT_PAYLOAD_BYTES)
    _make_out_dir(out_dir)
    for name, text in (spec.get("companions") or {}).items():
        _write_text(os.path.join(out_dir, name), text)
    if spec.get("submodule") == "language_model":
        _write_llava(out_dir, spec, size)
    else:
        _write_models(out_dir, spec["models"], size)
        _write_rbln_config(out_dir, spec["rbln_config"])


def main(argv):
    parser = argparse.ArgumentParser(
        prog="make_fake_artifact.py",
        description="Write an optimum-rbln-style artifact directory of fake "
        "rebel .rbln files from a JSON spec (see this file's docstring).")
    parser.add_argument("spec", help="the JSON spec: a file, or - for stdin")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the artifact directory to write (new or empty)")
    args = parser.parse_args(argv)
    try:
        if args.spec == "-":
            spec = json.load(sys.stdin)
        else:
            with open(args.spec, encoding="utf-8") as f:
                spec = json.load(f)
    except (OSError, ValueError) as e:
        print(f"make_fake_artifact: cannot read the spec {args.spec}: {e}",
              file=sys.stderr)
        return 2
    try:
        write_artifact(spec, args.out)
    except SpecError as e:
        print(f"make_fake_artifact: bad spec {args.spec}: {e}",
              file=sys.stderr)
        return 2
    except OSError as e:
        print(f"make_fake_artifact: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
