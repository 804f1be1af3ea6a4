"""Images of a turn, from untrusted bytes to the pixel tensor the vision tower takes.

Every function here is pure and synchronous. Decoding and resizing are CPU-bound (Pillow
releases the GIL while it works), so the worker runs `preprocess_image` in a thread, not on
the event loop.

Safety comes from the order of the steps: the format is decided by magic bytes (never by a
declared content type or file name), only that format's Pillow plugin is allowed to parse
the bytes, and the pixel count declared in the header is checked before a single pixel is
decoded, so a 40 KB file that declares 10 gigapixels costs a header read, not 30 GB.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageCms, ImageOps

from workers.preprocess.errors import ImageTooLarge, ImageUnreadable, UnsupportedMedia

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")

_WHITE = (255, 255, 255)
_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What an image may cost (bytes, pixels) and the geometry the vision tower expects."""

    max_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 25_000_000
    max_side: int = 16_384
    target: int = 336
    patch: int = 14
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD

    def __post_init__(self) -> None:
        if min(self.max_bytes, self.max_pixels, self.max_side, self.target, self.patch) <= 0:
            raise ValueError("image limits must be positive")
        if self.target % self.patch:
            raise ValueError(f"target {self.target} is not a multiple of patch {self.patch}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError("mean and std need three channels, std > 0")

    @property
    def pad_colour(self) -> tuple[int, int, int]:
        """The letterbox colour: the normalisation mean, so padding normalises to ~0."""
        r, g, b = (round(m * 255) for m in self.mean)
        return (r, g, b)

    @property
    def num_patches(self) -> int:
        return (self.target // self.patch) ** 2


@dataclass(frozen=True, slots=True, eq=False)
class ProcessedImage:
    """One image ready for the model. `width`/`height` are the source image's size as a viewer
    shows it (after EXIF orientation), not the model's; `pixel_values` is read-only."""

    sha256: str
    width: int
    height: int
    pixel_values: np.ndarray = field(repr=False)
    num_patches: int
    format: str
    view: Image.Image | None = field(default=None, repr=False)  # the letterboxed RGB square


# --- format ---------------------------------------------------------------------------------


def sniff_image_format(data: bytes) -> str:
    """The Pillow format name of `data` from its magic bytes: PNG, JPEG, WEBP or GIF.

    Anything else raises UnsupportedMedia saying what it looks like, so a client that sent an
    SVG or an HTML error page learns why rather than seeing a generic decode failure.
    """
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    raise UnsupportedMedia(_describe_unsupported(data))


def _describe_unsupported(data: bytes) -> str:
    accepted = "accepted: " + ", ".join(ACCEPTED_FORMATS)
    if not data:
        return f"empty data is not an image ({accepted})"
    named = _known_other_format(data)
    if named:
        return f"{named} images are not accepted ({accepted})"
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith(b"<"):
        if b"<svg" in data[:4096].lower():
            return f"SVG is not accepted: vector images are not rasterised ({accepted})"
        if head.startswith((b"<!doctype html", b"<html")):
            return f"got an HTML document, not an image ({accepted})"
        return f"got XML/markup, not an image ({accepted})"
    if _looks_like_text(data[:512]):
        return f"got text, not an image ({accepted})"
    return f"unrecognised bytes, not an image ({accepted})"


def _known_other_format(data: bytes) -> str | None:
    if data.startswith(b"\x1f\x8b"):
        return "gzip-compressed (e.g. SVGZ)"
    if data.startswith(b"BM"):
        return "BMP"
    if data.startswith((b"II*\x00", b"MM\x00*")):
        return "TIFF"
    if data.startswith(b"%PDF"):
        return "PDF"
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand in (b"avif", b"avis"):
            return "AVIF"
        if brand in (b"heic", b"heix", b"hevc", b"heim", b"heis", b"mif1", b"msf1"):
            return "HEIC/HEIF"
    if data.startswith(b"\x00\x00\x01\x00"):
        return "ICO"
    return None


def _looks_like_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\t\r\n" for c in text)


# --- decode ---------------------------------------------------------------------------------


def decode_image(data: bytes, limits: ImageLimits) -> Image.Image:
    """Decode untrusted bytes into an upright 8-bit sRGB RGB image at full resolution.

    Raises ImageTooLarge (bytes, pixels, side, decompression bombs), ImageUnreadable (corrupt
    or truncated), UnsupportedMedia (not one of the accepted formats).
    """
    return _decode(data, limits, draft=None).image


@dataclass(frozen=True, slots=True)
class _Decoded:
    image: Image.Image
    width: int  # the source's size as displayed (after orientation), whatever draft did
    height: int
    format: str


def _decode(data: bytes, limits: ImageLimits, *, draft: tuple[int, int] | None) -> _Decoded:
    """Decode to RGB, keeping the source size as displayed (after EXIF orientation).

    `draft` lets JPEG decode at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling) while both sides
    stay >= draft: for a model input of 336 px this makes a 12 MP photo ~10x cheaper.

    Pillow's own bomb check (`Image.MAX_IMAGE_PIXELS`, a process-wide global, 89 MP by
    default) is left alone: changing it would change every other Pillow user in the process,
    and `warnings.catch_warnings` is not thread-safe on 3.11. Our header check below is the
    binding one; Pillow's is a looser second net whose DecompressionBombError we translate.
    (Pillow may still *warn* for an image between its limit and twice it before we refuse.)
    """
    if len(data) > limits.max_bytes:
        raise ImageTooLarge(f"image is {len(data)} bytes, over the {limits.max_bytes} limit")
    fmt = sniff_image_format(data)
    try:
        img = Image.open(io.BytesIO(data), formats=[fmt])  # lazy: reads the header only
    except Image.DecompressionBombError as e:
        raise ImageTooLarge(f"decompression bomb refused: {e}") from e
    except MemoryError:
        raise
    except Exception as e:  # any parser failure on untrusted bytes means "unreadable"
        raise ImageUnreadable(f"cannot read {fmt} header: {e}") from e
    _check_declared_size(img.size, limits)
    width, height = img.size
    if draft is not None and fmt == "JPEG":
        img.draft(img.mode, draft)
    try:
        img.load()
    except Image.DecompressionBombError as e:
        raise ImageTooLarge(f"decompression bomb refused: {e}") from e
    except MemoryError:
        raise
    except Exception as e:  # Pillow's decoders raise OSError mostly, but not only
        raise ImageUnreadable(f"corrupt or truncated {fmt}: {e}") from e
    before = img.size
    _exif_upright(img)
    if img.size != before:  # a 90/270 degree orientation swapped the sides
        width, height = height, width
    return _Decoded(_to_srgb_rgb(img), width, height, fmt)


def _check_declared_size(size: tuple[int, int], limits: ImageLimits) -> None:
    width, height = size
    if width <= 0 or height <= 0:
        raise ImageUnreadable(f"image declares an empty size {width}x{height}")
    if max(width, height) > limits.max_side:
        raise ImageTooLarge(f"image is {width}x{height}, a side over {limits.max_side} px")
    if width * height > limits.max_pixels:
        raise ImageTooLarge(
            f"image is {width}x{height} = {width * height} pixels, "
            f"over the {limits.max_pixels} limit"
        )


def _exif_upright(img: Image.Image) -> None:
    """Apply the EXIF Orientation tag in place (no copy of a 12 MP frame). Best effort:
    malformed EXIF leaves the image as it is, because a sideways photo beats refusing it."""
    try:
        ImageOps.exif_transpose(img, in_place=True)
    except (OSError, SyntaxError, ValueError, TypeError, KeyError, IndexError):
        return


def _to_srgb_rgb(img: Image.Image) -> Image.Image:
    """Any decoded mode to 8-bit RGB in sRGB: 16-bit scaled (Pillow would clip), palette and
    alpha flattened onto white, CMYK converted, an embedded ICC profile honoured."""
    img = _to_icc_compatible_mode(img)
    img = _apply_icc_profile(img)
    if img.mode == "RGBA":
        flat = Image.new("RGB", img.size, _WHITE)
        flat.paste(img, mask=img.getchannel("A"))
        return flat
    return img if img.mode == "RGB" else img.convert("RGB")


def _to_icc_compatible_mode(img: Image.Image) -> Image.Image:
    """Bring exotic modes down to RGB, RGBA, L or CMYK, keeping transparency."""
    icc = img.info.get("icc_profile")
    mode = img.mode
    if mode in _SIXTEEN_BIT_MODES:  # 16-bit PNG grey; a 32-bit "I" is read as 16-bit too
        wide = np.clip(np.asarray(img).astype(np.int64), 0, 65535)
        out = Image.fromarray((wide >> 8).astype(np.uint8))
    elif mode in ("P", "PA", "LA", "La", "RGBa"):
        has_alpha = mode != "P" or "transparency" in img.info
        out = img.convert("RGBA" if has_alpha else "RGB")
    elif mode in ("L", "RGB") and "transparency" in img.info:
        out = img.convert("RGBA")
    elif mode in ("RGB", "RGBA", "L", "CMYK"):
        out = img
    else:  # "1", "YCbCr", "F", ...
        out = img.convert("RGB")
    if icc and out is not img:
        out.info["icc_profile"] = icc
    return out


def _apply_icc_profile(img: Image.Image) -> Image.Image:
    """Convert from the embedded ICC profile to sRGB (a Display P3 phone photo otherwise looks
    washed out). Best effort: a broken or mismatched profile is ignored, not fatal."""
    icc = img.info.get("icc_profile")
    if not icc:
        return img
    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        converted = ImageCms.profileToProfile(
            img,
            source,
            _SRGB,
            renderingIntent=ImageCms.Intent.PERCEPTUAL,
            outputMode="RGBA" if img.mode == "RGBA" else "RGB",
        )
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return img
    return converted if converted is not None else img


_SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


# --- geometry -------------------------------------------------------------------------------


def resize_for_model(img: Image.Image, limits: ImageLimits) -> Image.Image:
    """Letterbox to target x target: fit the longer side (bicubic), centre, pad with the mean
    colour. Like LLaVA's "pad" aspect mode, but resizing before padding so the padding itself
    is never resampled."""
    if img.mode != "RGB":
        raise ValueError(f"resize_for_model takes RGB, got {img.mode}")
    target = limits.target
    width, height = img.size
    scale = target / max(width, height)
    new_w = min(target, max(1, round(width * scale)))
    new_h = min(target, max(1, round(height * scale)))
    # reducing_gap=3 first shrinks by an integer factor with a box filter: much faster on
    # large sources and, per Pillow's docs, indistinguishable from full bicubic at >= 3.
    fitted = img.resize((new_w, new_h), Image.Resampling.BICUBIC, reducing_gap=3.0)
    canvas = Image.new("RGB", (target, target), limits.pad_colour)
    canvas.paste(fitted, ((target - new_w) // 2, (target - new_h) // 2))
    return canvas


def to_patches(img: Image.Image, limits: ImageLimits) -> np.ndarray:
    """The normalised pixel tensor (3, H, W) float32: (x / 255 - mean) / std per channel.

    Named for its role (what the patch embedding consumes); `patchify` cuts it into patches.
    """
    if img.mode != "RGB":
        raise ValueError(f"to_patches takes RGB, got {img.mode}")
    hwc = np.asarray(img, dtype=np.float32)
    mean = np.asarray(limits.mean, dtype=np.float32)
    std = np.asarray(limits.std, dtype=np.float32)
    scale = (1.0 / (255.0 * std)).astype(np.float32)
    offset = (-mean / std).astype(np.float32)
    chw = hwc.transpose(2, 0, 1) * scale[:, None, None] + offset[:, None, None]
    return np.ascontiguousarray(chw, dtype=np.float32)


def patchify(tensor: np.ndarray, patch: int) -> np.ndarray:
    """(C, H, W) -> (num_patches, C * patch * patch), patches in row-major order and each
    flattened as (C, patch, patch): the layout a stride-`patch` Conv2d patch embedding sees."""
    if tensor.ndim != 3:
        raise ValueError(f"expected (C, H, W), got shape {tensor.shape}")
    channels, height, width = tensor.shape
    if height % patch or width % patch:
        raise ValueError(f"{height}x{width} is not a multiple of patch {patch}")
    rows, cols = height // patch, width // patch
    grid = tensor.reshape(channels, rows, patch, cols, patch).transpose(1, 3, 0, 2, 4)
    return grid.reshape(rows * cols, channels * patch * patch)


# --- the whole step -------------------------------------------------------------------------


def preprocess_image(data: bytes, limits: ImageLimits) -> ProcessedImage:
    """Untrusted bytes to a ProcessedImage, hashed on the original bytes (the blob-store key
    and the dedup key for an image sent twice)."""
    decoded = _decode(data, limits, draft=(limits.target, limits.target))
    view = resize_for_model(decoded.image, limits)
    pixels = to_patches(view, limits)
    pixels.setflags(write=False)
    _, h, w = pixels.shape
    return ProcessedImage(
        sha256=hashlib.sha256(data).hexdigest(),
        width=decoded.width,
        height=decoded.height,
        pixel_values=pixels,
        num_patches=(h // limits.patch) * (w // limits.patch),
        format=decoded.format,
        view=view,
    )
