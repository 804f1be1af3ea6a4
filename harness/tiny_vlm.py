"""A tiny random LLaVA (CLIP vision tower + Llama text model) that vLLM loads like a real one.

Same geometry as the real preprocessing: 3x336x336 CLIP-normalised pixels, patch 14, so
576 patch features per image ("default" strategy drops the CLS token) and 576 `<image>`
placeholder tokens in the prompt after vLLM expands the single `<image>` token. The towers
are a few hundred kB of seeded random weights; the tokenizer is the tiny BPE of
`tiny_model` plus an `<image>` special token. Built in a few seconds, fp32.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.tiny_model import build_tiny_model, tiny_llama_config
from workers.preprocess.images import CLIP_MEAN, CLIP_STD

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 336
PATCH_SIZE = 14
NUM_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 576

# ChatML that takes both a plain string (the `<image>` token written into the text) and
# OpenAI-style content parts ({"type": "image"} renders as `<image>`).
CHATML_VL = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' %}{{ '<image>\n' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_llava(out: Path) -> Path:
    """Write a tiny LLaVA model folder at `out` (idempotent) and return it."""
    out = Path(out)
    if (
        (out / "model.safetensors").is_file()
        and (out / "tokenizer.json").is_file()
        and (out / "processor_config.json").is_file()
    ):
        return out
    import torch
    from transformers import (
        AutoTokenizer,
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    out.mkdir(parents=True, exist_ok=True)

    # The text tokenizer of the tiny Llama (same corpus, same BPE), plus `<image>`.
    with tempfile.TemporaryDirectory() as tmp:
        text_dir = build_tiny_model(Path(tmp) / "text")
        tokenizer = AutoTokenizer.from_pretrained(text_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    tokenizer.chat_template = CHATML_VL
    image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)

    vision = CLIPVisionConfig(
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        num_channels=3,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        projection_dim=32,
        hidden_act="quick_gelu",
    )
    text = tiny_llama_config(tokenizer, tie_word_embeddings=False)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_token_id,
        image_seq_length=NUM_IMAGE_TOKENS,
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        tie_word_embeddings=False,
    )
    config.dtype = torch.float32
    config.text_config.dtype = torch.float32
    config.vision_config.dtype = torch.float32
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id

    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config).to(torch.float32)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    image_processor = CLIPImageProcessor(
        do_resize=True,
        size={"shortest_edge": IMAGE_SIZE},
        resample=3,  # bicubic
        do_center_crop=True,
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=list(CLIP_MEAN),
        image_std=list(CLIP_STD),
        do_convert_rgb=True,
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
        chat_template=CHATML_VL,
    )

    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for name in ("config.json", "generation_config.json"):
            shutil.copyfile(Path(tmp, name), out / name)
        # Weights last (atomically): model.safetensors marks the folder complete.
        _nest_clip_weights(Path(tmp, "model.safetensors"), out / "model.safetensors")
    return out


def _nest_clip_weights(src: Path, dst: Path) -> None:
    """transformers 5 saves the CLIP tower flat (`vision_tower.embeddings...`); vLLM's LLaVA
    loader wants the llava-hf layout (`vision_tower.vision_model.embeddings...`), which
    transformers still reads (its CLIPVisionModel conversion strips `vision_model.`)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(src), "pt") as f:
        names = list(f.keys())  # a safetensors handle, not a dict: it has no __iter__
        tensors = {
            (
                "vision_tower.vision_model." + key[len("vision_tower.") :]
                if key.startswith("vision_tower.")
                and not key.startswith("vision_tower.vision_model.")
                else key
            ): f.get_tensor(key)
            for key in names
        }
    partial = dst.with_suffix(".partial")
    save_file(tensors, str(partial), metadata={"format": "pt"})
    partial.replace(dst)
