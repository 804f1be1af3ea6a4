"""The one module that imports diffusers: a pipeline loaded from a local folder, run one
image at a time (blocking: the service calls it in a thread).

Any diffusers text-to-image pipeline folder works (`model_index.json` names its class):
SD-Turbo and SDXL-Turbo are the fast ones (1-4 steps, guidance 0), classic SD 1.5/2.1 and
SDXL take 20-50 steps with guidance ~7. Nothing is downloaded (`local_files_only`). The
step callback (`callback_on_step_end`) reports each step and is where a cancel lands: it
raises `GenerationCancelled`, which unwinds the pipeline at once (setting the pipeline's
`interrupt` flag would still run the VAE decode on the way out).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from workers.imagegen.errors import GenerationCancelled, GenerationFailed, ModelMissing
from workers.imagegen.request import ImageJob

log = logging.getLogger("turnstream.imagegen")

Latents = Callable[[], np.ndarray]
"""The current latents of the image, (C, H, W), computed only when called (a device copy)."""

OnStep = Callable[[int, Latents], None]
"""Called after each step with its number (1..steps); raises GenerationCancelled to stop."""


class ImagePipeline(Protocol):
    model_name: str
    scale_factor: int  # image sides are multiples of it

    def generate(self, job: ImageJob, *, guidance: float, on_step: OnStep) -> Image.Image:
        """Blocking: the finished image, or GenerationCancelled / GenerationFailed."""


def _device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def _dtype(requested: str, device: str):
    import torch

    if requested == "auto":
        return torch.float16 if device.startswith("cuda") else torch.float32
    try:
        return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[
            requested
        ]
    except KeyError:
        raise ValueError(f"unknown dtype {requested!r}: float16, bfloat16, float32, auto") from None


class DiffusersPipeline:
    def __init__(
        self,
        path: str,
        *,
        name: str = "",
        device: str = "auto",
        dtype: str = "auto",
        cpu_threads: int = 0,
    ) -> None:
        folder = Path(path)
        if not (folder / "model_index.json").is_file():
            raise ModelMissing(f"no diffusers pipeline in {path!r} (model_index.json missing)")
        from diffusers import DiffusionPipeline

        self.device = _device(device)
        if self.device == "cpu" and cpu_threads > 0:
            import torch

            torch.set_num_threads(cpu_threads)  # process-wide: this process runs one pipeline
        self.model_name = name or folder.name
        try:
            pipe = DiffusionPipeline.from_pretrained(
                str(folder), torch_dtype=_dtype(dtype, self.device), local_files_only=True
            )
        except (OSError, ValueError) as err:
            raise ModelMissing(f"cannot load the pipeline in {path!r}: {err}") from err
        pipe.set_progress_bar_config(disable=True)
        self._pipe = pipe.to(self.device)
        self.scale_factor = int(getattr(pipe, "vae_scale_factor", 8))
        log.info("image pipeline %s (%s) on %s", self.model_name, type(pipe).__name__, self.device)

    def generate(self, job: ImageJob, *, guidance: float, on_step: OnStep) -> Image.Image:
        import torch

        # a CPU generator: the same seed draws the same noise on any device
        generator = torch.Generator(device="cpu").manual_seed(job.seed)

        def step_end(_pipe, index: int, _timestep, tensors: dict):
            latents = tensors["latents"]
            on_step(index + 1, lambda: latents[0].detach().float().cpu().numpy())
            return tensors

        try:
            with torch.inference_mode():
                output = self._pipe(
                    prompt=job.prompt,
                    width=job.width,
                    height=job.height,
                    num_inference_steps=job.steps,
                    guidance_scale=guidance,
                    generator=generator,
                    callback_on_step_end=step_end,
                    callback_on_step_end_tensor_inputs=["latents"],
                    output_type="pil",
                )
        except GenerationCancelled:
            raise
        except torch.cuda.OutOfMemoryError as err:
            raise GenerationFailed(f"out of GPU memory at {job.width}x{job.height}") from err
        except Exception as err:  # a pipeline bug or a bad size: the turn ends with an error
            raise GenerationFailed(f"the image pipeline failed: {err!r}"[:500]) from err
        return output.images[0]
