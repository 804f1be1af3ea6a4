"""A tiny Stable Diffusion pipeline with random weights, built from configs and saved as a
real diffusers folder (no weights can be downloaded here): a 2-block UNet, a 2-block VAE
(scale factor 2), a 1-layer CLIP text encoder and a CLIP tokenizer on a letters-only BPE
vocabulary written here, an Euler scheduler. It draws noise, but through every part of the
real pipeline (`DiffusionPipeline.from_pretrained` on the folder, text encoding, denoising
steps with callbacks, VAE decoding); a 64x64 image takes tens of milliseconds on a CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import tempfile
from pathlib import Path


def tiny_vocab() -> dict[str, int]:
    """Letters, as word pieces and word ends, plus CLIP's two special tokens (no merges:
    each letter is a token)."""
    vocab: dict[str, int] = {}
    for letter in string.ascii_lowercase:
        vocab[letter] = len(vocab)
    for letter in string.ascii_lowercase:
        vocab[f"{letter}</w>"] = len(vocab)
    for special in ("<|startoftext|>", "<|endoftext|>"):
        vocab[special] = len(vocab)
    return vocab


def build_tiny_diffusion(path: Path) -> Path:
    """Build (once) and save the pipeline under `path`; returns `path`."""
    if (path / "model_index.json").is_file():
        return path
    import torch
    from diffusers import (
        AutoencoderKL,
        EulerDiscreteScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    vocab = tiny_vocab()
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "vocab.json").write_text(json.dumps(vocab))
        (Path(work) / "merges.txt").write_text("#version: 0.2\n")
        tokenizer = CLIPTokenizer(
            str(Path(work) / "vocab.json"), str(Path(work) / "merges.txt"), model_max_length=32
        )
    torch.manual_seed(0)
    end = vocab["<|endoftext|>"]
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=32,
            projection_dim=16,
            bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=end,
            pad_token_id=end,
        )
    )
    unet = UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16,
        attention_head_dim=2,
        norm_num_groups=4,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 8),
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=4,
        sample_size=32,
    )
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        timestep_spacing="trailing",
        steps_offset=1,
    )
    pipeline = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    # built aside, then renamed: a half-written folder is never taken for a model
    building = path.with_name(f"{path.name}.building-{os.getpid()}")
    pipeline.save_pretrained(str(building))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        building.rename(path)
    except OSError:  # built meanwhile by another process
        shutil.rmtree(building, ignore_errors=True)
    return path
