"""Progress of a generation as the client sees it (pure): which steps carry a preview, the
preview itself (a small JPEG estimated from the latents without running the VAE), and the
final PNG.

Decoding latents with the VAE costs as much as a step or more; a fixed linear map from the
4 latent channels of Stable Diffusion (1.x, 2.x, SD-Turbo, SDXL) to RGB gives a blurry but
recognisable picture for free (the factors are the ones ComfyUI and A1111 use for their
"latent2rgb" previews). Other latent layouts (SD3, Flux: 16 channels) fall back to the first
three channels, normalised: still a sense of composition, colours are off.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

# rows: latent channels; columns: R, G, B (SD 1.x/2.x/XL latent2rgb)
SD_LATENT_RGB = np.array(
    [
        [0.298, 0.207, 0.208],
        [0.187, 0.286, 0.173],
        [-0.158, 0.189, 0.264],
        [-0.184, -0.271, -0.473],
    ],
    dtype=np.float32,
)


def wants_preview(step: int, steps: int, every: int) -> bool:
    """A preview on every `every`-th step (0: never), not on the last one: the image
    itself follows at once."""
    return every > 0 and 0 < step < steps and step % every == 0


def latents_to_rgb(latents: np.ndarray) -> np.ndarray:
    """(C, H, W) latents → (H, W, 3) uint8."""
    if latents.ndim != 3:
        raise ValueError(f"expected (channels, height, width) latents, got {latents.shape}")
    latents = np.nan_to_num(latents.astype(np.float32))
    if latents.shape[0] == SD_LATENT_RGB.shape[0]:
        rgb = np.einsum("chw,ck->hwk", latents, SD_LATENT_RGB)
        rgb = (rgb + 1.0) / 2.0
    else:
        rgb = np.moveaxis(latents[:3], 0, -1) if latents.shape[0] >= 3 else _grey(latents)
        low, high = float(rgb.min()), float(rgb.max())
        rgb = (rgb - low) / (high - low) if high > low else np.zeros_like(rgb)
    return (np.clip(rgb, 0.0, 1.0) * 255).round().astype(np.uint8)


def preview_jpeg(latents: np.ndarray, max_side: int, quality: int = 70) -> bytes:
    """A JPEG of the picture so far, its longest side `max_side` at most (upscaled from the
    latent grid when smaller: latents are 1/8 of the image)."""
    image = Image.fromarray(latents_to_rgb(latents), "RGB")
    scale = max_side / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    buffer = io.BytesIO()
    image.resize(size, Image.Resampling.BILINEAR).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def png_bytes(image: Image.Image) -> bytes:
    """The delivered image: PNG (lossless, no metadata: the prompt stays in the trace)."""
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, "PNG", optimize=False)
    return buffer.getvalue()


def _grey(latents: np.ndarray) -> np.ndarray:
    one = latents.mean(axis=0)
    return np.stack([one, one, one], axis=-1)
